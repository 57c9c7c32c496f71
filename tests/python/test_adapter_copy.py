"""The adapter's native kernels: copies (host <-> device, device <-> device), fills, item, views,
resize_ and set_. Every result is compared with the same operation on the CPU."""

import pytest
import torch

import torch_npu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


def sample(shape=(3, 4, 5), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 50
    if dtype.is_complex:
        return torch.complex(x, -x).to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_contiguous(dtype):
    x = sample(dtype=dtype)
    y = x.npu()
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize("make_view", [
    lambda t: t.permute(2, 0, 1),         # dense, permuted strides
    lambda t: t[:, 1::2, :],              # not dense
    lambda t: t.transpose(0, 2)[1:, :, ::3],
    lambda t: t[1].t(),
], ids=["permute", "slice", "transpose-slice", "select-t"])
def test_non_contiguous_both_ways(make_view):
    x = sample()
    # host view -> device
    assert torch.equal(make_view(x).npu().cpu(), make_view(x))
    # device view -> host
    assert torch.equal(make_view(x.npu()).cpu(), make_view(x))
    # device view -> contiguous on the device
    assert torch.equal(make_view(x.npu()).contiguous().cpu(), make_view(x).contiguous())


def test_copy_into_non_contiguous_device_view():
    src = sample((4, 3))
    ref = torch.zeros(4, 6)
    ref[:, ::2] = src
    dst = torch.zeros(4, 6, device="npu")
    dst[:, ::2] = src  # host -> strided device view
    assert torch.equal(dst.cpu(), ref)
    dst2 = torch.zeros(4, 6, device="npu")
    dst2[:, ::2] = src.npu()  # device -> strided device view
    assert torch.equal(dst2.cpu(), ref)


def test_copy_into_non_contiguous_host_view():
    src = sample((4, 3))
    ref = torch.zeros(4, 6)
    ref[:, 1::2] = src
    out = torch.zeros(4, 6)
    out[:, 1::2].copy_(src.npu())
    assert torch.equal(out, ref)


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float64), (torch.float64, torch.float16), (torch.float32, torch.int32),
    (torch.int64, torch.float32), (torch.float32, torch.bool), (torch.float32, torch.bfloat16),
    (torch.complex64, torch.complex128),
], ids=str)
def test_dtype_converting_copies(src_dtype, dst_dtype):
    x = sample(dtype=src_dtype)
    ref = x.to(dst_dtype)
    assert torch.equal(x.npu().to(dst_dtype).cpu(), ref)     # on the device
    assert torch.equal(x.to("npu", dst_dtype).cpu(), ref)    # host -> device, converting
    out = torch.empty(x.shape, dtype=dst_dtype)
    out.copy_(x.npu())                                       # device -> host, converting
    assert torch.equal(out, ref)
    assert torch.equal(x.npu().mT.to(dst_dtype).cpu(), x.mT.to(dst_dtype))


def test_broadcasting_copy():
    row = torch.arange(4.0)
    ref = torch.empty(3, 4).copy_(row)
    assert torch.equal(torch.empty(3, 4, device="npu").copy_(row).cpu(), ref)
    assert torch.equal(torch.empty(3, 4, device="npu").copy_(row.npu()).cpu(), ref)


def test_cross_device_copies():
    x = sample()
    a = x.to("npu:0")
    b = a.to("npu:1")
    assert b.device == torch.device("npu:1") and torch.equal(b.cpu(), x)
    assert torch.equal(a.permute(1, 0, 2).to("npu:2").cpu(), x.permute(1, 0, 2))
    assert torch.equal(a[:, ::2].to("npu:3", torch.float64).cpu(), x[:, ::2].double())
    c = torch.zeros(3, 4, 5, device="npu:1")
    c[1:].copy_(a[1:])
    ref = torch.zeros(3, 4, 5)
    ref[1:] = x[1:]
    assert torch.equal(c.cpu(), ref)


def test_cross_device_copy_waits_for_work_queued_on_the_source():
    x = torch.zeros(1000, device="npu:0")
    with torch.npu.device(0):
        torch_npu._C._npu_sleep(100)  # the fill below is queued behind 100 ms of work
        x.fill_(7)
    y = x.to("npu:1")
    assert torch.equal(y.cpu(), torch.full((1000,), 7.0))


def test_blocking_device_to_host_sees_queued_work():
    x = torch.zeros(1000, device="npu")
    torch_npu._C._npu_sleep(100)
    x.fill_(3)
    assert torch.equal(x.cpu(), torch.full((1000,), 3.0))  # no explicit synchronize


def test_non_blocking_with_pinned_memory():
    src = sample((256, 256)).pin_memory()
    dev = src.to("npu", non_blocking=True)
    back = torch.empty_like(src).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.npu.synchronize()
    assert torch.equal(back, src)


def test_non_blocking_from_pageable_memory_is_staged():
    src = sample((512, 512))
    ref = src.clone()
    torch_npu._C._npu_sleep(50)  # the copy cannot have run yet when src changes
    dev = src.to("npu", non_blocking=True)
    src.zero_()
    torch.npu.synchronize()
    assert torch.equal(dev.cpu(), ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_item_matches_cpu(dtype):
    x = sample(dtype=dtype)
    assert x.npu()[1, 2, 3].item() == x[1, 2, 3].item()


def test_fill_and_zero():
    x = sample()
    d = x.npu()
    d[:, ::2].fill_(5)  # strided view
    x[:, ::2].fill_(5)
    assert torch.equal(d.cpu(), x)
    d[1].zero_()
    x[1].zero_()
    assert torch.equal(d.cpu(), x)
    d.fill_(torch.tensor(2.5))           # fill_.Tensor with a CPU value
    assert torch.equal(d.cpu(), torch.full_like(x, 2.5))
    d.fill_(torch.tensor(-1.5, device="npu"))  # fill_.Tensor with an npu value
    assert torch.equal(d.cpu(), torch.full_like(x, -1.5))
    neg_zero = torch.full((4,), -0.0, device="npu").cpu()
    assert torch.signbit(neg_zero).all()
    i = torch.zeros(5, dtype=torch.int64, device="npu").fill_(2**40 + 3)
    assert torch.equal(i.cpu(), torch.full((5,), 2**40 + 3))
    b = torch.zeros(3, dtype=torch.bool, device="npu").fill_(True)
    assert b.cpu().all()


def test_fill_with_a_bad_value_raises_at_once_like_cpu():
    with pytest.raises(RuntimeError) as cpu_error:
        torch.empty(3, dtype=torch.uint8).fill_(300)
    with pytest.raises(RuntimeError) as npu_error:
        torch.empty(3, dtype=torch.uint8, device="npu").fill_(300)
    assert str(cpu_error.value).splitlines()[0] in str(npu_error.value)
    with pytest.raises(RuntimeError, match="0-dimension"):
        torch.empty(3, device="npu").fill_(torch.ones(2))


def test_views_alias_their_base():
    x = sample((4, 6))
    d = x.npu()
    v = d.view(24)
    v[3] = 100.0
    x.view(24)[3] = 100.0
    assert torch.equal(d.cpu(), x)
    assert torch.equal(d.as_strided((3, 2), (1, 6), 2).cpu(), x.as_strided((3, 2), (1, 6), 2))
    assert torch.equal(d.unfold(1, 3, 2).cpu(), x.unfold(1, 3, 2))
    assert torch.equal(d.t().reshape(-1).cpu(), x.t().reshape(-1))
    d.unfold(1, 2, 2)[0, 0].fill_(-1)  # writes through the view
    x.unfold(1, 2, 2)[0, 0].fill_(-1)
    assert torch.equal(d.cpu(), x)
    c = sample((3, 2))
    dc = torch.view_as_complex(c.npu())
    assert torch.equal(dc.cpu(), torch.view_as_complex(c))
    assert torch.equal(torch.view_as_real(dc).cpu(), c)
    assert torch.view_as_real(dc).data_ptr() == dc.data_ptr()


def test_resize_keeps_data_and_grows_storage():
    x = sample((2, 3))
    d = x.npu()
    d.resize_(4, 5)
    assert d.shape == (4, 5)
    assert d.untyped_storage().nbytes() >= 20 * 4
    assert torch.equal(d.view(-1)[:6].cpu(), x.view(-1))
    d.resize_(2)
    assert torch.equal(d.cpu(), x.view(-1)[:2])
    e = torch.empty(0, device="npu").resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert e.is_contiguous(memory_format=torch.channels_last)


def test_set_variants():
    x = sample((2, 3))
    d = x.npu()
    t = torch.empty(0, device="npu").set_(d)               # source_Tensor
    assert torch.equal(t.cpu(), x) and t.data_ptr() == d.data_ptr()
    s = torch.empty(0, device="npu").set_(d.untyped_storage())  # source_Storage
    assert torch.equal(s.cpu(), x.view(-1))
    o = torch.empty(0, device="npu").set_(d.untyped_storage(), 2, (2, 2), (1, 2))
    assert torch.equal(o.cpu(), torch.empty(0).set_(x.untyped_storage(), 2, (2, 2), (1, 2)))
    z = d.clone().set_()                                    # set_ with no source
    assert z.numel() == 0 and z.is_npu


def test_copy_from_and_resize_through_out_arguments():
    a = sample((3, 3))
    out = torch.empty(0, dtype=torch.bool, device="npu")
    torch.isin(a.npu(), a[0].npu(), out=out)  # the host kernel resizes out= on the npu first
    assert torch.equal(out.cpu(), torch.isin(a, a[0]))
