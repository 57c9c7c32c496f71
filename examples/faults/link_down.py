"""A link that goes down under a collective: every rank must get a clear error, soon, not hang.

    NPU_SIM_FAULTS="link_down@collective=3,rank=0,peer=1" \\
        torchrun --nproc_per_node 2 link_down.py OUT_DIR

Each rank runs all-reduces; the third one on rank 0 meets the broken link. Each rank writes
"rank R failed after S s: <the error's line>" (or "rank R finished") to OUT_DIR/rank<R>.txt and
to stdout, and exits non-zero on an error. With mode=hang the rank stays away until HCCL_EXEC_TIMEOUT, and every rank times out."""
import os
import sys
import time

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

OUT = sys.argv[1]
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])


def report(line: str) -> None:
    print(line, flush=True)
    with open(os.path.join(OUT, f"rank{rank}.txt"), "w") as f:
        f.write(line + "\n")



torch.npu.set_device(local)
dev = torch.device("npu", local)
dist.init_process_group("hccl")
x = torch.ones(4096, device=dev)
began = time.monotonic()
try:
    for _ in range(6):
        dist.all_reduce(x)
        torch.npu.synchronize()
except Exception as e:  # noqa: BLE001 (the point is what every rank sees)
    first = next((line for line in str(e).splitlines() if "LINK" in line or "arrive" in line),
                 str(e).splitlines()[0])
    report(f"rank {rank} failed after {time.monotonic() - began:.1f} s: {first}")
    os._exit(1)
report(f"rank {rank} finished")
dist.destroy_process_group()
