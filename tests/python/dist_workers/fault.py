"""A rank that dies, is stuck, or never joins: the others must report it within the deadline.

usage: fault.py kill|stuck|never_join|kill_cleanup_only
(deadline: init_process_group(timeout=DEADLINE seconds))
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
if MODE in ("kill", "kill_cleanup_only") and RANK == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if MODE == "stuck" and RANK == 1:
    time.sleep(600)
time.sleep(0.5)  # let rank 1 die first
if MODE == "kill_cleanup_only":
    # TORCH_HCCL_ASYNC_ERROR_HANDLING=2: the process lives on; the work reports the failure.
    work = dist.all_reduce(x, async_op=True)
    while not work.is_completed():
        time.sleep(0.05)
    try:
        work.wait()
        print("rank 0 wait returned", flush=True)
    except dist.DistBackendError as e:
        print(f"rank 0 wait raised DistBackendError: {e}", flush=True)
    try:
        dist.all_reduce(x)
        x.cpu()
        print("rank 0 next collective returned", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"rank 0 next collective raised {type(e).__name__}", flush=True)
    sys.exit(0)
start = time.monotonic()
dist.all_reduce(x)  # the second collective (sequence number 2)
x.cpu()
print(f"rank {RANK} unexpected success after {time.monotonic() - start:.1f} s", flush=True)
