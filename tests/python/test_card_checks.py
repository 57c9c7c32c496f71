"""Argument checks that torch_npu makes at the call, before its kernel is queued, with the type
and words it raises (issue 25, item 4). Each bad call must raise inside the call itself (a check
left to the queued CPU kernel would surface at a later synchronize as an AcceleratorError), and
the stream must stay usable afterwards. Good calls are compared with the CPU device's result."""
import pytest
import torch

import torch_npu  # noqa: F401


def raises_at_call(exc_type, pattern, fn):
    """fn() raises exc_type matching pattern by itself; the stream is healthy afterwards."""
    with pytest.raises(exc_type, match=pattern):
        fn()
    torch.npu.synchronize()  # nothing was left failing on the stream


# ---- searchsorted: the CPU kernel's checks, raised at the call -------------------------------

def test_searchsorted_bad_arguments_raise_at_the_call_with_the_cpus_words():
    seq = torch.tensor([0.0, 1.0, 2.0, 3.0])
    vals = torch.tensor([0.5, 1.5])
    cases = [
        (dict(side="middle"), r"side can only be 'left' or 'right'"),
        (dict(side="left", right=True), "side and right can't be set to opposites"),
        (dict(sorter=torch.tensor([0.0, 1.0, 2.0, 3.0])), "sorter must be a tensor of long dtype"),
        (dict(sorter=torch.tensor([0, 1, 2, 10])), "sorter index out of range"),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(RuntimeError, match=pattern):  # the CPU's own refusal
            torch.searchsorted(seq, vals, **kwargs)
        npu_kwargs = {k: (v.npu() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        raises_at_call(RuntimeError, pattern,
                       lambda: torch.searchsorted(seq.npu(), vals.npu(), **npu_kwargs))
    # Leading dims that differ, and an out= of the wrong dtype.
    raises_at_call(RuntimeError, "first N-1 dimensions of boundaries",
                   lambda: torch.searchsorted(torch.zeros(2, 3).npu(), torch.zeros(2).npu()))
    out = torch.empty(2, dtype=torch.int32, device="npu")
    raises_at_call(RuntimeError, "output tensor's dtype is wrong",
                   lambda: torch.searchsorted(seq.npu(), vals.npu(), out_int32=False, out=out))


def test_searchsorted_good_calls_match_the_cpu():
    seq = torch.sort(torch.randn(4, 9), dim=1).values
    vals = torch.randn(4, 5)
    for right in (False, True):
        want = torch.searchsorted(seq, vals, right=right)
        got = torch.searchsorted(seq.npu(), vals.npu(), right=right)
        assert torch.equal(got.cpu(), want)
    perm = torch.randperm(9)
    unsorted = seq[0][perm]
    sorter = torch.argsort(unsorted)
    want = torch.searchsorted(unsorted, vals[0], sorter=sorter)
    got = torch.searchsorted(unsorted.npu(), vals[0].npu(), sorter=sorter.npu())
    assert torch.equal(got.cpu(), want)


# ---- histc --------------------------------------------------------------------------------

def test_histc_bad_ranges_raise_at_the_call():
    raises_at_call(RuntimeError, "bins must be > 0",
                   lambda: torch.histc(torch.ones(1, device="npu"), bins=-1))
    raises_at_call(RuntimeError, "max must be larger than min",
                   lambda: torch.histc(torch.ones(3, device="npu"), bins=4, min=5, max=1))
    raises_at_call(RuntimeError, r"range of \[.*\] is not finite",
                   lambda: torch.histc(torch.tensor([float("inf")], device="npu")))
    x = torch.randn(100)
    assert torch.equal(torch.histc(x.npu(), bins=7, min=-1, max=1).cpu(),
                       torch.histc(x, bins=7, min=-1, max=1))


# ---- reductions: a dim out of range is a RuntimeError on the card -----------------------------

@pytest.mark.parametrize("reduce", [
    lambda t, d: torch.sum(t, dim=d),
    lambda t, d: torch.amax(t, dim=d),
    lambda t, d: torch.argmax(t, dim=d),
    lambda t, d: torch.norm(t, 1, d),
    lambda t, d: torch.prod(t, dim=d),
])
def test_reduction_dim_out_of_range_is_a_runtime_error_with_atens_words(reduce):
    for shape, dim in (((2, 3), 2), ((2, 3), -3), ((), -3), ((4,), 1)):
        x = torch.ones(shape)
        with pytest.raises(IndexError) as cpu_error:  # ATen's type on the CPU
            reduce(x, dim)
        with pytest.raises(RuntimeError) as npu_error:  # torch_npu's
            reduce(x.npu(), dim)
        assert not isinstance(npu_error.value, IndexError)
        assert str(cpu_error.value).splitlines()[0] in str(npu_error.value)
    assert torch.equal(torch.sum(torch.ones(2, 3).npu(), dim=-2).cpu(), torch.full((3,), 2.0))


# ---- where with CPU scalars ---------------------------------------------------------------

def test_where_takes_several_cpu_scalars_beside_a_device_tensor():
    scalar = torch.tensor(0.5)
    ones = torch.ones(6)
    want = torch.where(scalar > 0, scalar, ones)
    got = torch.where(scalar > 0, scalar, ones.npu())
    assert got.device.type == "npu" and torch.equal(got.cpu(), want)
    x = torch.randn(6)
    assert torch.equal(torch.where(x.npu() > 0, x.npu(), scalar).cpu(), torch.where(x > 0, x, scalar))


# ---- index_put_ ---------------------------------------------------------------------------

def test_index_put_cpu_self_with_npu_indices_is_the_cpus_result():
    indices = torch.randint(10, (500,))
    values = torch.rand(500)
    base = torch.rand(10)
    want = base.clone().index_put_((indices,), values, accumulate=True)
    got = base.clone().index_put_((indices.npu(),), values, accumulate=True)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want)
    # npu values beside a CPU self are still refused, as CUDA refuses them.
    with pytest.raises(RuntimeError, match="same device"):
        base.clone().index_put_((indices.npu(),), values.npu())


def test_index_put_indices_that_do_not_broadcast_raise_index_error():
    data = torch.arange(9).view(3, 3)
    indices = (torch.tensor([True, False, True]), torch.tensor([0, 1, 2]))
    values = torch.tensor([10, 20])
    with pytest.raises(IndexError) as cpu_error:
        data.clone().index_put(indices, values)
    npu_indices = tuple(i.npu() for i in indices)
    with pytest.raises(IndexError) as npu_error:
        data.npu().index_put(npu_indices, values.npu())
    assert str(npu_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]
    torch.npu.synchronize()


# ---- logspace out= -------------------------------------------------------------------------

def test_logspace_into_a_strided_out_of_steps_elements_keeps_its_shape():
    want = torch.zeros(2, 3)
    torch.logspace(0, 3, 4, base=2, out=want.narrow(1, 1, 2))
    got = torch.zeros(2, 3, device="npu")
    torch.logspace(0, 3, 4, base=2, out=got.narrow(1, 1, 2))
    assert torch.equal(got.cpu(), want)
    assert torch.equal(want, torch.tensor([[0.0, 1, 2], [0, 4, 8]]))


# ---- two npus: the generated wrappers' device check in torch_npu's words ---------------------

def test_device_mismatch_names_both_devices_and_the_argument(python):
    result = python(
        """
        import torch, torch_npu
        import torch.nn.functional as F
        def message(f):
            try:
                f()
            except RuntimeError as e:
                return str(e).splitlines()[0]
            return "no error"
        print(message(lambda: torch.addmv(torch.randn(2, 3).npu(), torch.randn(3).npu(),
                                          torch.randn(2).to("npu:1"))))
        print(message(lambda: torch.bincount(torch.tensor([1, 2]).npu(),
                                             weights=torch.rand(2).to("npu:1"))))
        print(message(lambda: torch.acosh(torch.rand(3).to("npu:1"), out=torch.rand(3).npu())))
        """,
        env={"NPU_SIM_DEVICES": "2"},
    )
    assert result.returncode == 0, result.stderr
    addmv, bincount, acosh = result.stdout.splitlines()
    assert addmv == ("Expected all tensors to be on the same device, but found at least two "
                     "devices, npu:0 and npu:1! (when checking argument for argument vec in "
                     "method aten::addmv)")
    assert "found at least two devices, npu:0 and npu:1!" in bincount and "weights" in bincount
    # An elementwise op (TensorIterator's check) names the devices in the order it met them.
    assert acosh.startswith("Expected all tensors to be on the same device, but found at least "
                            "two devices, npu:")
