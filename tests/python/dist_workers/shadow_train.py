"""Trains a test model a few steps on npu and writes, as OUT_DIR/rank<R>.json, what shadow
execution must reproduce exactly: the caching allocator's statistics and the sequence of aten
ops the profiler saw. Run alone (one process) or under torchrun:

    shadow_train.py OUT_DIR KIND [ddp|fsdp2]   KIND: mlp, cnn or gpt (AdamW; bf16 autocast for gpt)

The test runs it with and without NPU_SIM_SHADOW=1 and compares the files."""
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import torch_npu  # noqa: F401
from torch_npu.testing.models import batches, loss_fn, make_model

OUT_DIR, KIND = sys.argv[1], sys.argv[2]
PARALLEL = sys.argv[3] if len(sys.argv) > 3 else None
RANK, WORLD = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
torch.npu.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dev = torch.device("npu", torch.npu.current_device())

torch.manual_seed(0)
model = make_model(KIND).to(dev)
if PARALLEL:
    import torch.distributed as dist
    dist.init_process_group("hccl")
    if PARALLEL == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("npu", (WORLD,))
        for block in getattr(model, "blocks", []):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for x, y in batches(KIND, 3, batch=8, seed=1):
        x, y = x.to(dev), y.to(dev)
        with torch.autocast("npu", dtype=torch.bfloat16, enabled=KIND == "gpt"):
            loss = loss_fn(KIND, model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
torch.npu.synchronize()
stats = torch.npu.memory_stats()
ops = [e.name for e in sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end))
       if e.name.startswith("aten::")]
if PARALLEL:
    dist.destroy_process_group()
with open(os.path.join(OUT_DIR, f"rank{RANK}.json"), "w") as f:
    json.dump({
        "rank": RANK, "shadow": torch_npu.npu.shadow_mode(), "losses": losses,
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "segments": stats["segment.all.allocated"],
        "allocations": stats["allocation.all.allocated"],
        "ops": ops,
    }, f)
