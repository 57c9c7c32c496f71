"""NPU graph replay against launching the same ops eagerly, in one run.

  chain N   N small elementwise ops (add/mul/relu/tanh on a 1024-element tensor) launched one by
            one on npu, vs the same N ops captured once in a torch.npu.NPUGraph and replayed;
            and vs the same N ops on PyTorch's CPU eagerly, for scale
  MLP step  a 3-layer MLP forward + backward through make_graphed_callables vs eager on npu

The ratio is replay time / eager npu time (lower is better; issue 14's goal for a 200-op graph
is <= 0.2, i.e. at least 5x faster). Each round times each variant (median of 5 calls); the
figure is the median over the rounds. Variants are grouped per device (both sides keep worker
threads spinning after work).

    .venv/bin/python benchmarks/graph_bench.py [--repeats N] [--ops N]
"""

import argparse
import statistics

import torch

import torch_npu  # noqa: F401
from torch_npu.testing.timing import timed


def chain(x, n):
    for i in range(n):
        k = i % 4
        if k == 0:
            x = x + 1.0
        elif k == 1:
            x = x * 0.5
        elif k == 2:
            x = torch.relu(x)
        else:
            x = torch.tanh(x)
    return x


def median_of(fn, device, calls=5):
    fn()  # warm-up
    return statistics.median(timed(fn, device) for _ in range(calls))


def bench_chain(n, repeats):
    x_cpu = torch.randn(1024)
    x_npu = x_cpu.npu()
    g = torch.npu.NPUGraph()
    chain(x_npu, n)
    with torch.npu.graph(g):
        y_graph = chain(x_npu, n)
    g.replay()
    torch.testing.assert_close(y_graph.cpu(), chain(x_cpu, n))  # the replay computes the same
    rows = {"cpu eager": [], "npu eager": [], "npu replay": []}
    for _ in range(repeats):
        rows["cpu eager"].append(median_of(lambda: chain(x_cpu, n), "cpu"))
        rows["npu eager"].append(median_of(lambda: chain(x_npu, n), "npu"))
        rows["npu replay"].append(median_of(g.replay, "npu"))
    return {k: statistics.median(v) for k, v in rows.items()}, g._num_tasks()


def bench_mlp(repeats):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10)).npu()
    eager = torch.nn.Sequential(*[m for m in model])  # the same parameters, not graphed
    x = torch.randn(32, 64, device="npu")
    graphed = torch.npu.make_graphed_callables(
        torch.nn.Sequential(*[m for m in model]), (x.clone().requires_grad_(),))

    def step(m):
        def run():
            m(x).square().mean().backward()
        return run
    rows = {"npu eager": [], "npu graphed": []}
    for _ in range(repeats):
        rows["npu eager"].append(median_of(step(eager), "npu"))
        rows["npu graphed"].append(median_of(step(graphed), "npu"))
    return {k: statistics.median(v) for k, v in rows.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ops", type=int, default=200)
    args = parser.parse_args()
    times, tasks = bench_chain(args.ops, args.repeats)
    print(f"chain of {args.ops} ops ({tasks} recorded tasks), median of {args.repeats} rounds")
    for name, t in times.items():
        print(f"  {name:12s} {t * 1e3:9.3f} ms")
    print(f"  replay / npu eager = {times['npu replay'] / times['npu eager']:.3f}  "
          f"(goal <= 0.2)")
    print(f"  replay / cpu eager = {times['npu replay'] / times['cpu eager']:.3f}")
    mlp = bench_mlp(args.repeats)
    print("MLP train step (forward + backward), median of rounds")
    for name, t in mlp.items():
        print(f"  {name:12s} {t * 1e3:9.3f} ms")
    print(f"  graphed / eager = {mlp['npu graphed'] / mlp['npu eager']:.3f}")


if __name__ == "__main__":
    main()
