"""torch_npu.contrib.function: functional helpers beside the core API (npu_functional)."""
