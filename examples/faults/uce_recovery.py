"""In-job recovery from an uncorrectable HBM error (UCE), as MindIO's fast recovery does it with
torch_npu's API: detect, classify (check_uce_in_memory), stop the device, restart it, roll every
rank back to the last good state and train on, without restarting the job.

    NPU_SIM_FAULTS="hbm_uce@step=3,rank=0,target=state[0].exp_avg" \\
        torchrun --nproc_per_node 2 uce_recovery.py OUT_DIR [STEPS]

After each step the ranks agree (an all-reduce of a health flag) whether it succeeded. A good
step is kept as the ranks' last good state (a copy in host memory); a failed one is undone from
it on every rank and trained again. Rank 0 writes the final parameters (OUT_DIR/final.pt) and
what it saw (OUT_DIR/recovery.txt)."""
import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map

import torch_npu
from torch_npu.testing.models import batches, loss_fn, make_model

OUT = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 6

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.npu.set_device(local)
dev = torch.device("npu", local)
dist.init_process_group("hccl")

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(make_model("mlp").to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = list(batches("mlp", STEPS, batch=8, seed=1 + rank))


def host_copy(state):
    """A deep copy of a (nested) state dict with every tensor in host memory."""
    return tree_map(lambda t: t.detach().cpu().clone() if torch.is_tensor(t) else copy.deepcopy(t),
                    state)


good = (host_copy(model.state_dict()), host_copy(opt.state_dict()), 0)
log = []
step = 1
while step <= STEPS:
    healthy = 1
    try:
        x, y = (t.to(dev) for t in data[step - 1])
        loss_fn("mlp", model(x), y).backward()
        opt.step()
        opt.zero_grad()
        torch.npu.synchronize()
        healthy = int(torch.ones(1, device=dev).item())  # a kernel on a faulty device fails
    except RuntimeError as e:
        if "UCE ERROR" not in str(e):
            raise
        kind = torch_npu.npu.check_uce_in_memory(local)
        log.append(f"step {step}: UCE ERROR, check_uce_in_memory={kind}")
        torch_npu.npu.stop_device(local)
        torch_npu.npu.restart_device(local)
        healthy = 0
    flag = torch.tensor([healthy], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if int(flag.item()) == 1:
        good = (host_copy(model.state_dict()), host_copy(opt.state_dict()), step)
        step += 1
    else:  # every rank goes back to the last good state and trains the step again
        model.load_state_dict(good[0])
        opt.load_state_dict(good[1])
        log.append(f"rank {rank}: rolled back to after step {good[2]}")
        step = good[2] + 1

if rank == 0:
    torch.save({k: v.cpu() for k, v in model.module.state_dict().items()},
               os.path.join(OUT, "final.pt"))
    with open(os.path.join(OUT, "recovery.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
dist.destroy_process_group()
