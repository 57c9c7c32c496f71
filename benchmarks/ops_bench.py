"""npu vs cpu, side by side in one run, for each case of torch_npu/testing/cases.py (the table the
tests check for correctness): dispatch overhead, matmul, a large add and training steps of the
test models. The ratio is npu time / cpu time (lower is better; 1.0 = as fast as
PyTorch's own CPU device).

Runs alternate between the devices in rounds; in each round a device gets a warm-up call, a
pause, then three timed calls (their median), and the figure is the median over the rounds.
Calls are grouped per device because both sides keep worker threads spinning for a while
after their work (OpenMP's, the streams'): on a 2-core machine a call made right after the
other device's steals a core from whichever runs second.

    .venv/bin/python benchmarks/ops_bench.py [--repeats N] [--only NAME]
"""

import argparse
import statistics
import sys
import time

import torch

import torch_npu  # noqa: F401
from torch_npu.testing.cases import CASES
from torch_npu.testing.timing import timed



def compare(make, repeats, stat=statistics.median):
    """(cpu seconds, npu seconds) per unit of work of `make` (a cases.py Make): `stat` (the
    median; train_bench.py also asks for the min) over `repeats` rounds that alternate the
    devices, each a warm-up call, a pause and the median of three timed calls."""
    runs = {}
    for device in ("cpu", "npu"):
        fn, per = make(device)
        timed(fn, device)  # warm-up
        runs[device] = (fn, per)
    times = {"cpu": [], "npu": []}
    for _ in range(repeats):
        for device in ("cpu", "npu"):
            fn, per = runs[device]
            timed(fn, device)
            time.sleep(0.1)
            block = [timed(fn, device) / per for _ in range(3)]
            times[device].append(statistics.median(block))
    return stat(times["cpu"]), stat(times["npu"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="rounds")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ns = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"median of {ns.repeats} rounds (3 timed calls per device each)")
    print(f"{'case':<32} {'cpu':>11} {'npu':>11} {'npu/cpu':>8} {'goal':>6}")
    missed = 0
    for case in CASES:
        name, goal = case.name, case.goal
        if ns.only and ns.only not in name:
            continue
        cpu, npu = compare(case.make, ns.repeats)
        ratio = npu / cpu
        missed += ratio > goal
        unit, scale = ("us", 1e6) if cpu < 1e-3 else ("ms", 1e3)
        print(f"{name:<32} {cpu * scale:>8.2f} {unit} {npu * scale:>8.2f} {unit} {ratio:>8.2f} "
              f"{'<=' + str(goal):>6}{'  MISSED' if ratio > goal else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
