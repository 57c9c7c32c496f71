"""Elastic restart after a lost process: DDP on npu, a torch.distributed.checkpoint save after
every step, and a resume from the last one when torchrun restarts the job.

    NPU_SIM_FAULTS="kill@step=5,rank=1" \\
        torchrun --nproc_per_node 2 --max-restarts 1 elastic_restart.py OUT_DIR [STEPS]

Rank 1 dies (SIGKILL) right after its 5th optimizer step, before that step's checkpoint.
torchrun takes the group down and starts it again; every rank loads the step-4 checkpoint and
trains on, and the job ends with the parameters of a run that never failed (OUT_DIR/final.pt,
written by rank 0, with the number of times the job started in OUT_DIR/starts.txt)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import torch_npu  # noqa: F401
from torch_npu.testing.models import batches, loss_fn, make_model

OUT = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
CKPT = os.path.join(OUT, "checkpoint")

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.npu.set_device(local)
dev = torch.device("npu", local)
dist.init_process_group("hccl")
if rank == 0:
    with open(os.path.join(OUT, "starts.txt"), "a") as f:
        f.write(f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}\n")

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(make_model("mlp").to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
done = 0  # steps already trained
if os.path.exists(os.path.join(CKPT, ".metadata")):
    model_sd, opt_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": opt_sd, "step": torch.zeros((), dtype=torch.int64)}
    dcp.load(state, checkpoint_id=CKPT)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    done = int(state["step"])
    print(f"rank {rank}: resumed after step {done}", flush=True)

data = list(batches("mlp", STEPS, batch=8, seed=1 + rank))
for step in range(done + 1, STEPS + 1):
    x, y = (t.to(dev) for t in data[step - 1])
    loss_fn("mlp", model(x), y).backward()
    opt.step()
    opt.zero_grad()
    model_sd, opt_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": opt_sd, "step": torch.tensor(step)}, checkpoint_id=CKPT)

if rank == 0:
    torch.save({k: v.cpu() for k, v in model.module.state_dict().items()},
               os.path.join(OUT, "final.pt"))
dist.destroy_process_group()
