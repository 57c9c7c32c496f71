"""torch_npu.profiler: host operators and NPU kernels on one timeline, as torch_npu's profiler.

    import torch_npu
    from torch_npu.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.NPU],
                 schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler("./prof")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Each active window becomes <dir>/<worker>_<timestamp>_ascend_pt/ASCEND_PROFILER_OUTPUT/ with
trace_view.json (Chrome / Perfetto), kernel_details.csv, operator_details.csv and
op_statistic.csv. TORCH_NPU_PROFILING_MODE=true (or the article's PROFILING_MODE=true) prints a
per-op device time table at exit instead. See docs/profiler.md.
"""

from torch.autograd.profiler import record_function

from torch_npu.profiler.experimental_config import (
    AiCMetrics,
    ExportType,
    ProfilerLevel,
    _ExperimentalConfig,
    supported_ai_core_metrics,
    supported_export_type,
    supported_profiler_level,
)
from torch_npu.profiler.profiler import (
    ProfilerAction,
    ProfilerActivity,
    analyse,
    profile,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)

__all__ = [
    "AiCMetrics",
    "ExportType",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerLevel",
    "_ExperimentalConfig",
    "analyse",
    "profile",
    "record_function",
    "schedule",
    "supported_activities",
    "supported_ai_core_metrics",
    "supported_export_type",
    "supported_profiler_level",
    "tensorboard_trace_handler",
]
