"""A CUDA-style DDP script, unmodified ("nccl", .cuda(), torch.cuda.set_device), run by torchrun
with TORCH_TRANSFER_TO_NPU=1; then rank 0 runs npu-smi while every rank holds memory on its
device, and prints its output between markers for the test to read."""
import os
import shutil
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} backend={dist.get_backend()} device={torch.cuda.current_device()} "
      f"pid={os.getpid()}", flush=True)
torch.manual_seed(0)
model = DDP(nn.Linear(8, 4).cuda(), device_ids=[local_rank])
x = torch.randn(16, 8, device="cuda")
model(x).sum().backward()
grad = model.module.weight.grad.clone()
grads = [torch.empty_like(grad) for _ in range(world)]
dist.all_gather(grads, grad)
assert all(torch.equal(g, grads[0]) for g in grads), "DDP gradients differ across ranks"
hold = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda").fill_(1)  # 64 MB each
torch.cuda.synchronize()
dist.barrier()
if rank == 0:
    exe = shutil.which("npu-smi") or os.path.join(os.path.dirname(sys.executable), "npu-smi")
    out = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=60).stdout
    print("NPU-SMI-BEGIN\n" + out + "NPU-SMI-END", flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} cuda-style ok", flush=True)
