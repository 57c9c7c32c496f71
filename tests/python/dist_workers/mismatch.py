"""Ranks that call different collectives, or the same one with different sizes: each rank must
fail with an error naming every rank's call, never return garbage.

usage: mismatch.py kinds|shapes|dtypes|roots
  kinds   rank 0 all_reduce(1024 floats), the others all_gather_into_tensor
  shapes  every rank all_reduce, rank 1 with 1000 elements instead of 1024
  dtypes  every rank all_reduce of 1024 elements, rank 1 in float16
  roots   every rank broadcast, rank 1 names another root
Each rank prints "rank R raised <type>: <message>" or "rank R returned <values>". Run with
TORCH_HCCL_ASYNC_ERROR_HANDLING=2 (the error is raised at the wait; 1, the default, prints it
from the watchdog and takes the process down) or with TORCH_DISTRIBUTED_DEBUG=DETAIL (PyTorch's
wrapper compares the calls first, through a gloo group)."""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

MODE = sys.argv[1]
RANK, LOCAL = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl", timeout=timedelta(seconds=20))
warm = torch.ones(4, device=dev)
dist.all_reduce(warm)  # the communicator exists and one collective matched
assert warm.cpu().tolist() == [float(WORLD)] * 4

x = torch.full((1024,), float(RANK + 1), device=dev)
try:
    if MODE == "kinds":
        if RANK == 0:
            dist.all_reduce(x)
        else:
            out = torch.zeros(1024 * WORLD, device=dev)
            dist.all_gather_into_tensor(out, x)
    elif MODE == "shapes":
        if RANK == 1:
            x = x[:1000].clone()
        dist.all_reduce(x)
    elif MODE == "dtypes":
        if RANK == 1:
            x = x.half()
        dist.all_reduce(x)
    elif MODE == "roots":
        dist.broadcast(x, src=0 if RANK != 1 else WORLD - 1)
    torch.npu.synchronize()
    print(f"rank {RANK} returned {x.cpu()[:4].tolist()}", flush=True)
except Exception as e:  # noqa: BLE001
    text = " ".join(str(e).split())
    print(f"rank {RANK} raised {type(e).__name__}: {text}", flush=True)
    os._exit(3)  # the communicator is broken: leave without tearing it down
