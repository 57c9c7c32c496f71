"""Per-call cost of small npu ops from Python (the device check sits on this path).

Prints the median over rounds of the time per call of a 1-element add, a 4x4 mm and a
3-row index_select, each measured over a few thousand calls; run it on two builds to compare.
usage: python benchmarks/device_check_bench.py [rounds] [calls]
"""

import statistics
import sys
import time

import torch
import torch_npu  # noqa: F401


def per_call(fn, calls):
    torch.npu.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.npu.synchronize()
    return (time.perf_counter() - start) / calls


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    x = torch.ones(1, device="npu")
    a = torch.randn(4, 4, device="npu")
    t = torch.randn(8, 4, device="npu")
    idx = torch.tensor([3, 0, 7], device="npu")
    cases = {
        "add (1 element)": lambda: torch.add(x, x),
        "mm (4x4)": lambda: torch.mm(a, a),
        "index_select (3 rows)": lambda: torch.index_select(t, 0, idx),
    }
    for name, fn in cases.items():
        per_call(fn, calls)  # warm-up
        times = [per_call(fn, calls) for _ in range(rounds)]
        print(f"{name:24s} median {statistics.median(times) * 1e6:7.2f} us/call "
              f"(min {min(times) * 1e6:.2f}, {rounds} rounds x {calls} calls)")


if __name__ == "__main__":
    main()
