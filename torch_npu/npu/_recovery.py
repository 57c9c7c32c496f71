"""torch_npu's fault-recovery API, and the optimizer-step side of NPU_SIM_FAULTS (docs/faults.md).

    torch_npu.npu.stop_device(device_id) -> 0          # FORCE STOP: later work on it fails
    torch_npu.npu.restart_device(device_id)            # repairs it; work runs again
    torch_npu.npu.check_uce_in_memory(device_id) -> 0|1|2|3
    torch_npu.npu._get_uce_addr() -> [{"ptr": int, "size": int}, ...]

check_uce_in_memory tells which memory an uncorrectable HBM error (UCE) hit, as torch_npu
documents it for MindCluster's recovery: 0 none, 1 memory outside PyTorch's caching allocator
(cannot be recovered), 2 memory the allocator only cached (emptied now: re-run the step),
3 memory still allocated, such as parameters or optimizer state (load them from a checkpoint).
"""
from __future__ import annotations

import logging
import os
import re

import torch

import torch_npu._C as _C

__all__ = ["stop_device", "restart_device", "check_uce_in_memory"]

logger = logging.getLogger("torch_npu.recovery")


def _process_groups_on_npu():
    from torch.distributed.distributed_c10d import _pg_map

    npu = torch.device("npu")
    for pg in list(_pg_map):
        if npu in getattr(pg, "_device_types", ()):
            yield pg


def stop_device(device_id: int) -> int:
    """Stops the device: queued and later work on it fails with FORCE STOP. Returns 0."""
    torch_npu_lazy_init()
    logger.info("stop device start, device_id=%s", device_id)
    result = _C._npu_stopDevice(int(device_id))
    logger.info("stop device end, device_id=%s, result=%s", device_id, result)
    return result


def restart_device(device_id: int, rebuild_all_resources: bool = False,
                   disable_tensor_unsafe_check: bool = False) -> None:
    """Repairs the device after stop_device or a memory error: work runs on it again. Memory that
    held an uncorrectable error is repaired. A lost device cannot be restarted (RuntimeError).
    `rebuild_all_resources` and `disable_tensor_unsafe_check` are accepted as torch_npu does;
    SimNPU's streams need no rebuilding."""
    torch_npu_lazy_init()
    logger.info("restart device start, device_id=%s, rebuild_all_resources=%s", device_id,
                rebuild_all_resources)
    _C._npu_restart_device(int(device_id))
    logger.info("restart device end, device_id=%s", device_id)


def check_uce_in_memory(device_id: int) -> int:
    torch_npu_lazy_init()
    return _C._npu_check_uce_in_memory(int(device_id))


def _get_uce_addr() -> list[dict]:
    torch_npu_lazy_init()
    return _C._npu_get_uce_addr()


def torch_npu_lazy_init() -> None:
    import torch_npu.npu

    torch_npu.npu._lazy_init()


# ---- NPU_SIM_FAULTS at optimizer steps ---------------------------------------------------------

_TARGET = re.compile(r"^(param|grad)\[(\d+)\]$|^state\[(\d+)\]\.(\w+)$")


def _resolve_target(optimizer: torch.optim.Optimizer, target: str, text: str) -> torch.Tensor:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    m = _TARGET.match(target)
    index = int(m.group(2) or m.group(3))
    where = f"NPU_SIM_FAULTS '{text}'"
    if index >= len(params):
        raise RuntimeError(f"{where}: the optimizer has {len(params)} parameter(s); "
                           f"target {target} names parameter {index}")
    param = params[index]
    if m.group(1) == "param":
        return param
    if m.group(1) == "grad":
        if param.grad is None:
            raise RuntimeError(f"{where}: parameter {index} has no gradient at this step")
        return param.grad
    key = m.group(4)
    state = optimizer.state.get(param, {})
    value = state.get(key)
    if not isinstance(value, torch.Tensor):
        raise RuntimeError(f"{where}: the optimizer state of parameter {index} has no tensor "
                           f"{key!r} (it has {sorted(state)})")
    return value


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    device = torch.npu.current_device()
    due = _C._npu_faultStep(device)
    if due is None:
        return
    target, text = due
    tensor = _resolve_target(optimizer, target, text)
    if tensor.device.type != "npu":
        raise RuntimeError(f"NPU_SIM_FAULTS '{text}': {target} is on {tensor.device}, not on npu")
    storage = tensor.untyped_storage()
    stream = torch.npu.current_stream(tensor.device.index).npu_stream
    _C._npu_injectUce(tensor.device.index, stream, storage.data_ptr(), storage.nbytes())


def install_fault_hooks() -> None:
    """Counts optimizer steps for NPU_SIM_FAULTS' step= triggers (torch_npu's import calls it)."""
    # The environment, not the runtime: asking the runtime would fix its configuration at import.
    if os.environ.get("NPU_SIM_FAULTS", "").strip():
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(_on_optimizer_step)
