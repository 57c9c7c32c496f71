"""torch_npu.distributed: the "hccl" backend of torch.distributed for npu tensors.

``import torch_npu`` registers it, so the article's two changed lines work unmodified::

    dist.init_process_group(backend="hccl")   # or init_process_group() with npu as accelerator
    $ torchrun --nproc_per_node=8 main.py

The backend is ProcessGroupHCCL (adapter/distributed/), a c10d Backend over SimNPU's
collectives library (ccl/, include/npu/hccl.h). Ranks of one node exchange data through shared
memory; a group spanning nodes (hosts, or NPU_SIM_RUNTIME_DIRs: two runtime directories on one
machine are two nodes) sends the hops between nodes through a Gloo group made here from the same
store.
"""

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["is_hccl_available", "ProcessGroupHCCL"]

_INTER_NODE_PREFIX = "hccl_inter_node/"


def is_hccl_available() -> bool:
    """True: the hccl backend is built into this SimNPU (whenever torch.distributed is)."""
    return dist.is_available()


def _node_name() -> str:
    runtime_dir = os.environ.get("NPU_SIM_RUNTIME_DIR") or f"/tmp/simnpu-{os.getuid()}"
    return f"{socket.gethostname()}|{os.path.abspath(runtime_dir)}"


def _node_of_rank(store, rank: int, size: int) -> list[int]:
    """Every rank's node, numbered from 0 in rank order of first appearance (the same list on
    every rank), exchanged through the group's store."""
    store.set(f"hccl_node/{rank}", _node_name())
    names = [store.get(f"hccl_node/{r}").decode() for r in range(size)]
    index: dict[str, int] = {}
    return [index.setdefault(name, len(index)) for name in names]


def _create_process_group_hccl(dist_backend_opts, backend_options):
    """The creator torch.distributed calls for backend "hccl" (extended API)."""
    if backend_options is not None:
        raise NotImplementedError(
            "init_process_group(backend='hccl', pg_options=...): ProcessGroupHCCL takes no "
            "options object in SimNPU; set the deadline with timeout= and the HCCL_* environment "
            "variables instead")
    from torch_npu._C._distributed_c10d import ProcessGroupHCCL

    store = dist_backend_opts.store
    rank, size = dist_backend_opts.group_rank, dist_backend_opts.group_size
    timeout = dist_backend_opts.timeout
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    nodes = _node_of_rank(store, rank, size)
    inter_node = None
    if len(set(nodes)) > 1:
        # The hops between nodes go through Gloo over TCP, on CPU views of the npu buffers.
        inter_node = dist.ProcessGroupGloo(dist.PrefixStore(_INTER_NODE_PREFIX, store), rank,
                                           size, timedelta(seconds=seconds))
    return ProcessGroupHCCL(store, rank, size, seconds, nodes, inter_node,
                            str(dist_backend_opts.group_id),
                            [int(r) for r in dist_backend_opts.global_ranks_in_group])


def _register() -> None:
    if not dist.is_available() or "hccl" in dist.Backend.backend_list:
        return
    from torch_npu.distributed import _dtensor_ops

    _dtensor_ops.install()  # DTensor sharding rules of the fused ops (npu_rms_norm, ...)
    dist.Backend.register_backend("hccl", _create_process_group_hccl, extended_api=True,
                                  devices=["npu"])
    # torch_npu's spelling, beside torch's is_nccl_available and friends.
    dist.is_hccl_available = is_hccl_available


def __getattr__(name):
    if name == "ProcessGroupHCCL":
        from torch_npu._C._distributed_c10d import ProcessGroupHCCL

        return ProcessGroupHCCL
    raise AttributeError(f"module 'torch_npu.distributed' has no attribute '{name}'")


_register()
