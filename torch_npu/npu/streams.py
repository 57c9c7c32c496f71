"""torch.npu.Stream and torch.npu.Event.

Both are PyTorch's generic torch.Stream / torch.Event: their methods (query, synchronize,
wait_event, wait_stream, record, elapsed_time) reach the simulated runtime through the
adapter's DeviceGuardImplInterface, so torch.Stream(device='npu') behaves the same way.
"""

from __future__ import annotations

import torch

import torch_npu._C as _C


class Stream(torch.Stream):
    """An in-order queue of device work on one NPU.

    Args:
        device: the NPU (current by default).
        priority: 0 (normal) or negative (high), as torch.cuda.Stream.
    """

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs.get("stream_id") is not None:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        from . import _check_index, _get_device_index, _lazy_init

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
        from . import current_stream, set_stream

        self._prev = current_stream(self.device_index)
        set_stream(self)
        return self

    def __exit__(self, *exc):
        from . import set_stream

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
            from . import current_stream

            stream = current_stream()
        super().record(stream)

    def wait(self, stream=None) -> None:
        """Makes future work on `stream` (current by default) wait for this event."""
        if stream is None:
            from . import current_stream

            stream = current_stream()
        super().wait(stream)

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event and `end_event` (both recorded and complete,
        both created with enable_timing=True)."""
        return _C._npu_eventElapsedTime(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Event {self.event_id:#x}>" if self.event_id else "<torch_npu.npu.Event uninitialized>"
