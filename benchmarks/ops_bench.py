"""npu vs cpu, side by side in one run: dispatch overhead, matmul, a large add and one training
step of the test models. The ratio is npu time / cpu time (lower is better; 1.0 = as fast as
PyTorch's own CPU device).

Runs alternate between the devices in rounds; in each round a device gets a warm-up call, a
pause, then three timed calls (their median), and the figure is the median over the rounds.
Calls are grouped per device because both sides keep worker threads spinning for a while
after their work (OpenMP's, the streams'): on a 2-core machine a call made right after the
other device's steals a core from whichever runs second.

    .venv/bin/python benchmarks/ops_bench.py [--repeats N] [--only NAME]
"""

import argparse
import os
import statistics
import sys
import time

import torch

import torch_npu  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import models  # noqa: E402


def sync(device):
    if device == "npu":
        torch.npu.synchronize()


def timed(fn, device):
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def bench_add_one_loop(device, n=2000):
    x = torch.ones(1, device=device)

    def run():
        y = x
        for _ in range(n):
            y = y + 1
    return run, n  # per-iteration time


def bench_matmul(size):
    def make(device):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=g).to(device)
        b = torch.randn(size, size, generator=g).to(device)
        return (lambda: torch.mm(a, b)), 1
    return make


def bench_add_16m(device):
    a = torch.rand(1 << 24).to(device)
    b = torch.rand(1 << 24).to(device)
    return (lambda: torch.add(a, b)), 1


def bench_train_step(kind, steps=20):
    """Per-step time of a run of `steps` training steps (synchronized at the end), so the
    host's launches overlap the device's work as in a real training loop."""
    def make(device):
        torch.manual_seed(0)
        model = models.make_model(kind).to(device)
        opt = models.make_optimizer("adamw", model.parameters())
        batch = [(x.to(device), y.to(device))
                 for x, y in models.batches(kind, 1, batch=32 if kind == "cnn" else 16)][0]

        def step():
            opt.zero_grad()
            loss = models.loss_fn(kind, model(batch[0]), batch[1])
            loss.backward()
            opt.step()
        step()  # first step allocates optimizer state

        def run():
            for _ in range(steps):
                step()
        return run, steps
    return make


CASES = {
    "x+1 loop (1 element, per op)": (bench_add_one_loop, 1.3),
    "matmul 1024x1024 fp32": (bench_matmul(1024), 1.1),
    "matmul 2048x2048 fp32": (bench_matmul(2048), 1.1),
    "add 16M fp32": (bench_add_16m, 1.1),
    "train step GPT-style": (bench_train_step("gpt"), 1.2),
    "train step CNN": (bench_train_step("cnn"), 1.2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="rounds")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ns = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"median of {ns.repeats} rounds (3 timed calls per device each)")
    print(f"{'case':<32} {'cpu':>11} {'npu':>11} {'npu/cpu':>8} {'goal':>6}")
    missed = 0
    for name, (make, goal) in CASES.items():
        if ns.only and ns.only not in name:
            continue
        runs = {}
        for device in ("cpu", "npu"):
            fn, per = make(device)
            timed(fn, device)  # warm-up
            runs[device] = (fn, per)
        times = {"cpu": [], "npu": []}
        for _ in range(ns.repeats):
            for device in ("cpu", "npu"):
                fn, per = runs[device]
                timed(fn, device)
                time.sleep(0.1)
                block = [timed(fn, device) / per for _ in range(3)]
                times[device].append(statistics.median(block))
        cpu, npu = statistics.median(times["cpu"]), statistics.median(times["npu"])
        ratio = npu / cpu
        missed += ratio > goal
        unit, scale = ("us", 1e6) if cpu < 1e-3 else ("ms", 1e3)
        print(f"{name:<32} {cpu * scale:>8.2f} {unit} {npu * scale:>8.2f} {unit} {ratio:>8.2f} "
              f"{'<=' + str(goal):>6}{'  MISSED' if ratio > goal else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
