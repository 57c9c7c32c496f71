"""Issue 12's model proof: the GPT-style decoder and the CNN (torch_npu/testing/models.py) train
20 AdamW steps under torch.autocast("npu", bfloat16), and under float16 with a GradScaler, and
their losses track the same recipe run with the CPU's autocast.

Tolerances: each loss is float32 computed from half-precision logits, so one rounding of the
logits moves it by about the format's unit roundoff (bfloat16 2^-9 = 2e-3, float16 2^-12 = 2.4e-4
relative). The two runs round different ops: npu follows CUDA's autocast lists, the CPU its own,
and the half kernels sum in different orders, and 20 optimizer steps carry those differences
forward. Allowing about four roundings (8e-3 for bfloat16, 1e-3 for float16) covers the largest
differences seen (GPT 2.3e-4 / 3.8e-5, CNN 1.4e-3 / 2.4e-4) while a kernel computing in the
wrong precision, a skipped unscale or a wrong scale update moves the losses far more."""

import pytest
import torch

import torch_npu
from torch_npu.testing import models

RTOL = {torch.bfloat16: 8e-3, torch.float16: 1e-3}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16+scaler"])
@pytest.mark.parametrize("kind", ["gpt", "cnn"])
def test_model_trains_under_autocast_like_cpu(kind, dtype):
    fallback_before = dict(torch_npu._C._fallback_ops())
    npu = models.train_mixed(kind, "npu", dtype)
    cpu = models.train_mixed(kind, "cpu", dtype)
    assert dict(torch_npu._C._fallback_ops()) == fallback_before  # nothing left the npu
    assert len(npu) == len(cpu) == 20
    for step, (n, c) in enumerate(zip(npu, cpu)):
        assert abs(n - c) <= RTOL[dtype] * abs(c), f"step {step}: npu {n} cpu {c}"
    assert npu[-1] < npu[0]  # it learns
