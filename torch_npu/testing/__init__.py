"""Helpers for testing code on npu, shared by SimNPU's own tests and benchmarks.

`torch_npu.testing.models`: small models (an MLP, a CNN, a GPT-style decoder), a seeded batch
generator and a training loop that records losses; no downloads.
"""
