"""Reliability of streams: a kernel fault belongs to the stream it happened on (the thread that
synchronizes the whole device is told too, but does not take the error away from the stream's
own thread), and launches block once a stream holds NPU_SIM_MAX_PENDING_LAUNCHES tasks."""

import ctypes
import os
import threading

import pytest
import torch
import torch_npu

OUT_OF_RANGE = r"index out of range"


def fault_then_skip(x, stream):
    """Queues on `stream` a kernel that faults (index 9 of 4 rows) and an add after it, which the
    stream must skip; returns the add's output."""
    bad = torch.tensor([9], device="npu")
    torch.npu.synchronize()  # x and bad are ready before the other stream reads them
    with torch.npu.stream(stream):
        x.index_select(0, bad)
        return x + 1


def test_device_synchronize_of_another_thread_does_not_take_the_fault_from_its_stream():
    x = torch.arange(12.0, device="npu").reshape(4, 3)
    s_a, s_b = torch.npu.Stream(), torch.npu.Stream()
    faulted, a_done = threading.Event(), threading.Event()
    seen = {}

    def thread_a():
        faulted.wait()
        with torch.npu.stream(s_a):
            y = x * 2
            s_a.synchronize()  # A's own stream is healthy: no error
            seen["a_own"] = y.cpu()
        for key in ("a_device_1", "a_device_2"):  # told each time while B has not read it
            try:
                torch.npu.synchronize()
                seen[key] = None
            except RuntimeError as e:
                seen[key] = str(e)
        a_done.set()

    def thread_b():
        z = fault_then_skip(x, s_b)
        faulted.set()
        a_done.wait()
        with torch.npu.stream(s_b):
            try:
                seen["b_read"] = z.cpu()  # the skipped output must not come back as data
            except RuntimeError as e:
                seen["b_read"] = str(e)
            w = x - 1  # read by its own stream: the stream works again
            seen["b_after"] = w.cpu()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    torch.testing.assert_close(seen["a_own"], torch.arange(12.0).reshape(4, 3) * 2)
    for key in ("a_device_1", "a_device_2", "b_read"):
        assert isinstance(seen[key], str), (key, seen[key])
        assert "index_select" in seen[key] and "out of range" in seen[key], seen[key]
    torch.testing.assert_close(seen["b_after"], torch.arange(12.0).reshape(4, 3) - 1)
    torch.npu.synchronize()  # read by its owner: gone for everybody


def test_stream_synchronize_reports_the_fault_after_a_device_synchronize_elsewhere():
    x = torch.arange(12.0, device="npu").reshape(4, 3)
    s = torch.npu.Stream()
    fault_then_skip(x, s)
    errors = []

    def other():
        try:
            torch.npu.synchronize()
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and "out of range" in errors[0]
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE):
        s.synchronize()
    s.synchronize()  # read once by its own synchronize: cleared


def test_event_recorded_after_the_fault_reports_it():
    x = torch.arange(12.0, device="npu").reshape(4, 3)
    s = torch.npu.Stream()
    fault_then_skip(x, s)
    ev = s.record_event()
    with pytest.raises(RuntimeError, match="recorded on a stream after a task failed"):
        ev.synchronize()
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE):
        ev.query()
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE):  # the stream still has it
        s.synchronize()
    ev.record(s)
    ev.synchronize()
    assert ev.query()


def test_a_stream_that_waits_for_a_failed_stream_fails_too():
    x = torch.arange(12.0, device="npu").reshape(4, 3)
    producer, consumer = torch.npu.Stream(), torch.npu.Stream()
    out = fault_then_skip(x, producer)
    consumer.wait_stream(producer)
    with torch.npu.stream(consumer):
        y = out * 3  # reads what the producer never wrote
        with pytest.raises(RuntimeError, match="waited for an event recorded after a failure"):
            y.cpu()
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE):
        producer.synchronize()
    torch.npu.synchronize()


def runtime_library():
    lib = os.path.join(os.path.dirname(torch_npu._C.__file__), "lib", "libnpu_runtime.so")
    return ctypes.CDLL(lib)


class QueueStats(ctypes.Structure):
    _fields_ = [("pending", ctypes.c_size_t), ("peak_pending", ctypes.c_size_t),
                ("max_pending", ctypes.c_size_t), ("launch_waits", ctypes.c_uint64),
                ("overflows", ctypes.c_uint64)]


def test_launches_wait_once_the_stream_holds_the_bound(python):
    # 3000 matmuls outrun the worker; the default stream never holds more than the bound.
    code = """
    import ctypes, os, torch, torch_npu
    class QueueStats(ctypes.Structure):
        _fields_ = [("pending", ctypes.c_size_t), ("peak_pending", ctypes.c_size_t),
                    ("max_pending", ctypes.c_size_t), ("launch_waits", ctypes.c_uint64),
                    ("overflows", ctypes.c_uint64)]
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch_npu._C.__file__), "lib", "libnpu_runtime.so"))
    a = torch.randn(128, 128, device="npu")
    ref = a.cpu()
    for _ in range(3000):
        a = a @ a
        a = a / a.norm()
    stream = ctypes.c_void_p()
    assert lib.npuGetDefaultStream(0, ctypes.byref(stream)) == 0
    st = QueueStats()
    assert lib.npuStreamGetQueueStats(stream, ctypes.byref(st)) == 0
    torch.npu.synchronize()
    print(st.max_pending, st.peak_pending, st.launch_waits, st.overflows, bool(torch.isfinite(a).all()))
    """
    r = python(code, env={"NPU_SIM_MAX_PENDING_LAUNCHES": "32"})
    assert r.returncode == 0, r.stderr
    bound, peak, waits, overflows, finite = r.stdout.split()
    assert int(bound) == 32
    assert 0 < int(peak) <= 32, r.stdout
    assert int(waits) > 0, r.stdout
    assert int(overflows) == 0, r.stdout
    assert finite == "True"


def test_a_bad_bound_is_refused_naming_the_variable_and_range(python):
    r = python("import torch, torch_npu; torch.ones(1, device='npu')",
               env={"NPU_SIM_MAX_PENDING_LAUNCHES": "0"})
    assert r.returncode != 0
    assert "NPU_SIM_MAX_PENDING_LAUNCHES='0' is invalid: expected an integer from 1 to 1048576" \
        in r.stderr, r.stderr


def test_default_bound_is_cuda_like():
    lib = runtime_library()
    torch.ones(1, device="npu")
    stream = ctypes.c_void_p()
    assert lib.npuGetDefaultStream(0, ctypes.byref(stream)) == 0
    st = QueueStats()
    assert lib.npuStreamGetQueueStats(stream, ctypes.byref(st)) == 0
    assert st.max_pending == 1024
