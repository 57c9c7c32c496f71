"""The boxed CPU fallback: results equal the CPU's, one warning per op, a counter per op, and
TORCH_NPU_FALLBACK_CPU_DISABLE=1 turning it into an error that names the op and the variable.

Most ops without an npu kernel run ATen's CPU kernel on the stream instead (test_host_kernel.py);
the fallback is left for ops without a meta kernel, such as aten::binomial and
aten::batch_norm_update_stats used here."""

import re

import torch

import torch_npu

WARNING = ("Warning: CAUTION: The operator '{op}' is not currently supported on the NPU backend "
           "and will fall back to run on the CPU. This may have performance implications.")


def test_fallback_results_match_cpu():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)
    assert torch.allclose((a.npu() @ b.npu()).cpu(), a @ b)
    for got, want in zip(torch.ops.aten.batch_norm_update_stats(a.npu(), None, None, 0.1),
                         torch.ops.aten.batch_norm_update_stats(a, None, None, 0.1)):
        assert torch.allclose(got.cpu(), want)
    assert torch.equal(a.npu().sort(dim=1).values.cpu(), a.sort(dim=1).values)
    x = a.npu()
    x.add_(1).mul_(2)  # in-place ops fall back and write back into the npu tensor
    assert torch.allclose(x.cpu(), (a + 1) * 2)


def test_fallback_counter_table():
    before = torch_npu._C._fallback_ops().get("aten::batch_norm_update_stats", 0)
    t = torch.arange(6.0, device="npu")
    for _ in range(3):
        torch.ops.aten.batch_norm_update_stats(t.view(2, 3), None, None, 0.1)
    counts = torch_npu._C._fallback_ops()
    assert counts["aten::batch_norm_update_stats"] == before + 3
    assert all(isinstance(k, str) and v > 0 for k, v in counts.items())


def test_warning_is_printed_once_per_op(python):
    code = """
import torch, torch_npu
t = torch.arange(6.0).npu()
for _ in range(3):
    torch.ops.aten.batch_norm_update_stats(t.view(2, 3), None, None, 0.1)
    torch.binomial(t, torch.full_like(t, 0.5))
print(sorted(torch_npu._C._fallback_ops().items()))
"""
    r = python(code)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "CAUTION" in ln]
    assert lines.count(WARNING.format(op="aten::batch_norm_update_stats")) == 1, r.stderr
    assert lines.count(WARNING.format(op="aten::binomial")) == 1, r.stderr
    assert len(lines) == 2, r.stderr
    assert "('aten::batch_norm_update_stats', 3)" in r.stdout


def test_disabling_the_fallback_raises_naming_op_and_variable(python):
    code = """
import torch, torch_npu
t = torch.arange(6.0).npu()
t2 = (t.cpu() * 0 + 1).npu()      # native copies and fills still work
torch.manual_seed(0); r = torch.randn(4, device='npu')  # native RNG still works
try:
    torch.ops.aten.batch_norm_update_stats(t.view(2, 3), None, None, 0.1)
    print("no error")
except NotImplementedError as e:
    print("NotImplementedError")
    print(str(e).splitlines()[0])
print(torch_npu._C._fallback_ops())
"""
    r = python(code, env={"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "NotImplementedError", r.stdout
    assert re.fullmatch(
        r"The operator \[aten::batch_norm_update_stats\] is not supported on NPU and "
        r"TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids the CPU fallback; unset it to run the op on "
        r"the CPU", out[1]), out[1]
    assert out[2] == "{}"
    assert "CAUTION" not in r.stderr


def test_random_ops_that_fall_back_use_the_npu_generator():
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device="npu")
    torch.npu.manual_seed(5)
    first = torch.multinomial(w, 4).cpu()
    torch.default_generator.manual_seed(1234)  # the CPU generator must not matter
    torch.npu.manual_seed(5)
    again = torch.multinomial(w, 4).cpu()
    assert torch.equal(first, again)
    g = torch.Generator(device="npu").manual_seed(9)
    with_gen = torch.multinomial(w, 4, generator=g).cpu()
    g.manual_seed(9)
    assert torch.equal(torch.multinomial(w, 4, generator=g).cpu(), with_gen)
    assert sorted(with_gen.tolist()) == sorted(set(with_gen.tolist()))  # no replacement
