"""FSDP2 (fully_shard) training of the GPT-style test model on WORLD ranks against
single-process training on the global batch, run by torchrun. Prints the largest differences;
exits 1 beyond 1e-5."""
import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torch_npu  # noqa: F401
from torch_npu.testing.models import GPT, batches, loss_fn

RANK, WORLD, LOCAL = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
STEPS, GLOBAL_BATCH = 4, 8
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl")
mesh = init_device_mesh("npu", (WORLD,))

torch.manual_seed(0)
model = GPT().to(dev)
reference = copy.deepcopy(model)
for block in model.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
per_rank = GLOBAL_BATCH // WORLD
loss_diff = 0.0
for x, y in batches("gpt", STEPS, batch=GLOBAL_BATCH, seed=2):
    xs, ys = (t[RANK * per_rank:(RANK + 1) * per_rank].to(dev) for t in (x, y))
    opt.zero_grad()
    loss = loss_fn("gpt", model(xs), ys)
    loss.backward()
    opt.step()
    ref_opt.zero_grad()
    ref_loss = loss_fn("gpt", reference(x.to(dev)), y.to(dev))
    ref_loss.backward()
    ref_opt.step()
    global_loss = loss.detach().clone()
    dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
    loss_diff = max(loss_diff, abs(global_loss.item() - ref_loss.item()) / abs(ref_loss.item()))
sharded = sum(1 for p in model.parameters() if type(p).__name__ == "DTensor")
param_diff = max((p.full_tensor() - q.detach()).abs().max().item()
                 for p, q in zip(model.parameters(), reference.parameters()))
dist.destroy_process_group()
ok = param_diff <= 1e-5 and loss_diff <= 1e-5 and sharded == len(list(reference.parameters()))
print(f"rank {RANK} fsdp2 world={WORLD} sharded_params={sharded} param_diff={param_diff:.3g} "
      f"loss_diff={loss_diff:.3g} {'ok' if ok else 'FAILED'}", flush=True)
sys.exit(0 if ok else 1)
