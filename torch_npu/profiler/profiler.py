"""The profile context manager, its schedule and the trace handler.

How it works:
  - A recording window opens the adapter's session (torch_npu._C._npu_profiler_start): host
    operators come from a RecordFunction callback on this thread (and the autograd threads it
    drives), device kernels, copies and memsets from the runtime's activity records.
  - The schedule is torch.profiler's: step numbers count prof.step() calls; NONE and WARMUP
    steps record nothing, RECORD steps record, and the end of a RECORD_AND_SAVE step (or stop())
    closes the window and calls on_trace_ready(prof). Each recorded step is a
    "ProfilerStep#<n>" span, as in torch.profiler.
  - A closed window is a ProfileResult (torch_npu/profiler/_result.py): the trace and CSV
    tables are computed from it, so the files always agree with each other.
"""

from __future__ import annotations

import enum
import os
import socket
import time
import warnings
from typing import Any, Callable, Iterable

import torch
from torch.profiler import ProfilerAction

import torch_npu
from torch_npu.profiler._result import ProfileResult
from torch_npu.profiler.experimental_config import _ExperimentalConfig


class ProfilerActivity(enum.Enum):
    """What to record: host operators (CPU) and device activity (NPU)."""

    CPU = "CPU"
    NPU = "NPU"


def supported_activities() -> set:
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


def _to_activity(value: Any) -> ProfilerActivity:
    if isinstance(value, ProfilerActivity):
        return value
    # torch.profiler's own enum: CPU, and PrivateUse1 (which torch shows as NPU once renamed).
    torch_enum = torch.profiler.ProfilerActivity
    if value == torch_enum.CPU:
        return ProfilerActivity.CPU
    if value == torch_enum.PrivateUse1:
        return ProfilerActivity.NPU
    if isinstance(value, str) and value.upper() in ProfilerActivity.__members__:
        return ProfilerActivity[value.upper()]
    raise ValueError(
        f"torch_npu.profiler.profile: unknown activity {value!r} in activities; use "
        "torch_npu.profiler.ProfilerActivity.CPU and/or ProfilerActivity.NPU"
    )


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0
             ) -> Callable[[int], ProfilerAction]:
    """torch.profiler.schedule's semantics, with errors that name the bad argument.

    Steps skip_first + k * (wait + warmup + active) + [0, wait) record nothing, the next warmup
    steps warm up, the next active steps record, the last of them saving the trace. With
    repeat > 0 only `repeat` cycles happen, then nothing is recorded.
    """
    for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1),
                               ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(
                f"torch_npu.profiler.schedule: {name} must be an integer >= {least}, got "
                f"{value!r}"
            )
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def _default_schedule(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD  # no schedule: one window from start() to stop()


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class profile:  # noqa: N801 (torch_npu's name)
    """Profiles host operators and NPU activity; see the module docstring."""

    def __init__(
        self,
        activities: Iterable[Any] | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[["profile"], Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Any = None,
        use_cuda: bool | None = None,
    ) -> None:
        for name, value in (("with_stack", with_stack), ("with_flops", with_flops),
                            ("with_modules", with_modules)):
            if value:
                raise NotImplementedError(
                    f"torch_npu.profiler.profile: {name}=True is not supported by SimNPU's "
                    "profiler (no call stacks, FLOP counts or module hierarchy); leave it False"
                )
        if experimental_config is not None and \
                not isinstance(experimental_config, _ExperimentalConfig):
            raise TypeError(
                "torch_npu.profiler.profile: experimental_config must be a "
                f"torch_npu.profiler._ExperimentalConfig, got {type(experimental_config).__name__}"
            )
        if experimental_config is not None and experimental_config.not_simulated():
            warnings.warn(
                "torch_npu.profiler.profile: experimental_config asks for "
                f"{', '.join(experimental_config.not_simulated())}, which SimNPU does not "
                "simulate (no hardware counters, CANN tools or GC tracing): they are recorded in "
                "profiler_info.json but add no data", stacklevel=2)
        if use_cuda:
            raise ValueError("torch_npu.profiler.profile: use_cuda=True makes no sense on NPU; "
                             "use activities=[ProfilerActivity.NPU]")
        if activities is None:
            chosen = supported_activities()
        else:
            if isinstance(activities, (str, ProfilerActivity)):
                raise TypeError("torch_npu.profiler.profile: activities must be a list of "
                                f"ProfilerActivity values, got {activities!r}")
            chosen = {_to_activity(a) for a in activities}
            if not chosen:
                raise ValueError("torch_npu.profiler.profile: activities is empty; pass "
                                 "[ProfilerActivity.CPU, ProfilerActivity.NPU] or a subset")
        if schedule is not None and not callable(schedule):
            raise TypeError(
                f"torch_npu.profiler.profile: schedule must be a callable step -> ProfilerAction "
                f"(torch_npu.profiler.schedule(...)), got {schedule!r}"
            )
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(
                "torch_npu.profiler.profile: on_trace_ready must be a callable taking the "
                f"profiler (tensorboard_trace_handler(dir)), got {on_trace_ready!r}"
            )
        self.activities = chosen
        self.experimental_config = experimental_config
        self.schedule = schedule or _default_schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self._recording = False
        self._step_scope = None
        self._window_steps: list[int] = []
        self._result: ProfileResult | None = None
        self._started = False

    # ---- the context manager and the step protocol ------------------------------------------

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._started:
            raise RuntimeError("torch_npu.profiler.profile.start: already started")
        self._started = True
        self.step_num = 0
        self.current_action = self._action(0)
        self._enter_action(self.current_action)

    def stop(self) -> None:
        if not self._started:
            return
        self._close_step_scope()
        if self._recording:
            self._finish_window()
        self._started = False

    def step(self) -> None:
        """Ends the current step; the schedule says what the next one does."""
        if not self._started:
            raise RuntimeError("torch_npu.profiler.profile.step: call start() (or enter the "
                               "`with` block) first")
        self._close_step_scope()
        previous = self.current_action
        self.step_num += 1
        self.current_action = self._action(self.step_num)
        if self._recording and (previous == ProfilerAction.RECORD_AND_SAVE
                                or self.current_action not in _RECORDING):
            self._finish_window()
        self._enter_action(self.current_action)

    # ---- results ----------------------------------------------------------------------------

    @property
    def result(self) -> ProfileResult:
        """The last closed recording window."""
        if self._result is None:
            raise RuntimeError("torch_npu.profiler: no recording window has finished yet")
        return self._result

    def export_chrome_trace(self, path: str) -> None:
        self.result.write_trace(path)

    def key_averages_table(self, row_limit: int = 20) -> str:
        """Per device op: calls and device time (the PROFILING_MODE table)."""
        return self.result.device_time_table(row_limit)

    # ---- internals --------------------------------------------------------------------------

    def _action(self, step: int) -> ProfilerAction:
        action = self.schedule(step)
        if not isinstance(action, ProfilerAction):
            raise TypeError(
                f"torch_npu.profiler.profile: schedule({step}) returned {action!r}; a schedule "
                "must return a torch.profiler.ProfilerAction"
            )
        return action

    def _enter_action(self, action: ProfilerAction) -> None:
        if action in _RECORDING:
            if not self._recording:
                self._open_window()
            self._window_steps.append(self.step_num)
            self._step_scope = torch.autograd.profiler.record_function(
                f"ProfilerStep#{self.step_num}")
            self._step_scope.__enter__()

    def _close_step_scope(self) -> None:
        if self._step_scope is not None:
            self._step_scope.__exit__(None, None, None)
            self._step_scope = None

    def _open_window(self) -> None:
        from torch_npu.profiler import _profiling_mode

        if _profiling_mode.active():
            raise RuntimeError(
                f"torch_npu.profiler.profile: {_profiling_mode.active()}=true is profiling this "
                "process already (it prints the per-op table at exit); unset it to use "
                "torch_npu.profiler.profile"
            )
        torch_npu._C._npu_profiler_start(
            host=True,
            device=ProfilerActivity.NPU in self.activities,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
        )
        self._recording = True
        self._window_steps = []

    def _finish_window(self) -> None:
        raw = torch_npu._C._npu_profiler_stop()
        self._recording = False
        self._result = ProfileResult(
            raw,
            host=ProfilerActivity.CPU in self.activities,
            device=ProfilerActivity.NPU in self.activities,
            memory=self.profile_memory,
            steps=list(self._window_steps),
            scheduled=self.schedule is not _default_schedule,
            experimental=(self.experimental_config.to_dict()
                          if self.experimental_config is not None else None),
        )
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None,
                              analyse_flag: bool = True) -> Callable[[profile], str]:
    """on_trace_ready that writes torch_npu's layout under dir_name:

    <dir_name>/<worker_name>_<YYYYmmddHHMMSSfff>_ascend_pt/
        profiler_info.json
        ASCEND_PROFILER_OUTPUT/{trace_view.json, kernel_details.csv, operator_details.csv,
                                op_statistic.csv[, memory_record.csv]}

        FRAMEWORK/simnpu_records.json   (the records, for torch_npu.profiler.analyse)

    worker_name defaults to <hostname>_<pid>. analyse_flag=False writes the records only (no
    ASCEND_PROFILER_OUTPUT); torch_npu.profiler.analyse(dir) writes it later, in any process.
    Returns the run directory.
    """
    if not isinstance(dir_name, (str, os.PathLike)) or not str(dir_name):
        raise ValueError(f"tensorboard_trace_handler: dir_name must be a path, got {dir_name!r}")

    def handler(prof: profile) -> str:
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stamp = time.strftime("%Y%m%d%H%M%S") + f"{int(time.time() * 1000) % 1000:03d}"
        run_dir = os.path.join(os.fspath(dir_name), f"{worker}_{stamp}_ascend_pt")
        suffix = 1
        while os.path.exists(run_dir):  # two windows in the same millisecond
            run_dir = os.path.join(os.fspath(dir_name), f"{worker}_{stamp}_{suffix}_ascend_pt")
            suffix += 1
        prof.result.write_raw(run_dir)
        if analyse_flag:
            prof.result.write_output(run_dir)
        return run_dir

    return handler


def analyse(profiler_path: str, max_process_number: int | None = None) -> list[str]:
    """Offline analysis: writes ASCEND_PROFILER_OUTPUT for a run folder (<...>_ascend_pt) or for
    every run folder inside `profiler_path`, from the records tensorboard_trace_handler saved
    (also with analyse_flag=False). Returns the run folders analysed. max_process_number is
    torch_npu's parallelism knob; the folders are analysed one after the other here."""
    if max_process_number is not None and (not isinstance(max_process_number, int)
                                           or max_process_number < 1):
        raise ValueError(f"analyse: max_process_number must be a positive integer, got "
                         f"{max_process_number!r}")
    path = os.fspath(profiler_path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"analyse: {path!r} is not a folder; pass the dir_name given to "
                                "tensorboard_trace_handler, or one of its *_ascend_pt folders")
    if path.rstrip("/").endswith("_ascend_pt"):
        runs = [path]
    else:
        runs = sorted(os.path.join(path, d) for d in os.listdir(path) if d.endswith("_ascend_pt"))
    if not runs:
        raise FileNotFoundError(f"analyse: {path} holds no *_ascend_pt folder")
    for run_dir in runs:
        ProfileResult.read_raw(run_dir).write_output(run_dir)
    return runs
