"""torch.npu streams and events, and asynchrony of device work."""

import time

import pytest
import torch
import torch_npu  # noqa: F401


def test_default_and_current_stream():
    s = torch.npu.current_stream()
    d = torch.npu.default_stream()
    assert s == d
    assert s.device == torch.device("npu:0")
    assert isinstance(s, torch.Stream)


def test_stream_context_manager_and_priority():
    s = torch.npu.Stream(priority=-1)
    assert s != torch.npu.default_stream()
    with torch.npu.stream(s):
        assert torch.npu.current_stream() == s
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with s:
        assert torch.npu.current_stream() == s
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_launch_is_asynchronous_until_synchronize():
    s = torch.npu.current_stream()
    torch.npu._sleep(300)  # a 300 ms device task
    assert not s.query()
    s.synchronize()
    assert s.query()


def test_events_time_work_and_order_streams():
    start = torch.npu.Event(enable_timing=True)
    end = torch.npu.Event(enable_timing=True)
    start.record()
    torch.npu._sleep(50)
    end.record()
    end.synchronize()
    assert end.query()
    assert 50 <= start.elapsed_time(end) < 2000

    side = torch.npu.Stream()
    x = torch.zeros(1000, device="npu")
    side.wait_stream(torch.npu.current_stream())  # the zeros are written on the default stream
    with torch.npu.stream(side):
        torch.npu._sleep(100)
        x.fill_(3.0)
    ev = side.record_event()
    torch.npu.current_stream().wait_event(ev)
    y = x.cpu()  # ordered after the side stream's fill by the event
    assert torch.equal(y, torch.full((1000,), 3.0))


def test_wait_stream():
    side = torch.npu.Stream()
    x = torch.zeros(10, device="npu")
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        torch.npu._sleep(100)
        x.fill_(7.0)
    torch.npu.current_stream().wait_stream(side)
    assert torch.equal(x.cpu(), torch.full((10,), 7.0))


def test_generic_torch_stream_and_event_work_with_npu():
    s = torch.Stream(device="npu")
    assert s.device_type == torch.device("npu").type or s.device.type == "npu"
    e = torch.Event(device="npu", enable_timing=True)
    e.record(s)
    e.synchronize()
    assert e.query()
    assert s.query()


def test_elapsed_time_without_timing_is_an_error():
    a, b = torch.npu.Event(), torch.npu.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.accelerator.device_count() == 8
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    s = torch.accelerator.current_stream()
    assert s.device.type == "npu"
