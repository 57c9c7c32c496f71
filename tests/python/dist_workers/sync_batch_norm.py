"""torch.nn.SyncBatchNorm on WORLD npu ranks over hccl against nn.BatchNorm2d on the global batch
in every rank (float64 on the CPU), run by torchrun. The ranks hold unequal slices (so the
per-rank counts matter): each rank's output and input gradient must equal the reference's rows,
the summed weight / bias gradients and the running statistics the reference's. Prints the
largest difference; exits 1 beyond 1e-4."""
import os
import sys

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

RANK, WORLD, LOCAL = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl")

C = 3
sizes = [3 + 2 * r for r in range(WORLD)]  # unequal per-rank batches: 3, 5, ...
start = sum(sizes[:RANK])
torch.manual_seed(0)
x = torch.randn(sum(sizes), C, 4, 5, dtype=torch.float64) * 2 + 1
g = torch.randn_like(x)

# the reference: one BatchNorm2d over the global batch, in float64 on the CPU
ref = torch.nn.BatchNorm2d(C, momentum=0.3).double()
with torch.no_grad():
    ref.weight.uniform_(0.5, 1.5)
    ref.bias.uniform_(-0.5, 0.5)
xr = x.clone().requires_grad_()
yr = ref(xr)
(yr * g).sum().backward()

sbn = torch.nn.SyncBatchNorm(C, momentum=0.3).to(dev)
with torch.no_grad():
    sbn.weight.copy_(ref.weight.float())
    sbn.bias.copy_(ref.bias.float())
xs = x[start:start + sizes[RANK]].float().to(dev).requires_grad_()
ys = sbn(xs)
(ys * g[start:start + sizes[RANK]].float().to(dev)).sum().backward()

grads = torch.cat([sbn.weight.grad, sbn.bias.grad])
dist.all_reduce(grads)  # each rank holds its own part of d(loss)/d(weight, bias)
rows = slice(start, start + sizes[RANK])
diffs = {
    "out": (ys.detach().cpu().double() - yr.detach()[rows]).abs().max().item(),
    "grad_input": (xs.grad.cpu().double() - xr.grad[rows]).abs().max().item(),
    "grad_params": (grads.cpu().double()
                    - torch.cat([ref.weight.grad, ref.bias.grad])).abs().max().item(),
    "running_mean": (sbn.running_mean.cpu().double() - ref.running_mean).abs().max().item(),
    "running_var": (sbn.running_var.cpu().double() - ref.running_var).abs().max().item(),
}
dist.destroy_process_group()
worst = max(diffs.values())
ok = worst <= 1e-4
print(f"rank {RANK} syncbn world={WORLD} " + " ".join(f"{k}={v:.3g}" for k, v in diffs.items())
      + f" {'ok' if ok else 'FAILED'}", flush=True)
sys.exit(0 if ok else 1)
