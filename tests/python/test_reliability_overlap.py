"""out= and in-place forms whose output overlaps an input behave as on the CPU.

A kernel that writes memory it is still reading (or writes one element through several indices)
gives garbage that depends on the order of its loops. PyTorch's CPU kernels refuse such calls
(at::assert_no_internal_overlap, assert_no_overlap, assert_no_partial_overlap) or compute them
correctly (a full overlap: an in-place op). Each case below runs on the CPU and on the npu with
the same inputs: either both raise the same error class with the same first line, or both
succeed with the same values in every tensor the case returns. Adding a case: one line in
CASES, a function of the device returning the tensors to compare.
"""

import pytest
import torch
import torch_npu  # noqa: F401


def _x(device, n=8, m=3, dtype=torch.float32):
    return torch.arange(n * m, dtype=dtype, device=device).view(n, m) * 0.5 - 3


def _idx(device, values=(3, 0, 2)):
    return torch.tensor(values, device=device)


def _mat(device, n=4):
    return (torch.arange(n * n, dtype=torch.float32, device=device).view(n, n) % 5) - 2


def _expanded(device, shape=(3, 3)):
    return torch.zeros(1, shape[1], device=device).expand(shape)


def index_select_out_overlaps_self(d):
    x = _x(d)
    torch.index_select(x, 0, _idx(d), out=x[1:4])
    return x


def index_select_out_is_self(d):
    x = _x(d, 3)
    torch.index_select(x, 0, _idx(d, (2, 0, 1)), out=x)
    return x


def index_select_out_overlaps_index(d):
    idx = torch.tensor([1, 0], device=d)
    torch.index_select(torch.tensor([5, 6], device=d), 0, idx, out=idx)
    return idx


def index_select_out_internal_overlap(d):
    out = torch.zeros(1, 3, device=d).expand(3, 3)
    torch.index_select(_x(d), 0, _idx(d), out=out)
    return out


def gather_out_overlaps_self(d):
    x = _x(d, 4)
    torch.gather(x, 0, torch.tensor([[1, 0, 2], [3, 3, 0]], device=d), out=x[1:3])
    return x


def gather_out_internal_overlap(d):
    out = torch.zeros(1, 3, device=d).expand(2, 3)
    torch.gather(_x(d, 4), 0, torch.tensor([[1, 0, 2], [3, 3, 0]], device=d), out=out)
    return out


def gather_out_partially_overlaps_index(d):
    idx = torch.tensor([[1, 0, 2], [3, 3, 0], [0, 0, 0]], device=d)
    torch.gather(torch.arange(12, device=d).view(4, 3), 0, idx[:2], out=idx[1:])
    return idx


def gather_out_is_index(d):
    idx = torch.tensor([[1, 0, 2], [3, 3, 0]], device=d)
    torch.gather(torch.arange(12, device=d).view(4, 3) % 4, 0, idx, out=idx)
    return idx


def scatter_src_overlaps_self(d):
    x = _x(d, 4)
    x.scatter_(0, torch.tensor([[1, 0, 2]], device=d), x[2:3])
    return x


def scatter_index_overlaps_self(d):
    x = torch.tensor([[0, 1], [1, 0]], device=d)
    x.scatter_(0, x, 5)
    return x


def scatter_self_internal_overlap(d):
    x = _expanded(d)
    x.scatter_(0, torch.tensor([[1, 0, 2]], device=d), 1.0)
    return x


def scatter_functional_src_is_self(d):
    x = _x(d, 4)
    return torch.scatter(x, 0, torch.tensor([[1, 0, 2]], device=d), x)


def scatter_add_src_overlaps_self(d):
    x = _x(d, 4)
    x.scatter_add_(0, torch.tensor([[1, 0, 2]], device=d), x[2:3])
    return x


def scatter_add_self_internal_overlap(d):
    x = _expanded(d)
    x.scatter_add_(0, torch.tensor([[1, 0, 2]], device=d), torch.ones(1, 3, device=d))
    return x


def index_add_source_overlaps_self(d):
    x = _x(d)
    x.index_add_(0, _idx(d, (1, 4)), x[0:2])
    return x


def index_add_self_internal_overlap(d):
    x = _expanded(d)
    x.index_add_(0, _idx(d, (1,)), torch.ones(1, 3, device=d))
    return x


def index_add_index_overlaps_self(d):
    x = torch.tensor([1, 0, 2, 3], device=d)
    x.index_add_(0, x[:2], torch.tensor([7, 9], device=d))
    return x


def cat_out_overlaps_input(d):
    x = _x(d)
    torch.cat([x[:2], x[4:6]], out=x[1:5])
    return x


def cat_out_is_input(d):
    x = _x(d, 2)
    y = torch.empty(0, 3, device=d)
    torch.cat([x, y], out=x)
    return x


def cat_out_internal_overlap(d):
    out = torch.zeros(1, 3, device=d).expand(4, 3)
    torch.cat([_x(d, 2), _x(d, 2)], out=out)
    return out


def mm_out_is_input(d):
    a = _mat(d)
    torch.mm(a, _mat(d).t().contiguous(), out=a)
    return a


def mm_out_overlaps_input(d):
    buf = torch.arange(24, dtype=torch.float32, device=d) % 7
    a = buf[:16].view(4, 4)
    torch.mm(a, _mat(d), out=buf[4:20].view(4, 4))
    return buf


def mm_out_internal_overlap(d):
    out = torch.zeros(1, 4, device=d).expand(4, 4)
    torch.mm(_mat(d), _mat(d), out=out)
    return out


def addmm_out_is_self(d):
    m = _mat(d)
    torch.addmm(m, _mat(d), _mat(d), out=m)
    return m


def addmm_inplace_mat_is_self(d):
    m = _mat(d)
    m.addmm_(m, _mat(d))
    return m


def bmm_out_is_input(d):
    a = _mat(d)[None].contiguous()
    torch.bmm(a, _mat(d)[None], out=a)
    return a


def baddbmm_inplace_batch_is_self(d):
    m = _mat(d)[None].contiguous()
    m.baddbmm_(m, _mat(d)[None])
    return m


def softmax_out_is_input(d):
    x = _x(d)
    torch._softmax(x, 1, False, out=x)
    return x


def softmax_out_overlaps_input(d):
    buf = torch.arange(12, dtype=torch.float32, device=d) * 0.25
    torch._softmax(buf[:9].view(3, 3), 1, False, out=buf[3:].view(3, 3))
    return buf


def log_softmax_out_internal_overlap(d):
    out = torch.zeros(1, 3, device=d).expand(8, 3)
    torch._log_softmax(_x(d), 1, False, out=out)
    return out


def tril_inplace(d):
    x = _mat(d)
    x.tril_()
    return x


def triu_out_overlaps_self(d):
    buf = torch.arange(20, dtype=torch.float32, device=d)
    torch.triu(buf[:16].view(4, 4), out=buf[4:].view(4, 4))
    return buf


def tril_inplace_internal_overlap(d):
    x = torch.ones(1, 4, device=d).expand(4, 4)
    x.tril_()
    return x


def sort_values_out_is_input(d):
    x = _x(d).flip(0).contiguous()
    torch.sort(x, 0, out=(x, torch.empty(8, 3, dtype=torch.long, device=d)))
    return x


def sort_values_out_overlaps_input(d):
    buf = torch.tensor([5.0, 1, 4, 2, 8, 0, 3, 7, 6], device=d)
    values = buf[1:]
    torch.sort(buf[:8], out=(values, torch.empty(8, dtype=torch.long, device=d)))
    return buf


def cumsum_out_is_input(d):
    x = _x(d)
    torch.cumsum(x, 0, out=x)
    return x


def cumsum_out_overlaps_input(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch.cumsum(buf[:8], 0, out=buf[2:])
    return buf


def cumprod_out_internal_overlap(d):
    out = torch.zeros(1, device=d).expand(5)
    torch.cumprod(torch.arange(1.0, 6.0, device=d), 0, out=out)
    return out


def sum_out_overlaps_input(d):
    x = _x(d)
    torch.sum(x, 0, out=x[0])
    return x


def amax_out_overlaps_input(d):
    x = _x(d)
    torch.amax(x, 1, out=x[:, 0])
    return x


def add_out_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch.add(buf[:8], 1, out=buf[2:])
    return buf


def add_inplace_internal_overlap(d):
    x = _expanded(d)
    x.add_(torch.ones(3, 3, device=d))
    return x


def where_out_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch.where(buf[:8] > 3, buf[:8], buf[1:9], out=buf[2:])
    return buf


def masked_fill_internal_overlap(d):
    x = _expanded(d)
    x.masked_fill_(torch.eye(3, dtype=torch.bool, device=d), 1.0)
    return x


def fill_internal_overlap(d):
    x = _expanded(d)
    x.fill_(2.0)
    return x


def zero_internal_overlap(d):
    x = torch.ones(1, 3, device=d).expand(3, 3)
    x.zero_()
    return x


def clamp_out_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch.clamp(buf[:8], 2, 6, out=buf[2:])
    return buf


def addcmul_inplace_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    buf[2:].addcmul_(buf[:8], buf[1:9], value=0.5)
    return buf


def lerp_inplace_internal_overlap(d):
    x = _expanded(d)
    x.lerp_(torch.ones(3, 3, device=d), 0.5)
    return x


def foreach_add_internal_overlap(d):
    x = _expanded(d)
    torch._foreach_add_([x], [torch.ones(3, 3, device=d)])
    return x


def foreach_mul_scalar_internal_overlap(d):
    x = torch.ones(1, 3, device=d).expand(3, 3)
    torch._foreach_mul_([x], 2.0)
    return x


def foreach_add_list_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch._foreach_add_([buf[2:]], [buf[:8]])
    return buf


def arange_out_internal_overlap(d):
    out = torch.zeros(1, device=d).expand(5)
    torch.arange(0, 5, out=out)
    return out


def uniform_internal_overlap(d):
    x = _expanded(d)
    x.uniform_()
    return torch.zeros(1)  # the values are random: only raising or not is compared


def copy_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    buf[2:].copy_(buf[:8])
    return buf


def copy_internal_overlap(d):
    x = _expanded(d)
    x.copy_(torch.arange(9.0, device=d).view(3, 3))
    return x


def cummax_out_overlaps_input(d):
    buf = torch.tensor([3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3], device=d)
    torch.cummax(buf[:8], 0, out=(buf[2:], torch.empty(8, dtype=torch.long, device=d)))
    return buf


def exp_inplace_internal_overlap(d):
    x = _expanded(d)
    x.exp_()
    return x


def unary_out_partial_overlap(d):
    buf = torch.arange(10, dtype=torch.float32, device=d)
    torch.neg(buf[:8], out=buf[2:])
    return buf


CASES = [
    index_select_out_overlaps_self, index_select_out_is_self, index_select_out_overlaps_index,
    index_select_out_internal_overlap, gather_out_overlaps_self, gather_out_internal_overlap,
    gather_out_partially_overlaps_index, gather_out_is_index, scatter_src_overlaps_self,
    scatter_index_overlaps_self, scatter_self_internal_overlap, scatter_functional_src_is_self,
    scatter_add_src_overlaps_self, scatter_add_self_internal_overlap,
    index_add_source_overlaps_self, index_add_self_internal_overlap,
    index_add_index_overlaps_self, cat_out_overlaps_input, cat_out_is_input,
    cat_out_internal_overlap, mm_out_is_input, mm_out_overlaps_input, mm_out_internal_overlap,
    addmm_out_is_self, addmm_inplace_mat_is_self, bmm_out_is_input,
    baddbmm_inplace_batch_is_self, softmax_out_is_input, softmax_out_overlaps_input,
    tril_inplace, triu_out_overlaps_self,
    tril_inplace_internal_overlap, sort_values_out_is_input, sort_values_out_overlaps_input,
    cumsum_out_is_input, cumsum_out_overlaps_input, cumprod_out_internal_overlap,
    sum_out_overlaps_input, amax_out_overlaps_input, add_out_partial_overlap,
    add_inplace_internal_overlap, where_out_partial_overlap, masked_fill_internal_overlap,
    fill_internal_overlap, zero_internal_overlap, clamp_out_partial_overlap,
    addcmul_inplace_partial_overlap, lerp_inplace_internal_overlap,
    foreach_add_internal_overlap, foreach_mul_scalar_internal_overlap,
    foreach_add_list_partial_overlap, arange_out_internal_overlap, uniform_internal_overlap,
    copy_partial_overlap, copy_internal_overlap, cummax_out_overlaps_input,
    exp_inplace_internal_overlap, unary_out_partial_overlap,
]


# Cases the CPU kernel accepts with a result that depends on its loop order (it reads elements
# it already wrote). The npu gives the op's defined result instead, computed here on the CPU
# without the aliasing; each entry: case -> that reference.
def _ref_mm_out_is_input(d):
    return _mat(d) @ _mat(d).t()


def _ref_mm_out_overlaps_input(d):
    buf = torch.arange(24, dtype=torch.float32, device=d) % 7
    buf[4:20] = (buf[:16].view(4, 4) @ _mat(d)).view(-1)
    return buf


def _ref_bmm_out_is_input(d):
    return torch.bmm(_mat(d)[None], _mat(d)[None])


def _ref_baddbmm_inplace_batch_is_self(d):
    m = _mat(d)[None]
    return m + torch.bmm(m, _mat(d)[None])


def _ref_softmax_out_overlaps_input(d):
    buf = torch.arange(12, dtype=torch.float32, device=d) * 0.25
    buf[3:] = torch.softmax(buf[:9].view(3, 3), 1).view(-1)
    return buf


def _ref_triu_out_overlaps_self(d):
    buf = torch.arange(20, dtype=torch.float32, device=d)
    buf[4:] = torch.triu(buf[:16].view(4, 4)).view(-1)
    return buf


def _ref_sum_out_overlaps_input(d):
    x = _x(d)
    x[0] = x.sum(0)
    return x


def _ref_cummax_out_overlaps_input(d):
    buf = torch.tensor([3.0, 1, 4, 1, 5, 9, 2, 6, 5, 3], device=d)
    buf[2:] = torch.cummax(buf[:8], 0).values
    return buf


LOOP_ORDER_ON_CPU = {
    mm_out_is_input: _ref_mm_out_is_input,
    mm_out_overlaps_input: _ref_mm_out_overlaps_input,
    bmm_out_is_input: _ref_bmm_out_is_input,
    baddbmm_inplace_batch_is_self: _ref_baddbmm_inplace_batch_is_self,
    softmax_out_overlaps_input: _ref_softmax_out_overlaps_input,
    triu_out_overlaps_self: _ref_triu_out_overlaps_self,
    sum_out_overlaps_input: _ref_sum_out_overlaps_input,
    cummax_out_overlaps_input: _ref_cummax_out_overlaps_input,
}


def _run(case, device):
    try:
        result = case(device)
        torch.npu.synchronize()  # an error found where the kernel ran counts as raising
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return e
    results = result if isinstance(result, (tuple, list)) else (result,)
    return [r.cpu() for r in results]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_overlapping_output_behaves_as_on_cpu(case):
    expected = _run(LOOP_ORDER_ON_CPU.get(case, case), "cpu")
    got = _run(case, "npu")
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"the CPU raises {expected!r}; the npu returned {got}"
        assert type(got) is type(expected), (got, expected)
        assert str(expected).splitlines()[0] in str(got), (str(got), str(expected))
        return
    assert not isinstance(got, Exception), f"the CPU returns {expected}; the npu raised {got!r}"
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_the_cases_cover_both_outcomes():
    # The comparison means something only if the CPU raises for some cases and not for others.
    outcomes = [isinstance(_run(c, "cpu"), Exception) for c in CASES]
    assert sum(outcomes) >= 20 and len(outcomes) - sum(outcomes) >= 10, sum(outcomes)


def test_softmax_out_whose_elements_alias_each_other_is_refused():
    # The CPU kernel writes past such an out's memory (it corrupts the heap), so there is no CPU
    # behaviour to match: the npu refuses it with the CPU's message for internal overlap.
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        log_softmax_out_internal_overlap("npu")


def test_in_place_and_fresh_outputs_still_take_the_kernels():
    # The checks cost nothing where nothing overlaps: the ordinary forms still match the CPU.
    for d_case in (tril_inplace, cumsum_out_is_input,
                   sort_values_out_is_input, addmm_out_is_self, gather_out_is_index):
        torch.testing.assert_close(_run(d_case, "npu")[0], _run(d_case, "cpu")[0])
