"""Host time per op under shadow execution (NPU_SIM_SHADOW=1) against the normal mode's, for
1-element ops, where dispatch is all there is (issue 28's goal: shadow <= 1.5x normal).

Each round starts one process per mode, alternating, and each process reports its per-call
time (median of its blocks) for every case; the figure is the median over the rounds, and
the ratios are shadow / normal (lower is better), with and without the cost model's clock.

    .venv/bin/python benchmarks/shadow_bench.py [rounds]
"""

import json
import os
import statistics
import subprocess
import sys

MEASURE = r"""
import json, statistics, time, torch, torch_npu
x = torch.ones(1, device="npu")
a = torch.randn(4, 4, device="npu")
t = torch.randn(8, 4, device="npu")
idx = torch.tensor([3, 0, 7], device="npu")
cases = {
    "add (1 element, our kernel)": lambda: torch.add(x, x),
    "mm (4x4, our kernel)": lambda: torch.mm(a, a),
    "index_select (3 rows)": lambda: torch.index_select(t, 0, idx),
    "logcumsumexp (ATen host kernel)": lambda: torch.logcumsumexp(x, 0),
}
def per_call(fn, calls=2000):
    torch.npu.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.npu.synchronize()
    return (time.perf_counter() - start) / calls
out = {}
for name, fn in cases.items():
    per_call(fn, 500)
    out[name] = statistics.median(per_call(fn) for _ in range(5))
print(json.dumps(out))
"""


def run(mode: str) -> dict:
    env = dict(os.environ, NPU_SIM_SHADOW="0" if mode == "normal" else "1", OMP_NUM_THREADS="1")
    if mode == "shadow, no clock":
        env["NPU_SIM_PROFILE"] = "none"
    r = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    modes = ("normal", "shadow", "shadow, no clock")
    got = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            got[mode].append(run(mode))
    print(f"median of {rounds} rounds, one process per mode per round; shadow runs the 910B2 "
          "cost model (the simulated clock), 'no clock' is NPU_SIM_PROFILE=none")
    print(f"{'case':<34} {'normal':>10} {'shadow':>10} {'no clock':>10} {'ratio':>6} "
          f"{'no clock':>9}")
    for name in got["normal"][0]:
        t = {mode: statistics.median(r[name] for r in got[mode]) for mode in modes}
        print(f"{name:<34} {t['normal'] * 1e6:>7.2f} us {t['shadow'] * 1e6:>7.2f} us "
              f"{t['shadow, no clock'] * 1e6:>7.2f} us {t['shadow'] / t['normal']:>6.2f} "
              f"{t['shadow, no clock'] / t['normal']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
