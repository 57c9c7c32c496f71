"""Shadow execution: run a program at its real size without its data (docs/shadow.md).

``NPU_SIM_SHADOW=1`` (read once, when the simulator starts) makes npu tensors carry no data:
device memory is address space only, kernels keep their place in their streams but do not run,
collectives meet but move no bytes, and values read on the host are zeros. Shapes, dtypes,
strides, aliasing, autograd, the caching allocator and the order of work are those of a normal
run, so the memory a job needs on a 64 GB device is exact.

Under shadow execution a cost model of the card (``NPU_SIM_PROFILE``, default ``910B2``: the
figures in torch_npu/data/profile_<name>.toml, or a path to such a file; ``none`` for no clock)
drives a simulated device clock: each op is charged its roofline time, copies and collectives their transfer time,
and events, ``Event.elapsed_time`` and stream waits follow simulated time.
"""

from __future__ import annotations

import os
import tomllib

import torch_npu._C as _C

__all__ = ["shadow_mode", "load_profile", "cost_model", "simulated_time_ns"]

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def shadow_mode() -> bool:
    """True when this process runs under shadow execution (``NPU_SIM_SHADOW=1``)."""
    return bool(_C._npu_shadowMode())


def load_profile(name: str | None = None) -> dict:
    """The card profile `name` (a name such as "910B2" for torch_npu/data/profile_910B2.toml, or
    a path to a .toml file); NPU_SIM_PROFILE or "910B2" when None. Returns the parsed file."""
    name = name or os.environ.get("NPU_SIM_PROFILE") or "910B2"
    path = name if name.endswith(".toml") else os.path.join(_DATA, f"profile_{name}.toml")
    if not os.path.isfile(path):
        known = sorted(f[len("profile_"):-len(".toml")] for f in os.listdir(_DATA)
                       if f.startswith("profile_") and f.endswith(".toml"))
        raise ValueError(f"NPU_SIM_PROFILE={name!r}: no card profile {path}; known profiles: "
                         f"{', '.join(known)} (or give the path of a .toml file)")
    with open(path, "rb") as f:
        profile = tomllib.load(f)
    if "figures" not in profile:
        raise ValueError(f"card profile {path} has no [figures] table")
    profile["path"] = path
    return profile


def cost_model(profile: dict) -> dict:
    """The cost model's figures (what adapter/CostModel.h and npuSimCostModel take) from a
    card profile's [figures]. HCCS is a full mesh inside the node: a collective drives all of
    a chip's links at once, derated by their achieved fraction; RoCE likewise per card."""
    f = profile["figures"]

    def need(key):
        if key not in f:
            raise ValueError(f"card profile {profile.get('path')} lacks the figure '{key}'")
        return float(f[key])

    return {
        "cube_tflops_fp16": need("cube_tflops_fp16"),
        "cube_tflops_bf16": need("cube_tflops_bf16"),
        # torch.npu.matmul.allow_hf32 is False by default: float32 GEMMs run at the fp32 rate.
        "cube_tflops_fp32": need("cube_tflops_fp32"),
        # Elementwise and reduction kernels are bound by HBM; float32 lanes are the lower bound.
        "vector_tflops": need("vector_tflops_fp32"),
        "hbm_gbps": need("hbm_bandwidth_gbps"),
        "cube_efficiency": need("gemm_efficiency"),
        "vector_efficiency": need("hbm_efficiency"),
        "hbm_efficiency": need("hbm_efficiency"),
        "launch_overhead_us": need("kernel_launch_overhead_us"),
        "h2d_gbps": need("h2d_gbps"),
        "copy_overhead_us": need("kernel_launch_overhead_us"),
        "intra_gbps": need("hccs_links_per_chip") * need("hccs_link_gbps")
        * need("hccs_efficiency"),
        "intra_latency_us": need("hccs_latency_us"),
        "inter_gbps": need("roce_gbps_per_card") * need("roce_efficiency"),
        "inter_latency_us": need("roce_latency_us"),
        # Eager mode's host cost per op: the device cannot start an op before the host issued
        # it, so a job of many small ops is host-bound (npu/runtime.h, host_dispatch_us).
        "host_dispatch_us": need("host_dispatch_overhead_us"),
    }


_installed: dict | None = None


def install_cost_model() -> dict | None:
    """Installs the card's cost model when shadow execution is on (torch_npu's import does)."""
    global _installed
    if _installed is None and shadow_mode() and not _C._npu_costModelInstalled():
        if os.environ.get("NPU_SIM_PROFILE", "").strip().lower() == "none":
            return None  # memory only: no clock, no per-op cost
        profile = load_profile()
        model = cost_model(profile)
        _C._npu_setCostModel(model)
        _installed = {"profile": profile, "model": model}
    return _installed


def installed_profile() -> dict | None:
    return _installed


def simulated_time_ns(device: int | None = None) -> int:
    """The device's simulated clock (the latest of its streams'), in ns; 0 outside shadow."""
    import torch_npu.npu

    return int(_C._npu_simDeviceClock(-1 if device is None else
                                      torch_npu.npu._get_device_index(device)))
