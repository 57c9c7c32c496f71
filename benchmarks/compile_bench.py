"""torch.compile on npu against PyTorch's CPU, eager and compiled, in one run.

For each test model (MLP, CNN, GPT-style, and the LLaMA-style model written without fused
kernels at d=32 and d=128, torch_npu/testing/models.py) a train step (forward, loss, backward) is
timed:

  cpu eager      the model on PyTorch's CPU device
  cpu compiled   torch.compile(model) on the CPU (Inductor's C++ kernels inline on the host)
  npu eager      the model on npu
  npu compiled   torch.compile(model) on npu (the same C++ kernels, queued on the npu stream)
  npu graphs     torch.compile(model, mode="reduce-overhead") on npu (forward and backward
                 replayed from NPU graphs: one queue entry each)

Ratios are npu compiled / cpu eager (issue 14's goal <= 0.7) and npu compiled / cpu compiled
(goal <= 1.1), the same for npu graphs, and npu graphs / npu compiled (issue 30: reduce-overhead
at least as fast as plain torch.compile, <= 1.0). Each round times each variant (median of 5 steps after 2 warm-up steps); the
figure is the median over the rounds; compile time is the first compiled npu step. Variants are
grouped per device (both sides keep worker threads spinning after work).

    .venv/bin/python benchmarks/compile_bench.py [--repeats N] [--models MLP,CNN,GPT,LLaMA32,LLaMA128]
"""

import argparse
import statistics
import time

import torch

import torch_npu  # noqa: F401
from torch_npu.testing.models import CNN, GPT, LLAMA_SIZES, LLaMA, MLP
from torch_npu.testing.timing import timed


def make(name, device):
    torch.manual_seed(0)
    if name == "MLP":
        return MLP().to(device), torch.randn(64, 32, device=device)
    if name == "GPT":
        return GPT().to(device), torch.randint(0, 64, (8, 16), device=device)
    if name.startswith("LLaMA"):
        sizes = LLAMA_SIZES[int(name[5:])]
        return LLaMA(**sizes).to(device), torch.randint(0, sizes["vocab"], (8, sizes["block"]),
                                                         device=device)
    return CNN().to(device), torch.randn(8, 3, 32, 32, device=device)


def step_of(model, x):
    def step():
        model(x).float().square().mean().backward()
    return step


def median_step(step, device, calls=5):
    for _ in range(2):
        step()
    return statistics.median(timed(step, device) for _ in range(calls))


def bench(name, repeats):
    variants = {}
    for device in ("cpu", "npu"):
        model, x = make(name, device)
        variants[f"{device} eager"] = (step_of(model, x), device)
        compiled = torch.compile(model)
        start = time.perf_counter()
        step_of(compiled, x)()
        if device == "npu":
            torch.npu.synchronize()
        compile_s = time.perf_counter() - start
        variants[f"{device} compiled"] = (step_of(compiled, x), device)
        if device == "npu":
            npu_compile_s = compile_s
            graphed = torch.compile(model, mode="reduce-overhead")
            for _ in range(3):  # warm-up and capture of the forward and backward graphs
                step_of(graphed, x)()
            variants["npu graphs"] = (step_of(graphed, x), device)
    rows = {k: [] for k in variants}
    for _ in range(repeats):
        for key, (step, device) in variants.items():
            rows[key].append(median_step(step, device))
    return {k: statistics.median(v) for k, v in rows.items()}, npu_compile_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="MLP,CNN,GPT,LLaMA32,LLaMA128")
    args = parser.parse_args()
    for name in args.models.split(","):
        times, compile_s = bench(name, args.repeats)
        print(f"{name} train step, median of {args.repeats} rounds "
              f"(npu compile: {compile_s:.1f} s)")
        for key, t in times.items():
            print(f"  {key:13s} {t * 1e3:9.3f} ms")
        print(f"  npu compiled / cpu eager    = {times['npu compiled'] / times['cpu eager']:.2f}"
              "  (goal <= 0.7)")
        print(f"  npu compiled / cpu compiled = "
              f"{times['npu compiled'] / times['cpu compiled']:.2f}  (goal <= 1.1)")
        print(f"  npu graphs / cpu eager      = {times['npu graphs'] / times['cpu eager']:.2f}")
        print(f"  npu graphs / cpu compiled   = {times['npu graphs'] / times['cpu compiled']:.2f}")
        print(f"  npu graphs / npu compiled   = {times['npu graphs'] / times['npu compiled']:.2f}"
              "  (goal <= 1.0)")


if __name__ == "__main__":
    main()
