"""Streams and events through PyTorch's generic API (torch.Stream, torch.Event,
torch.accelerator), which reaches the adapter's DeviceGuardImplInterface, and the stream tuple
API of torch_npu._C."""

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import torch_npu

C = torch_npu._C
NPU_TYPE = 20  # c10::DeviceType::PrivateUse1


def test_torch_stream_on_npu():
    s = torch.Stream(device="npu:1")
    assert s.device == torch.device("npu:1") and s.device_type == NPU_TYPE
    assert s.stream_id != 0  # not the default stream
    assert s.query()
    C._npu_sleep(100)  # on the current (default) stream, not on s
    assert s.query()
    torch.accelerator.synchronize()


def test_launches_are_asynchronous():
    t0 = time.monotonic()
    C._npu_sleep(200)
    assert time.monotonic() - t0 < 0.15
    cur = C._npu_getCurrentStream(0)
    assert not C._npu_streamQuery(*cur)
    C._npu_streamSynchronize(*cur)
    assert C._npu_streamQuery(*cur)
    assert time.monotonic() - t0 >= 0.2


def test_event_orders_a_side_stream_before_the_default_stream():
    x = torch.zeros(10000, device="npu")
    side = torch.Stream(device="npu")
    done = torch.Event(device="npu")
    with side:
        assert torch.accelerator.current_stream() == side
        C._npu_sleep(150)
        x.fill_(4)  # queued on the side stream behind 150 ms
        done.record(side)
    assert torch.accelerator.current_stream().stream_id == 0
    assert not done.query()
    done.wait(torch.accelerator.current_stream())  # default stream waits for the side one
    y = x * 1  # falls back: copies x to the host on the default stream
    assert torch.equal(y.cpu(), torch.full((10000,), 4.0))
    assert done.query()


def test_small_ops_run_in_stream_order_behind_queued_work():
    # Small elementwise ops may run at once on the launching thread when their stream is idle
    # (npuLaunchShortTaskWithRelease); behind queued work they must wait for it.
    x = torch.zeros(16, device="npu")
    C._npu_sleep(100)
    x.fill_(3)               # queued behind the sleep
    y = x + 1                # a 16-element add: must read the filled x
    z = y * y
    cur = C._npu_getCurrentStream(0)
    assert not C._npu_streamQuery(*cur)  # nothing ran ahead of the sleep
    assert torch.equal(z.cpu(), torch.full((16,), 16.0))
    # On an idle stream the same ops run at once, and the stream stays idle.
    torch.npu.synchronize()
    w = z - 6
    assert C._npu_streamQuery(*cur)
    assert torch.equal(w.cpu(), torch.full((16,), 10.0))


def test_small_ops_with_inline_tasks_disabled_give_the_same_results(tmp_path):
    script = tmp_path / "chain.py"
    script.write_text(
        "import torch, torch_npu\n"
        "x = torch.arange(100.0, device='npu')\n"
        "for _ in range(5):\n"
        "    x = (x * 1.5 - 2).sin() + x.abs().sqrt()\n"
        "print(repr(x.cpu().tolist()))\n")
    outs = {}
    for flag in ("0", "1"):
        env = dict(os.environ, NPU_SIM_INLINE_TASKS=flag)
        run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        outs[flag] = run.stdout
    assert outs["0"] == outs["1"]  # the same kernels, bit for bit
    ref = torch.arange(100.0)
    for _ in range(5):
        ref = (ref * 1.5 - 2).sin() + ref.abs().sqrt()
    torch.testing.assert_close(torch.tensor(eval(outs["1"])), ref)


def test_event_elapsed_time():
    start = torch.Event(device="npu", enable_timing=True)
    end = torch.Event(device="npu", enable_timing=True)
    start.record()
    C._npu_sleep(60)
    end.record()
    end.synchronize()
    assert end.query()
    assert 60 <= start.elapsed_time(end) < 2000
    with pytest.raises((RuntimeError, ValueError), match="must be recorded"):
        torch.Event(device="npu", enable_timing=True).elapsed_time(end)  # never recorded


def test_an_error_in_queued_work_is_reported_at_synchronize():
    probabilities = torch.full((4,), 2.0, device="npu")  # out of [0, 1]: the kernel fails
    torch.empty(4, device="npu").bernoulli_(probabilities)  # returns at once
    with pytest.raises(RuntimeError, match=r"NPU error: npuErrorLaunchFailure: task 'bernoulli_'"
                                           r" failed on NPU 0 .*Expected p_in >= 0"):
        torch.accelerator.synchronize()
    assert torch.equal(torch.ones(3, device="npu").cpu(), torch.ones(3))  # the stream recovered


def test_accelerator_api():
    assert torch.accelerator.device_count() == C._npu_getDeviceCount()
    s = torch.Stream(device="npu:2", priority=-1)
    prev = torch.accelerator.current_stream(2)
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream(2) == s
    torch.accelerator.set_stream(prev)
    assert torch.accelerator.current_stream(2) == prev
    with torch.npu.device(2):
        C._npu_sleep(80)
        t0 = time.monotonic()
        torch.accelerator.synchronize(2)
        assert time.monotonic() - t0 > 0.03
        assert C._npu_streamQuery(*C._npu_getCurrentStream(2))


def test_current_stream_is_per_thread():
    pool = C._npu_getStreamFromPool(0, 0)
    C._npu_setStream(*pool)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(C._npu_getCurrentStream(0)))
    worker.start()
    worker.join()
    try:
        assert C._npu_getCurrentStream(0) == pool
        assert seen == [C._npu_getDefaultStream(0)]
    finally:
        C._npu_setStream(*C._npu_getDefaultStream(0))


def test_stream_pool_priorities_and_round_robin():
    least, greatest = C._npu_streamPriorityRange()
    assert (least, greatest) == (0, -1)
    normal = {C._npu_getStreamFromPool(3, 0) for _ in range(16)}
    high = {C._npu_getStreamFromPool(3, -1) for _ in range(16)}
    assert len(normal) == 8 and len(high) == 8 and not normal & high  # 8 per priority, reused
    assert all(sid != 0 and dev == 3 and typ == NPU_TYPE for sid, dev, typ in normal | high)
    assert C._npu_getDefaultStream(3) == (0, 3, NPU_TYPE)


def test_set_stream_makes_its_device_current():
    s = C._npu_getStreamFromPool(5, 0)
    before = C._npu_getDevice()
    try:
        C._npu_setStream(*s)
        assert C._npu_getDevice() == 5 and C._npu_getCurrentStream(5) == s
        x = torch.empty(4, device="npu")  # allocated on the current device's current stream
        assert x.device == torch.device("npu:5")
    finally:
        C._npu_setStream(*C._npu_getDefaultStream(5))
        C._npu_setDevice(before)


def test_work_on_a_stream_is_in_order_and_matches_cpu():
    ref = torch.arange(1000.0)
    s = torch.Stream(device="npu")
    with s:
        x = ref.npu()          # H2D on s
        x[::2].fill_(-1)       # fill on s
        y = x.double()         # device-side conversion on s
        out = y.cpu()          # D2H on s, synchronizes s
    expect = ref.clone()
    expect[::2] = -1
    assert torch.equal(out, expect.double())


def test_record_stream_keeps_memory_from_reuse_while_the_stream_uses_it():
    side = torch.Stream(device="npu:6")
    size = 1 << 20

    def reused(record: bool) -> bool:
        x = torch.empty(size, dtype=torch.uint8, device="npu:6")
        ptr = x.data_ptr()
        with side:
            C._npu_sleep(150)  # the side stream is busy "using" x
        if record:
            x.record_stream(side)
        del x
        y = torch.empty(size, dtype=torch.uint8, device="npu:6")
        side.synchronize()
        return y.data_ptr() == ptr

    assert reused(record=False)   # without record_stream the block is handed out again at once
    assert not reused(record=True)


def test_is_set_to():
    x = torch.ones(4, device="npu")
    assert torch.empty(0, device="npu").set_(x).is_set_to(x)
    assert not x.clone().is_set_to(x)
