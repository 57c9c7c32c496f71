"""hccl against gloo, side by side in the same processes: allreduce latency and bus bandwidth for
4 KiB .. 256 MiB (hccl on npu tensors, gloo on CPU tensors, one process group
"cpu:gloo,npu:hccl"), and a DDP training step of the GPT-style test model on 2 ranks against a
single-process step on half the batch, with all of the host's CPUs and pinned to one rank's share.

    .venv/bin/python benchmarks/hccl_bench.py [--worlds 2,4,8] [--max-mib 256]

starts one torchrun job per world size and prints their tables. Inside a job (rank 0 prints):

    torchrun --nproc_per_node=4 benchmarks/hccl_bench.py --worker

Timing: for each size and backend, the ranks meet at a barrier, run `iters` allreduces back to
back and wait for the last (hccl: the device synchronize); time per call = total / iters; the
figure is the median of 5 such rounds of the slowest rank. Bus bandwidth is NCCL-tests': bytes *
2 (n - 1) / n / time.
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

KIB, MIB = 1024, 1024 * 1024


def sizes(max_bytes: int) -> list[int]:
    out, s = [], 4 * KIB
    while s <= max_bytes:
        out.append(s)
        s *= 4 if s < 16 * MIB else 2
    return out


def iters_for(nbytes: int) -> int:
    return max(2, min(50, (8 * MIB) // nbytes))


def timed_allreduce(x: torch.Tensor, iters: int, rounds: int, npu: bool) -> float:
    times = []
    dist.all_reduce(x)  # warm-up (the first call also makes the communicator)
    if npu:
        torch.npu.synchronize()
    for _ in range(rounds):
        slowest = torch.zeros(1)
        dist.all_reduce(slowest)  # gloo: lines the ranks up
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        if npu:
            torch.npu.synchronize()
        elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time (gloo)
        times.append(elapsed.item())
    return statistics.median(times)


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def fmt_size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def allreduce_table(world: int, rank: int, max_bytes: int) -> None:
    dev = torch.device("npu", int(os.environ["LOCAL_RANK"]))
    if rank == 0:
        print(f"\nallreduce (float32, sum), {world} ranks: median of 5 rounds, slowest rank")
        print(f"| size | hccl (npu) | hccl busbw | gloo (cpu) | gloo busbw | hccl / gloo |")
        print("|---|---|---|---|---|---|")
    for nbytes in sizes(max_bytes):
        n = nbytes // 4
        iters = iters_for(nbytes)
        h = timed_allreduce(torch.ones(n, device=dev), iters, 5, npu=True)
        g = timed_allreduce(torch.ones(n), max(2, iters // 4), 5, npu=False)
        bus = 2 * (world - 1) / world
        if rank == 0:
            print(f"| {fmt_size(nbytes)} | {fmt_time(h)} | {nbytes * bus / h / 1e9:.2f} GB/s | "
                  f"{fmt_time(g)} | {nbytes * bus / g / 1e9:.2f} GB/s | {g / h:.1f}x |",
                  flush=True)


def ddp_step(world: int, rank: int) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torch_npu.testing.models import GPT, batches, loss_fn

    dev = torch.device("npu", int(os.environ["LOCAL_RANK"]))
    global_batch = 16
    data = [(x.to(dev), y.to(dev)) for x, y in batches("gpt", 4, batch=global_batch // world)]

    def run(model, steps=30):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        times = []
        for i in range(steps):
            x, y = data[i % len(data)]
            torch.npu.synchronize()
            start = time.perf_counter()
            opt.zero_grad()
            loss_fn("gpt", model(x), y).backward()
            opt.step()
            torch.npu.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times[5:])

    torch.manual_seed(0)
    ddp = run(DDP(GPT().to(dev), device_ids=[dev.index]))
    ddp_t = torch.tensor([ddp], dtype=torch.float64)
    dist.all_reduce(ddp_t, op=dist.ReduceOp.MAX)
    single = shared = None
    if rank == 0:  # the others wait at the barrier below, idle
        torch.manual_seed(0)
        single = run(GPT().to(dev))
        # The same, on this rank's share of the host's CPUs: what one simulated device has
        # during the DDP run, since every rank's host thread and stream worker share them.
        cpus = sorted(os.sched_getaffinity(0))
        share = cpus[:max(1, len(cpus) // world)]
        with pinned(share):
            torch.manual_seed(0)
            shared = run(GPT().to(dev))
    sync = torch.zeros(1)
    dist.all_reduce(sync)
    if rank == 0:
        ddp = ddp_t.item()
        print(f"\nDDP step, GPT-style model, {world} ranks x {global_batch // world} sequences: "
              f"{ddp * 1e3:.2f} ms; single process, {global_batch // world} sequences: "
              f"{single * 1e3:.2f} ms; ratio {ddp / single:.2f} (goal <= 1.3); the same single "
              f"process on {len(share)} of the {len(cpus)} CPUs (one rank's "
              f"share): {shared * 1e3:.2f} ms, ratio {ddp / shared:.2f}", flush=True)


@contextlib.contextmanager
def pinned(cpus):
    """Runs the block with every thread of this process (host thread, stream workers, kernel
    pool) restricted to `cpus`; sched_setaffinity of a pid only moves that one thread."""
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    saved = {t: os.sched_getaffinity(t) for t in tids}
    for t in tids:
        os.sched_setaffinity(t, cpus)
    try:
        yield
    finally:
        for t, mask in saved.items():
            try:
                os.sched_setaffinity(t, mask)
            except ProcessLookupError:  # a thread that ended meanwhile
                pass


def worker(ns) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,npu:hccl")
    allreduce_table(world, rank, ns.max_mib * MIB)
    if world == 2:
        ddp_step(world, rank)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true", help="run as a torchrun rank")
    ap.add_argument("--worlds", default="2,4,8", help="world sizes to run")
    ap.add_argument("--max-mib", type=int, default=256, help="largest message, MiB")
    ns = ap.parse_args()
    if ns.worker:
        worker(ns)
        return
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    for world in (int(w) for w in ns.worlds.split(",")):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               "--standalone", __file__, "--worker",
               f"--max-mib={ns.max_mib}"]
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            sys.exit(f"the {world}-rank job failed (exit code {r.returncode})")


if __name__ == "__main__":
    main()
