"""torch.npu.Stream and torch.npu.Event.

Both are PyTorch's generic torch.Stream / torch.Event: their methods (query, synchronize,
wait_event, wait_stream, record, elapsed_time) reach the simulated runtime through the
adapter's DeviceGuardImplInterface, so torch.Stream(device='npu') behaves the same way.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

import torch_npu._C as _C

from ._device import _check_index, _DeviceLike, _get_device_index, _lazy_init


class Stream(torch.Stream):
    """An in-order queue of device work on one NPU.

    Args:
        device: the NPU (current by default).
        priority: 0 (normal) or negative (high), as torch.cuda.Stream.
    """

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs.get("stream_id") is not None:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        _lazy_init()
        index = _check_index(_get_device_index(device))
        packed = _C._npu_getStreamFromPool(index, -1 if priority < 0 else 0)
        stream_id, device_index, device_type = packed
        return super().__new__(
            cls, stream_id=stream_id, device_index=device_index, device_type=device_type
        )

    def __init__(self, *args, **kwargs):
        pass

    def wait_event(self, event) -> None:
        """Makes future work on this stream wait for `event`."""
        event.wait(self)

    def wait_stream(self, stream) -> None:
        """Makes future work on this stream wait for the work queued on `stream` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Records `event` (a new one if None) on this stream and returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """True if all work queued on this stream has finished."""
        return _C._npu_streamQuery(self.stream_id, self.device_index, self.device_type)

    def synchronize(self) -> None:
        """Waits for all work queued on this stream."""
        _C._npu_streamSynchronize(self.stream_id, self.device_index, self.device_type)

    @property
    def npu_stream(self) -> int:
        return self.native_handle

    def __enter__(self):
        self._prev = current_stream(self.device_index)
        set_stream(self)
        return self

    def __exit__(self, *exc):
        set_stream(self._prev)
        return False

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, torch.Stream)
            and self.stream_id == other.stream_id
            and self.device_index == other.device_index
            and self.device_type == other.device_type
        )

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Stream device=npu:{self.device_index} npu_stream={self.stream_id:#x}>"


class Event(torch.Event):
    """A marker in a stream: wait on it, query it, time between two of them.

    Args:
        enable_timing: whether elapsed_time() may be used.
        blocking, interprocess: accepted for torch.cuda.Event compatibility; no effect.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        return super().__new__(
            cls, device="npu", enable_timing=enable_timing, blocking=blocking,
            interprocess=interprocess,
        )

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None) -> None:
        """Records the event on `stream` (the current stream by default)."""
        if stream is None:
            stream = current_stream()
        super().record(stream)

    def wait(self, stream=None) -> None:
        """Makes future work on `stream` (current by default) wait for this event."""
        if stream is None:
            stream = current_stream()
        super().wait(stream)

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event and `end_event` (both recorded and complete,
        both created with enable_timing=True)."""
        return _C._npu_eventElapsedTime(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Event {self.event_id:#x}>" if self.event_id else "<torch_npu.npu.Event uninitialized>"


def _wrap_stream(packed) -> Stream:
    stream_id, device_index, device_type = packed
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device: _DeviceLike = None) -> Stream:
    """The stream work is queued on for `device` (current by default), for this thread."""
    _lazy_init()
    return _wrap_stream(_C._npu_getCurrentStream(_check_index(_get_device_index(device))))


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream of `device`."""
    _lazy_init()
    return _wrap_stream(_C._npu_getDefaultStream(_check_index(_get_device_index(device))))


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Makes `stream` current for its device (a no-op for None)."""
    if stream is None:
        return
    _lazy_init()
    _C._npu_setStream(stream.stream_id, stream.device_index, stream.device_type)


@contextlib.contextmanager
def stream(stream: Optional[torch.Stream]):
    """Context manager: queue work on `stream` inside the block, then restore."""
    if stream is None:
        yield
        return
    src_prev = current_stream()
    dst_prev = current_stream(stream.device_index) if stream.device_index != src_prev.device_index else None
    set_stream(stream)
    try:
        yield
    finally:
        if dst_prev is not None:
            set_stream(dst_prev)
        set_stream(src_prev)


class StreamContext:
    """Class form of torch.npu.stream(), as torch.cuda.StreamContext."""

    def __init__(self, stream: Optional[torch.Stream]):
        self._cm = globals()["stream"](stream)

    def __enter__(self):
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)
