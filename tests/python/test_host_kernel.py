"""ATen's CPU kernels as npu device kernels (adapter/ops/ExecutionPaths.h): an op without a kernel of
ours but with a meta kernel runs asynchronously on the stream; data-dependent ops synchronize;
results equal the CPU's and the op report counts each path."""

import torch

import torch_npu


def sample(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_async_host_kernel_runs_after_queued_work():
    a = sample(64, 64)
    x = a.npu()
    torch.sinc(x[:1]).cpu()               # the first call loads Python meta kernels (seconds)
    torch_npu._C._npu_sleep(1000)         # the stream is busy for 1 s (long enough under load)
    y = torch.sinc(x)                     # queued behind the sleep: the host does not wait
    assert not torch.npu.current_stream().query()
    assert torch.allclose(y.cpu(), torch.sinc(a))
    assert torch_npu._C._host_kernel_ops()["aten::sinc.out"] >= 1


def test_out_variant_is_resized_and_in_place_writes_through():
    a, b = sample(5, 7), sample(7, 3, seed=1)
    out = torch.empty(0, device="npu")
    torch.mm(a.npu(), b.npu(), out=out)   # resized on the npu, then written by the CPU kernel
    assert out.shape == (5, 3) and torch.allclose(out.cpu(), a @ b)
    x = a.npu()
    x.exp2_()                             # in place on a view of device memory
    assert torch.allclose(x.cpu(), a.exp2())


def test_non_contiguous_and_list_results():
    a = sample(6, 8)
    x = a.npu().t()                       # a transposed view
    assert torch.allclose(torch.cummax(x, 1).values.cpu(), torch.cummax(a.t(), 1).values)
    parts = torch.ops.aten.split_with_sizes_copy(a.npu(), [2, 4], 0)   # returns Tensor[]
    assert [p.device.type for p in parts] == ["npu", "npu"]
    for got, want in zip(parts, torch.ops.aten.split_with_sizes_copy(a, [2, 4], 0)):
        assert torch.equal(got.cpu(), want)


def test_data_dependent_ops_synchronize_and_match_cpu():
    a = sample(10, 10)
    x = a.npu()
    assert torch.equal(torch.nonzero(x > 0).cpu(), torch.nonzero(a > 0))
    assert torch.equal(x[x > 0.5].cpu(), a[a > 0.5])
    assert torch.equal(torch.masked_select(x, x < 0).cpu(), torch.masked_select(a, a < 0))
    r = torch.tensor([3, 1, 3, 2, 1])
    assert torch.equal(torch.unique(r.npu()).cpu(), torch.unique(r))
    sync = torch_npu._C._host_kernel_ops(synchronizing=True)
    assert sync.get("aten::nonzero", 0) >= 1 and "aten::masked_select" in sync


def test_errors_of_the_cpu_kernel_reach_the_caller():
    x = sample(3, 4).npu()
    try:
        torch.mm(x, x)                    # the meta kernel refuses; the CPU kernel's message
    except RuntimeError as e:
        assert "cannot be multiplied" in str(e)
    else:
        raise AssertionError("mm of mismatched shapes did not raise")


def test_bad_input_is_reported_even_without_the_fallback(python):
    r = python("""
import torch, torch_npu
x = torch.ones(3, 4, device='npu')
try:
    torch.mm(x, x)
except RuntimeError as e:
    print(str(e).splitlines()[0])
""", env={"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    assert r.returncode == 0, r.stderr
    assert "cannot be multiplied" in r.stdout, r.stdout


def test_out_kernels_that_resize_internally():
    # mse_loss's CPU out= kernel resizes its out to the elementwise shape before reducing: a
    # host alias of device memory cannot be resized, so out= gets a CPU tensor of its own.
    a, b = sample(8, 1), sample(8, 1, seed=1)
    got = torch.nn.functional.mse_loss(a.npu(), b.npu())
    assert torch.allclose(got.cpu(), torch.nn.functional.mse_loss(a, b))


def test_remembered_meta_results_follow_every_argument():
    # The meta kernels' results are remembered per signature (ExecutionPaths.cpp,
    # MetaResultCache): every call below differs from an earlier one in one thing only (a size,
    # a stride, a dtype, an int, a bool) and must be sized and computed for itself.
    a = sample(6, 8)
    x = a.npu()
    before = torch_npu._C._host_kernel_ops().get("aten::kthvalue.values", 0)
    calls = [
        (lambda t: torch.kthvalue(t, 2, 1), a),
        (lambda t: torch.kthvalue(t, 2, 1), a),                      # the same: remembered
        (lambda t: torch.kthvalue(t, 3, 1), a),                      # another k
        (lambda t: torch.kthvalue(t, 2, 0), a),                      # another dim: other shape
        (lambda t: torch.kthvalue(t, 2, 1, keepdim=True), a),        # a bool: other shape
        (lambda t: torch.kthvalue(t, 2, 1), a[:5]),                  # another size
        (lambda t: torch.kthvalue(t, 2, 1), a.t()),                  # another stride
        (lambda t: torch.kthvalue(t, 2, 1), a.double()),             # another dtype
    ]
    for f, ref in calls:
        got = f(ref.npu())
        want = f(ref)
        assert got.values.shape == want.values.shape and got.values.dtype == want.values.dtype
        assert torch.equal(got.values.cpu(), want.values)
        assert torch.equal(got.indices.cpu(), want.indices)
    assert torch_npu._C._host_kernel_ops()["aten::kthvalue.values"] >= before + len(calls)
    torch.erfinv(x)                       # remembered once it succeeded ...
    for bad in (lambda: torch.kthvalue(x, 9, 1), lambda: torch.kthvalue(x, 2, 5)):
        try:                              # ... but a refusal is not: it raises every time
            bad()
            torch.npu.synchronize()
        except (RuntimeError, IndexError):
            pass
        else:
            raise AssertionError("a bad kthvalue call was accepted")
    assert torch.allclose(torch.erfinv(x.clamp(-0.9, 0.9)).cpu(), torch.erfinv(a.clamp(-0.9, 0.9)),
                          equal_nan=True)
