"""A rank that dies, is stuck, or never joins: the others must report it within the deadline.

usage: fault.py kill|stuck|never_join  (deadline: init_process_group(timeout=DEADLINE seconds))
Rank 1 misbehaves; rank 0 runs a collective and waits for it. Rank 0 must not print
"unexpected success": its watchdog (or, for never_join, the communicator's connect deadline)
ends the wait with the documented error."""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

MODE = sys.argv[1]
DEADLINE = float(os.environ.get("DEADLINE", "3"))
RANK, LOCAL = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl", timeout=timedelta(seconds=DEADLINE))
x = torch.ones(1024, device=dev)
if MODE == "never_join" and RANK == 1:
    # Never makes its first collective, so the communicator never forms; leaves once rank 0
    # must have given up.
    time.sleep(2 * float(os.environ.get("HCCL_CONNECT_TIMEOUT", "3")) + 5)
    sys.exit(0)
dist.all_reduce(x)
assert x.cpu()[0].item() == 2.0
print(f"rank {RANK} ready", flush=True)
if MODE == "kill" and RANK == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if MODE == "stuck" and RANK == 1:
    time.sleep(600)
time.sleep(0.5)  # let rank 1 die first
start = time.monotonic()
dist.all_reduce(x)  # the second collective (sequence number 2)
x.cpu()
print(f"rank {RANK} unexpected success after {time.monotonic() - start:.1f} s", flush=True)
