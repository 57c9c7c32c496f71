"""Wall time of device work, for the benchmarks: a call is timed from a drained device to a
drained device, so the npu's asynchronous launches are counted in full."""

import time

import torch


def synchronize(device: str) -> None:
    if torch.device(device).type == "npu":
        torch.npu.synchronize()


def timed(fn, device: str) -> float:
    """Seconds `fn()` takes on `device`, its queued work included."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start
