"""Cost of the stream sanitizer (TORCH_NPU_SANITIZER=1, docs/sanitizer.md) on training steps of
the test models (torch_npu/testing/cases.py, the cases ops_bench.py times against the CPU).

Each round starts one process per mode (TORCH_NPU_SANITIZER=0, then 1) on the same machine; a
process times each case on npu (a warm-up call, then the median of 5 timed calls). The ratio is
sanitized / plain time per round; the figure is the median over rounds (goal: a GPT-style
step <= 3x).

    .venv/bin/python benchmarks/sanitizer_bench.py [rounds]
"""

import json
import os
import statistics
import subprocess
import sys

CASES = ["train step MLP", "train step GPT-style", "train step GPT-style autocast bf16"]

MEASURE = r"""
import json, statistics, sys, torch, torch_npu
from torch_npu.testing.cases import CASES
from torch_npu.testing.timing import timed
out = {}
for case in CASES:
    if case.name not in sys.argv[1:]:
        continue
    fn, per = case.make("npu")
    timed(fn, "npu")
    out[case.name] = statistics.median(timed(fn, "npu") / per for _ in range(5))
print(json.dumps(out))
"""


def measure(sanitizer: bool) -> dict:
    env = dict(os.environ, TORCH_NPU_SANITIZER="1" if sanitizer else "0")
    r = subprocess.run([sys.executable, "-c", MEASURE, *CASES], capture_output=True, text=True,
                       env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ratios = {name: [] for name in CASES}
    plain_ms = {name: [] for name in CASES}
    for _ in range(rounds):
        plain, sanitized = measure(False), measure(True)
        for name in CASES:
            ratios[name].append(sanitized[name] / plain[name])
            plain_ms[name].append(plain[name] * 1e3)
    print(f"stream sanitizer cost, median of {rounds} rounds (one process per mode each)")
    print(f"{'case':<36} {'plain':>10} {'sanitized/plain':>16} {'goal':>6}")
    for name in CASES:
        ratio = statistics.median(ratios[name])
        goal = "<=3" if name == "train step GPT-style" else ""
        print(f"{name:<36} {statistics.median(plain_ms[name]):>7.2f} ms {ratio:>16.2f} {goal:>6}")


if __name__ == "__main__":
    main()
