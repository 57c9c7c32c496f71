"""The article's multi-card training script: a plain DDP program whose only NPU-specific lines are
`backend="hccl"` and `.npu()`. Run it with

    torchrun --nproc_per_node=8 examples/ddp_main.py

Each rank trains the same small classifier on its shard of a synthetic dataset
(DistributedSampler); DDP averages the gradients over the ranks through HCCL.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torch_npu  # noqa: F401


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local_rank)
    dist.init_process_group(backend="hccl")
    rank, world = dist.get_rank(), dist.get_world_size()

    g = torch.Generator().manual_seed(0)
    features = torch.randn(512, 32, generator=g)
    labels = (features[:, :4].sum(1) > 0).long()
    dataset = TensorDataset(features, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2)).npu()
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(3):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device="npu")
        for x, y in loader:
            x, y = x.npu(), y.npu()
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(y), torch.tensor(len(y), device="npu")])
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: loss {total[0].item() / total[1].item():.4f} over "
                  f"{int(total[1].item())} samples on {world} ranks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
