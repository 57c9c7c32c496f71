"""Host time per op of the card check (strict card mode's seam, adapter/ops/CardCheck.h), for
small ops, where dispatch is all there is.

Each round starts one process per mode (NPU_SIM_STRICT=0, then 1), and each process reports,
per case, the time of 10000 calls (median of 5 blocks). The figure is the median over rounds.
Cases:
  - add of 1-element tensors: an op the card runs natively on every dtype, so its registration
    has no rule: the check is a null pointer test;
  - mm of 2x2 float32: an op with a rule (float64 is refused), judged on each call and let
    through;
  - the same mm with the rules uninstalled (an empty table): the difference is the cost of
    judging a call.

    .venv/bin/python benchmarks/strict_bench.py [rounds]
"""

import json
import os
import statistics
import subprocess
import sys

MEASURE = r"""
import json, statistics, time, torch, torch_npu
from torch_npu import _C
from torch_npu.npu import strict
x = torch.ones(1, device="npu")
a = torch.ones(2, 2, device="npu")
def block(fn, calls=10000):
    torch.npu.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.npu.synchronize()
    return time.perf_counter() - start
def median(fn):
    block(fn, 1000)
    return statistics.median(block(fn) for _ in range(5))
out = {"add 1 element (no rule)": median(lambda: torch.add(x, x)),
       "mm 2x2 float32 (rule, judged)": median(lambda: torch.mm(a, a))}
_C._npu_installCardRules("910B", {}, [])  # no rules: mm's registration holds none
out["mm 2x2 float32 (rules uninstalled)"] = median(lambda: torch.mm(a, a))
strict.install_card_rules()
print(json.dumps(out))
"""


def run(strict: str) -> dict:
    env = dict(os.environ, NPU_SIM_STRICT=strict, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    got = {"0": [], "1": []}
    for _ in range(rounds):
        for mode in got:
            got[mode].append(run(mode))
    print(f"10000 calls, median of 5 blocks per process, median of {rounds} rounds (ms)")
    print(f"{'case':<40} {'NPU_SIM_STRICT=0':>17} {'NPU_SIM_STRICT=1':>17}")
    for case in got["0"][0]:
        cells = [statistics.median(r[case] for r in got[mode]) * 1e3 for mode in got]
        print(f"{case:<40} {cells[0]:>17.1f} {cells[1]:>17.1f}")


if __name__ == "__main__":
    main()
