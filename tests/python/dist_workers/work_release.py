"""A collective's output is the program's, not the watchdog's: once the program drops the work
and the tensor, the allocator counts the memory free at once, even while the collective is still
in flight (as NCCL's watchdog, which keeps copies of its works without their outputs). The block
itself stays out of reuse until the comm stream is done with it.

Rank 1 joins the all-gather 1.5 s late, so rank 0's collective is certainly in flight while it
drops it. Prints "FAIL <what>" per failed check and "rank R work release ok" at the end.
"""
import os
import time

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
DEV = torch.device("npu", int(os.environ["LOCAL_RANK"]))
dist.init_process_group("hccl")
failures = []
N = 4 << 20  # 16 MiB of float32 per rank

inp = torch.full((N,), float(RANK + 1), device=DEV)
kept = torch.empty(N * WORLD, device=DEV)
dist.all_gather_into_tensor(kept, inp)  # the communicator exists before the timed part
torch.npu.synchronize()

if RANK == 1:
    time.sleep(1.5)
out = torch.empty(N * WORLD, device=DEV)
before = torch.npu.memory_allocated(DEV)
work = dist.all_gather_into_tensor(out, inp, async_op=True)
work.wait()  # the current stream waits; the host does not
in_flight = not work.is_completed()
ptr = out.data_ptr()
del work, out
freed = before - torch.npu.memory_allocated(DEV)
if RANK == 0:
    if not in_flight:
        failures.append("the all-gather finished before rank 1 joined it")
    if freed != N * WORLD * 4:
        failures.append(f"dropping the work and its output freed {freed} bytes, "
                        f"not {N * WORLD * 4}")
    again = torch.empty(N * WORLD, device=DEV)  # must not take the block the comm stream uses
    if again.data_ptr() == ptr and in_flight:
        failures.append("a new tensor got the block of the all-gather still in flight")
    del again

# The data of a collective whose work was dropped early is still right.
work = dist.all_gather_into_tensor(kept, inp, async_op=True)
del work
want = torch.cat([torch.full((N,), float(r + 1)) for r in range(WORLD)])
if not torch.equal(kept.cpu(), want):
    failures.append("all_gather_into_tensor after dropping its work gave wrong values")

for f in failures:
    print(f"FAIL rank {RANK}: {f}", flush=True)
if not failures:
    print(f"rank {RANK} work release ok", flush=True)
dist.destroy_process_group()
