"""The cases that SimNPU's benchmark times and its tests check: one table serves both.

Each case builds the same work for a device and returns a `run` callable whose result is
compared between the CPU and the npu (tests/python/test_cases.py) and whose time is compared
between them (benchmarks/ops_bench.py, npu/cpu ratio against `goal`). To add a case: write its
`make(device)` and add one row to CASES; both readers pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import models

# make(device) -> (run, calls): `run()` does `calls` units of work (the time is per unit) and
# returns what the tests compare; it never synchronizes the device itself.
Make = Callable[[str], "tuple[Callable[[], Any], int]"]


@dataclass(frozen=True)
class Case:
    name: str
    make: Make
    goal: float         # npu time / cpu time the benchmark should meet
    rtol: float = 1e-4  # the tests' tolerance, npu result vs cpu result
    atol: float = 1e-5


def add_one_loop(device: str, n: int = 2000):
    """Per-op overhead: a chain of 1-element adds (each waits for the previous one)."""
    x = torch.ones(1, device=device)

    def run():
        y = x
        for _ in range(n):
            y = y + 1
        return y
    return run, n


def matmul(size: int) -> Make:
    def make(device: str):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=g).to(device)
        b = torch.randn(size, size, generator=g).to(device)
        return (lambda: torch.mm(a, b)), 1
    return make


def matmul_16bit(size: int, dtype: torch.dtype) -> Make:
    """float16 / bfloat16 GEMM (float32 accumulation on both devices)."""
    def make(device: str):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=g).to(dtype).to(device)
        b = torch.randn(size, size, generator=g).to(dtype).to(device)
        return (lambda: torch.mm(a, b)), 1
    return make


def fused_adamw_step(numel: int = 10_000_000, tensors: int = 10) -> Make:
    """One AdamW(fused=True) step over `numel` parameters in `tensors` tensors (the CPU runs
    its own fused kernel). Returns the first parameter (a view: returning costs no work)."""
    def make(device: str):
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(numel // tensors, generator=g).to(device).requires_grad_()
                  for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(device)
        opt = torch.optim.AdamW(params, lr=1e-3, fused=True)

        def run():
            opt.step()
            return params[0].detach()
        return run, 1
    return make


def add_16m(device: str):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(1 << 24, generator=g).to(device)
    b = torch.rand(1 << 24, generator=g).to(device)
    return (lambda: torch.add(a, b)), 1


def _training_run(opt, compute_loss, steps: int):
    """(run, steps): `run()` takes `steps` optimizer steps on compute_loss() and returns the losses
    as one tensor (reading them would synchronize)."""
    def step():
        opt.zero_grad()
        loss = compute_loss()
        loss.backward()
        opt.step()
        return loss.detach()

    def run():
        return torch.stack([step() for _ in range(steps)])
    return run, steps


def default_batch(kind: str) -> int:
    """The batch the training cases use (train_bench.py also times 4x it)."""
    return 32 if kind == "cnn" else 16


def train_steps(kind: str, steps: int = 20, autocast: torch.dtype | None = None,
                batch: int | None = None, d: int | None = None) -> Make:
    """`steps` AdamW steps of a test model on one batch, synchronized only at the end, so the
    host's launches overlap the device's work as in a real training loop. Returns the losses
    (as tensors: reading them would synchronize). With `autocast` (bfloat16), the forward and
    loss run under torch.autocast(device, autocast) on both devices. `batch` defaults to
    default_batch(kind); `d` picks the LLaMA-style model's width (models.LLAMA_SIZES)."""
    def make(device: str):
        torch.manual_seed(0)
        model_kwargs, data_kwargs = {}, {}
        if kind == "llama":
            model_kwargs = models.LLAMA_SIZES[d or 32]
            data_kwargs = dict(vocab=model_kwargs["vocab"], seq=model_kwargs["block"])
        model = models.make_model(kind, **model_kwargs).to(device)
        opt = models.make_optimizer("adamw", model.parameters())
        x, y = next(models.batches(kind, 1, batch=batch or default_batch(kind), **data_kwargs))
        x, y = x.to(device), y.to(device)

        def compute_loss():
            with torch.autocast(device, dtype=autocast or torch.float32,
                                enabled=autocast is not None):
                return models.loss_fn(kind, model(x), y)
        return _training_run(opt, compute_loss, steps)
    return make


def hf_llama_steps(steps: int = 10) -> Make:
    """AdamW steps of a tiny Hugging Face LLaMA (transformers' own model code, sdpa attention:
    the flash kernel on npu), one batch of 4 x 64 tokens."""
    def make(device: str):
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=128, attn_implementation="sdpa")
        model = LlamaForCausalLM(config).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
        return _training_run(opt, lambda: model(input_ids=ids, labels=ids).loss, steps)
    return make


CASES = [
    Case("x+1 loop (1 element, per op)", add_one_loop, goal=1.1),
    Case("matmul 1024x1024 fp32", matmul(1024), goal=1.05, rtol=1e-4, atol=1e-3),
    Case("matmul 2048x2048 fp32", matmul(2048), goal=1.05, rtol=1e-4, atol=1e-3),
    Case("matmul 1024x1024 bf16", matmul_16bit(1024, torch.bfloat16), goal=1.0, rtol=1.6e-2, atol=0.5),
    Case("matmul 2048x2048 bf16", matmul_16bit(2048, torch.bfloat16), goal=1.0, rtol=1.6e-2, atol=0.5),
    # float16 GEMM: PyTorch's CPU takes seconds per call where the CPU lacks AVX512-FP16 (this
    # one), so 2048 is only in benchmarks/matmul16_bench.py, which times it fewer times.
    Case("matmul 1024x1024 fp16", matmul_16bit(1024, torch.float16), goal=1.0, rtol=2e-3, atol=0.1),
    Case("add 16M fp32", add_16m, goal=1.0),
    Case("fused AdamW step, 10M params", fused_adamw_step(), goal=1.0),
    Case("train step MLP", train_steps("mlp"), goal=0.8),
    Case("train step CNN", train_steps("cnn"), goal=0.8),
    Case("train step GPT-style", train_steps("gpt"), goal=0.8),
    # Written as people write it without fused kernels (models.LLaMA): attention spelled out,
    # RMSNorm and rotary embeddings from elementwise ops, tied embeddings; AdamW's default
    # (foreach, not fused). 10 steps at d=128 (16 x 64 tokens).
    Case("train step LLaMA-style d=32", train_steps("llama", d=32), goal=0.8),
    Case("train step LLaMA-style d=128", train_steps("llama", steps=10, d=128), goal=0.8),
    # bfloat16 logits: the losses differ by a few bfloat16 roundings over 20 steps (see
    # tests/python/test_models_amp.py for the tolerance).
    Case("train step GPT-style autocast bf16", train_steps("gpt", autocast=torch.bfloat16),
         goal=1.0, rtol=8e-3, atol=1e-3),
    Case("train step HF tiny LLaMA", hf_llama_steps(), goal=1.0, rtol=1e-4, atol=1e-4),
]
