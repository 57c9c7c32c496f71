"""DDP training of the GPT-style test model on WORLD ranks against single-process training on the
global batch (same initial weights, same batches), run by torchrun. Each rank trains on its slice
of every global batch; the single-process reference runs in every rank on the whole batch.
Prints the largest parameter and loss differences; exits 1 beyond 1e-5."""
import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_npu  # noqa: F401
from torch_npu.testing.models import GPT, batches, loss_fn

RANK, WORLD, LOCAL = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
STEPS, GLOBAL_BATCH = 5, 8
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl")

torch.manual_seed(0)
model = GPT().to(dev)
reference = copy.deepcopy(model)
ddp = DDP(model, device_ids=[LOCAL])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
per_rank = GLOBAL_BATCH // WORLD
loss_diff = 0.0
for x, y in batches("gpt", STEPS, batch=GLOBAL_BATCH, seed=1):
    xs, ys = (t[RANK * per_rank:(RANK + 1) * per_rank].to(dev) for t in (x, y))
    opt.zero_grad()
    loss = loss_fn("gpt", ddp(xs), ys)
    loss.backward()
    opt.step()
    ref_opt.zero_grad()
    ref_loss = loss_fn("gpt", reference(x.to(dev)), y.to(dev))
    ref_loss.backward()
    ref_opt.step()
    global_loss = loss.detach().clone()
    dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)  # the mean of equal slices' means
    loss_diff = max(loss_diff, abs(global_loss.item() - ref_loss.item()) / abs(ref_loss.item()))
param_diff = max((p.detach() - q.detach()).abs().max().item()
                 for p, q in zip(model.parameters(), reference.parameters()))
# Every rank holds the same parameters.
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.empty_like(flat) for _ in range(WORLD)]
dist.all_gather(gathered, flat)
same = all(torch.equal(g, gathered[0]) for g in gathered)
dist.destroy_process_group()
ok = param_diff <= 1e-5 and loss_diff <= 1e-5 and same
print(f"rank {RANK} ddp world={WORLD} param_diff={param_diff:.3g} loss_diff={loss_diff:.3g} "
      f"ranks_equal={same} {'ok' if ok else 'FAILED'}", flush=True)
sys.exit(0 if ok else 1)
