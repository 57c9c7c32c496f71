"""torch_npu.profiler._ExperimentalConfig and its enums, with torch_npu's names, values, defaults
and checks: a bad value is not an error in torch_npu but a printed warning and the default, so
it is here too.

What each field does in SimNPU's output (docs/profiler.md):
  - profiler_level: Level_none records no device tasks (kernel_details.csv, op_statistic.csv and
    the trace's NPU rows are left out); Level0, Level1 and Level2 record them all (SimNPU has no
    CANN API or runtime layers for the higher levels to add);
  - export_type: ExportType.Text writes the JSON trace and the CSV tables, ExportType.Db one
    SQLite file, ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler.db, with the same tables;
  - data_simplification (True by default): after the output is written, the FRAMEWORK folder
    of raw records is deleted, as torch_npu deletes its intermediate data (analyse() can then
    not run on that folder again);
  - aic_metrics, l2_cache, op_attr, record_op_args, msprof_tx, gc_detect_threshold: accepted
    and listed in profiler_info.json, but they ask for hardware counters, CANN tooling or GC
    tracing that SimNPU does not simulate, so they add no data (a warning says so once).
"""

from __future__ import annotations

import os
import time

__all__ = [
    "_ExperimentalConfig",
    "supported_profiler_level",
    "supported_ai_core_metrics",
    "supported_export_type",
    "ProfilerLevel",
    "AiCMetrics",
    "ExportType",
]


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


def supported_profiler_level() -> set:
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2}


def supported_ai_core_metrics() -> set:
    return {AiCMetrics.PipeUtilization, AiCMetrics.ArithmeticUtilization, AiCMetrics.Memory,
            AiCMetrics.MemoryL0, AiCMetrics.MemoryUB, AiCMetrics.ResourceConflictRatio,
            AiCMetrics.L2Cache}


def supported_export_type() -> set:
    return {ExportType.Db, ExportType.Text}


_LEVELS = (ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2,
           ProfilerLevel.Level_none)
_METRICS = tuple(supported_ai_core_metrics()) + (AiCMetrics.AiCoreNone,)


def _warn(message: str) -> None:
    """torch_npu's profiler warning line (printed, not a Python warning)."""
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime())
    print(f"{stamp} [WARNING] [{os.getpid()}] profiler.py: {message}", flush=True)


class _ExperimentalConfig:
    """The experimental_config of torch_npu.profiler.profile (see the module docstring)."""

    def __init__(self, profiler_level: str = ProfilerLevel.Level0,
                 aic_metrics: str = AiCMetrics.AiCoreNone, l2_cache: bool = False,
                 msprof_tx: bool = False, data_simplification: bool = True,
                 record_op_args: bool = False, op_attr: bool = False,
                 gc_detect_threshold: float | None = None,
                 export_type: str = ExportType.Text):
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        # Level1 and Level2 collect the pipe utilization unless told otherwise (torch_npu).
        if profiler_level not in (ProfilerLevel.Level0, ProfilerLevel.Level_none) and \
                aic_metrics == AiCMetrics.AiCoreNone:
            self._aic_metrics = AiCMetrics.PipeUtilization
        self._l2_cache = l2_cache
        self._msprof_tx = msprof_tx
        self._data_simplification = data_simplification
        self.record_op_args = record_op_args
        self._op_attr = op_attr
        self._gc_detect_threshold = gc_detect_threshold
        self._export_type = export_type
        self._check_params()

    @property
    def profiler_level(self) -> str:
        return self._profiler_level

    @property
    def aic_metrics(self) -> str:
        return self._aic_metrics

    @property
    def export_type(self) -> str:
        return self._export_type

    @property
    def data_simplification(self) -> bool:
        return self._data_simplification

    @property
    def with_gc(self) -> bool:
        return self._gc_detect_threshold is not None

    @property
    def gc_detect_threshold(self):
        return self._gc_detect_threshold

    def _check_params(self) -> None:
        # torch_npu's order of checks and its words; each resets the bad value to its default.
        if self._profiler_level in (ProfilerLevel.Level0, ProfilerLevel.Level_none) and \
                self._aic_metrics != AiCMetrics.AiCoreNone:
            _warn("Please use level1 or level2 if you want to collect aic metrics, reset aic "
                  "metrics to None!")
            self._aic_metrics = AiCMetrics.AiCoreNone
        for name in ("l2_cache", "msprof_tx", "op_attr"):
            if not isinstance(getattr(self, f"_{name}"), bool):
                _warn(f"Invalid parameter {name}, which must be of boolean type, reset it to "
                      "False.")
                setattr(self, f"_{name}", False)
        if self._data_simplification is not None and \
                not isinstance(self._data_simplification, bool):
            _warn("Invalid parameter data_simplification, which must be of boolean type, reset "
                  "it to default.")
            self._data_simplification = True
        if not isinstance(self.record_op_args, bool):
            _warn("Invalid parameter record_op_args, which must be of boolean type, reset it to "
                  "False.")
            self.record_op_args = False
        if self._profiler_level not in _LEVELS:
            _warn("Invalid parameter profiler_level, reset it to ProfilerLevel.Level0.")
            self._profiler_level = ProfilerLevel.Level0
        if self._aic_metrics not in _METRICS:
            _warn("Invalid parameter aic_metrics, reset it to default.")
            self._aic_metrics = (AiCMetrics.AiCoreNone
                                 if self._profiler_level == ProfilerLevel.Level0
                                 else AiCMetrics.PipeUtilization)
        if self._export_type not in (ExportType.Text, ExportType.Db):
            _warn("Invalid parameter type, reset it to text.")
            self._export_type = ExportType.Text
        if self._op_attr and self._export_type != ExportType.Db:
            _warn("op_attr switch is invalid with export type set as text.")
            self._op_attr = False
        if self._gc_detect_threshold is not None:
            if isinstance(self._gc_detect_threshold, bool) or \
                    not isinstance(self._gc_detect_threshold, (int, float)):
                _warn("Parameter gc_detect_threshold is not int or float type, reset it to "
                      "default.")
                self._gc_detect_threshold = None
            elif self._gc_detect_threshold < 0.0:
                _warn("Parameter gc_detect_threshold can not be negetive, reset it to default.")
                self._gc_detect_threshold = None

    def records_device_tasks(self) -> bool:
        return self._profiler_level != ProfilerLevel.Level_none

    def not_simulated(self) -> list[str]:
        """The settings asked for that produce no data in SimNPU."""
        names = []
        if self._aic_metrics != AiCMetrics.AiCoreNone:
            names.append("aic_metrics")
        for name in ("l2_cache", "op_attr", "msprof_tx"):
            if getattr(self, f"_{name}"):
                names.append(name)
        if self.record_op_args:
            names.append("record_op_args")
        if self._gc_detect_threshold is not None:
            names.append("gc_detect_threshold")
        return names

    def to_dict(self) -> dict:
        """profiler_info.json's "experimental_config" (torch_npu's field names)."""
        return {"_profiler_level": self._profiler_level, "_aic_metrics": self._aic_metrics,
                "_l2_cache": self._l2_cache, "_msprof_tx": self._msprof_tx,
                "_op_attr": self._op_attr, "_data_simplification": self._data_simplification,
                "record_op_args": self.record_op_args, "_export_type": self._export_type,
                "_gc_detect_threshold": self._gc_detect_threshold}
