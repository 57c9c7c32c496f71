"""Tools that ship with torch_npu: npu-smi (npu_smi), the environment check (collect_env), the
operator report (op_report), and the version query torch_npu's own tools import from here.

Nothing here imports torch at module level: `python -m torch_npu.utils.collect_env` must run
even when torch or the compiled extension is broken.
"""


def get_cann_version(module: str = "CANN") -> str:
    """The version of a CANN component, as torch_npu.utils.get_cann_version answers it.

    SimNPU's runtime plays CANN's role, so "CANN" (and its runtime) report the runtime's version
    and "DRIVER" the simulated driver's; torch.version.cann holds the same CANN string.
    """
    import torch_npu._C as _C

    versions = {"CANN": _C._npu_runtimeVersion, "RUNTIME": _C._npu_runtimeVersion,
                "DRIVER": _C._npu_driverVersion}
    query = versions.get(str(module).upper())
    if query is None:
        raise ValueError(f"get_cann_version: unknown module {module!r}; "
                         f"expected one of {', '.join(sorted(versions))}")
    return query()


# The tensor-combining helpers import torch, so they load on first use (PEP 562).
_LAZY = {"npu_combine_tensors": "combine_tensors", "get_part_combined_tensor": "combine_tensors",
         "is_combined_tensor_valid": "combine_tensors"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
