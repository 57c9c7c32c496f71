"""float16 / bfloat16 matmul, npu against PyTorch's CPU device in the same run: the ratio is
npu time / cpu time (lower is better). PyTorch's CPU bfloat16 mm runs oneDNN (AVX512-BF16 where
the CPU has it); its float16 mm falls back to a slow scalar-accumulating GEMM on CPUs without
AVX512-FP16, so float16 calls are timed fewer times.

Each round times one call per device after a warm-up call (the two devices' calls grouped, as
in ops_bench.py); the figure is the median over the rounds. Beside the wall time, the process's
CPU time per call (all its threads) shows how much work each side spent: on a loaded machine the
wall time also counts the waits for a core, which hit the npu's thread hand-offs (caller ->
stream worker -> pool workers -> caller) harder than the CPU's OpenMP threads.

    .venv/bin/python benchmarks/matmul16_bench.py [--repeats N] [--sizes 1024 2048] [--dtypes bf16 fp16]
"""

import argparse
import statistics
import sys
import time

import torch

import torch_npu  # noqa: F401
from torch_npu.testing.cases import matmul_16bit
from torch_npu.testing.timing import synchronize


def timed_with_cpu(fn, device):
    """(wall seconds, process CPU seconds) of fn() on device, its queued work included."""
    synchronize(device)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - wall0, time.process_time() - cpu0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="rounds (float16: at most 3)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--dtypes", nargs="+", choices=["bf16", "fp16"], default=["bf16", "fp16"],
                    help="fp16 at 2048 takes minutes on a CPU without AVX512-FP16")
    ns = ap.parse_args()
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split())
    except (OSError, StopIteration):
        pass
    have = [f for f in ("amx_bf16", "avx512f", "avx512_bf16", "avx512_fp16", "f16c") if f in flags]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, CPU: {' '.join(have)} "
          "(the npu GEMM takes AMX tiles, else AVX512-BF16, for bf16 where present: see "
          "kernels_bench's labels)")
    print(f"{'case':<26} {'cpu':>10} {'npu':>10} {'npu/cpu':>8} {'GFLOP/s npu':>12} "
          f"{'CPU time: cpu':>14} {'npu':>9} {'npu/cpu':>8}")
    for dtype, label in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        if label not in ns.dtypes:
            continue
        for n in ns.sizes:
            runs = {d: matmul_16bit(n, dtype)(d)[0] for d in ("cpu", "npu")}
            for d, fn in runs.items():
                timed_with_cpu(fn, d)  # warm-up
            rounds = ns.repeats if dtype == torch.bfloat16 else min(ns.repeats, 3)
            times = {"cpu": [], "npu": []}
            for _ in range(rounds):
                for d, fn in runs.items():
                    time.sleep(0.1)
                    times[d].append(timed_with_cpu(fn, d))
            (cpu, cpu_cpu), (npu, npu_cpu) = (
                (statistics.median(w for w, _ in times[d]), statistics.median(c for _, c in times[d]))
                for d in ("cpu", "npu"))
            print(f"{'matmul ' + str(n) + ' ' + label:<26} {cpu * 1e3:>7.1f} ms {npu * 1e3:>7.1f} ms "
                  f"{npu / cpu:>8.2f} {2 * n**3 / npu / 1e9:>12.1f} {cpu_cpu * 1e3:>11.1f} ms "
                  f"{npu_cpu * 1e3:>6.1f} ms {npu_cpu / cpu_cpu:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
