"""F.scaled_dot_product_attention forward + backward at length, npu against PyTorch's CPU device
(its flash kernel) in one run: causal (is_causal=True), batch 1, [B, H, S, D] inputs.

  cases   bfloat16 and float32, S = 1024 / 2048 / 4096, 8 heads of head_dim 64 and 128
          (--wide: also 32 heads of head_dim 128)
  time    one call is out = sdpa(q, k, v, is_causal=True); out.backward(grad) with q, k, v
          requiring grad, timed from a drained device to a drained device
  memory  the npu's peak allocated bytes during one call beyond what was allocated before it
          (the inputs and grad); of that, the call's outputs (out and the three gradients) are
          unavoidable; for scale, the H x S x S float32 scores the math path materialises

The ratio is npu time / cpu time (lower is better; the goal is <= 1.0). Each round gives a
device a warm-up call, a pause, then timed calls (three when a call is short, one when it takes
over 0.2 s; their median); the figure is the median over the rounds. Calls are grouped per
device, as in ops_bench.py: both sides keep worker threads spinning for a while after their
work, so on a 2-core machine a call right after the other device's would lose a core.

    .venv/bin/python benchmarks/attention_bench.py [--repeats N] [--only TEXT] [--wide]

On a shared machine the two-thread figures move with the other load (the load average is
printed before and after); OMP_NUM_THREADS=1 runs both devices on one thread each (the npu's
kernel pool follows it), which other load disturbs less. bfloat16 tiles run on AMX where the CPU
has it (the kernel's testing::set_attention_amx(false) is the float32-FMA path they replaced).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401
from torch_npu.testing.timing import timed


def make_call(device, dtype, S, heads, D):
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(1, heads, S, D, generator=g).to(dtype) for _ in range(4))
    q, k, v = (t.to(device).requires_grad_() for t in (q, k, v))
    grad = grad.to(device)

    def run():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        # Each call starts from no gradient, as a training step does after zero_grad(None).
        q.grad = k.grad = v.grad = None
    return run


def peak_beyond_inputs_mib(run):
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    run()
    torch.npu.synchronize()
    return (torch.npu.max_memory_allocated() - base) / 2**20


def measure(runs, repeats):
    times = {d: [] for d in runs}
    for _ in range(repeats):
        for d, run in runs.items():
            first = timed(run, d)  # warm-up (and the call's length)
            time.sleep(0.1)
            n = 3 if first < 0.2 else 1
            times[d].append(statistics.median(timed(run, d) for _ in range(n)))
    return {d: statistics.median(t) for d, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="rounds")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--wide", action="store_true", help="also 32 heads of head_dim 128")
    ns = ap.parse_args()
    shapes = [(8, 64), (8, 128)] + ([(32, 128)] if ns.wide else [])
    cases = [(dtype, S, heads, D) for dtype in (torch.bfloat16, torch.float32)
             for heads, D in shapes for S in (1024, 2048, 4096)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, median of "
          f"{ns.repeats} rounds; sdpa(is_causal=True) forward + backward, batch 1; "
          f"load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'case':<28} {'cpu':>10} {'npu':>10} {'npu/cpu':>8}  {'npu peak':>9} "
          f"{'outputs':>9} {'HxSxS f32':>10}")
    missed = 0
    for dtype, S, heads, D in cases:
        name = f"{str(dtype)[6:]} S={S} H={heads} D={D}"
        if ns.only and ns.only not in name:
            continue
        runs = {d: make_call(d, dtype, S, heads, D) for d in ("cpu", "npu")}
        t = measure(runs, ns.repeats)
        ratio = t["npu"] / t["cpu"]
        missed += ratio > 1.0
        peak = peak_beyond_inputs_mib(runs["npu"])
        outputs = 4 * heads * S * D * dtype.itemsize / 2**20
        full = heads * S * S * 4 / 2**20
        print(f"{name:<28} {t['cpu'] * 1e3:>7.1f} ms {t['npu'] * 1e3:>7.1f} ms {ratio:>8.2f}"
              f"{' MISSED' if ratio > 1.0 else '       '} {peak:>5.1f} MiB {outputs:>5.1f} MiB "
              f"{full:>6.0f} MiB", flush=True)
    print(f"{missed} case(s) above 1.0; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
