"""One rank of a 2-"node" job (torchrun --nnodes=2, one NPU_SIM_RUNTIME_DIR per node): checks
that the group sees two nodes, that collectives across them give exact results, and that bytes
went through the inter-node (Gloo) hops."""
import os
import sys
import zlib

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

RANK, WORLD, LOCAL = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(LOCAL)
dev = torch.device("npu", LOCAL)
dist.init_process_group("hccl")
pg = dist.distributed_c10d._get_default_group()._get_backend(dev)
fails = []


def data(case, r, n):
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{r}".encode()))
    return torch.randint(-8, 9, (n,), generator=g).float()


def check(case, got, want):
    if not torch.equal(got.cpu(), want):
        fails.append(case)


n = 100003
x = data("ar", RANK, n).to(dev)
dist.all_reduce(x)
check("all_reduce", x, sum(data("ar", r, n) for r in range(WORLD)))
x = data("bf", RANK, 4097).to(torch.bfloat16).to(dev)
dist.all_reduce(x, op=dist.ReduceOp.MAX)
check("all_reduce bf16 max",
      x, torch.stack([data("bf", r, 4097) for r in range(WORLD)]).max(0).values.bfloat16())
out = torch.empty(WORLD * 999, device=dev)
dist.all_gather_into_tensor(out, data("ag", RANK, 999).to(dev))
check("all_gather", out, torch.cat([data("ag", r, 999) for r in range(WORLD)]))
out = torch.empty(777, device=dev)
dist.reduce_scatter_tensor(out, data("rs", RANK, WORLD * 777).to(dev))
check("reduce_scatter", out,
      sum(data("rs", r, WORLD * 777) for r in range(WORLD))[RANK * 777:(RANK + 1) * 777])
x = data("bc", WORLD - 1, 5000).to(dev) if RANK == WORLD - 1 else torch.zeros(5000, device=dev)
dist.broadcast(x, src=WORLD - 1)
check("broadcast", x, data("bc", WORLD - 1, 5000))
inp = data("a2a", RANK, WORLD * 10).to(dev)
out = torch.empty(WORLD * 10, device=dev)
dist.all_to_all_single(out, inp)
check("all_to_all", out, torch.cat([data("a2a", r, WORLD * 10)[RANK * 10:(RANK + 1) * 10]
                                    for r in range(WORLD)]))
dist.barrier()
sent, received = pg._inter_node_bytes()
print(f"rank {RANK} nodes={list(pg.node_of_rank)} inter_node_bytes sent={sent} "
      f"received={received} {'ok' if not fails else 'FAILED ' + ' '.join(fails)}", flush=True)
dist.destroy_process_group()
sys.exit(1 if fails or len(set(pg.node_of_rank)) != 2 else 0)
