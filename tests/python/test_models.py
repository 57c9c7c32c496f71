"""Issue 4's proof: an MLP, a small CNN and a GPT-style decoder (torch_npu/testing/models.py) train
20 steps on npu with the CPU fallback forbidden, with SGD (momentum) and AdamW (the default
foreach path), every op on the kernel library (no ATen host kernel either), and their losses
match the same model trained on the CPU (the CNN's in full float32 with
torch.npu.conv.allow_hf32 = False, and within HF32's error under torch_npu's default)."""

import pytest

from torch_npu.testing import models

RTOL = 1e-4
# The CNN's convolutions read float32 operands as HF32 by default, as on a 910B
# (torch.npu.conv.allow_hf32 = True; tests/python/test_hf32.py): 2^-11 relative per operand.
# Its losses are compared at RTOL with HF32 off, and at HF32_RTOL under the default.
HF32_RTOL = 2e-3

CASES = [(kind, opt) for kind in ("mlp", "cnn", "gpt") for opt in ("sgd", "adamw")]


@pytest.mark.parametrize("kind,optimizer", CASES)
def test_model_trains_like_cpu_without_fallback(python, kind, optimizer):
    # A fresh interpreter: TORCH_NPU_FALLBACK_CPU_DISABLE is read at start-up, and any op that
    # would fall back raises instead of running.
    r = python(f"""
import json
import torch, torch_npu
from torch_npu.testing import models
cpu = models.train({kind!r}, "cpu", {optimizer!r})
npu = models.train({kind!r}, "npu", {optimizer!r})
torch.npu.conv.allow_hf32 = False
npu_fp32 = models.train({kind!r}, "npu", {optimizer!r}) if {kind!r} == "cnn" else npu
print(json.dumps({{"cpu": cpu, "npu": npu, "npu_fp32": npu_fp32,
                  "fallback": torch_npu._C._fallback_ops(),
                  "host": torch_npu._C._host_kernel_ops(),
                  "host_sync": torch_npu._C._host_kernel_ops(synchronizing=True)}}))
""", env={"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["fallback"] == {}
    # Every op of these models is a kernel of the library: none runs ATen's CPU kernel.
    assert out["host"] == {} and out["host_sync"] == {}, (out["host"], out["host_sync"])
    cpu, npu, npu_fp32 = out["cpu"], out["npu"], out["npu_fp32"]
    assert len(cpu) == len(npu) == len(npu_fp32) == 20
    rtol = HF32_RTOL if kind == "cnn" else RTOL
    for step, (c, n, f) in enumerate(zip(cpu, npu, npu_fp32)):
        assert abs(c - n) <= rtol * abs(c), f"step {step}: cpu {c} npu {n}"
        assert abs(c - f) <= RTOL * abs(c), f"step {step}: cpu {c} npu without HF32 {f}"
    assert npu[-1] < npu[0]  # it learns


def test_gpt_with_dropout_trains_and_is_reproducible(python):
    # With p > 0 the masks come from the npu generator, so the losses differ from the CPU's;
    # the run must still learn, and two runs with one seed must agree exactly.
    r = python(f"""
import json
import torch, torch_npu
from torch_npu.testing import models
a = models.train("gpt", "npu", "adamw", dropout=0.1)
b = models.train("gpt", "npu", "adamw", dropout=0.1)
c = models.train("gpt", "npu", "adamw", dropout=0.0)
print(json.dumps([a, b, c]))
""", env={"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    a, b, c = json.loads(r.stdout.strip().splitlines()[-1])
    assert a == b
    assert a != c
    assert a[-1] < a[0]
