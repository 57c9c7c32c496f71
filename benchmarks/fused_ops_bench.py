"""torch_npu's fused LLM ops on npu against what they replace on PyTorch's CPU, in one run.

  flash attention  npu_fusion_attention forward + backward (BSND, causal: sparse_mode 3 with the
                   compressed mask) vs CPU F.scaled_dot_product_attention(is_causal=True)
                   forward + backward, plus the npu's peak memory for the call
  npu_rms_norm     vs x * rsqrt(mean(x^2) + eps) * gamma
  npu_swiglu       vs silu(a) * b with a, b = x.chunk(2, -1)
  npu_rotary_mul   vs x * r1 + cat(-x2, x1) * r2

The ratio is npu time / cpu time (lower is better). Each round gives a device a warm-up call,
then three timed calls (their median); the figure is the median over the rounds. Calls are
grouped per device, as in ops_bench.py (both sides keep worker threads spinning after work).

    .venv/bin/python benchmarks/fused_ops_bench.py [--repeats N] [--only NAME] [--long]
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_npu
from torch_npu.testing.timing import timed




def bench_attention(S, heads, D=64):
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)

    def make(device):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, S, heads, D, generator=g) for _ in range(3))
        dout = torch.randn(1, S, heads, D, generator=g)
        if device == "cpu":
            qc, kc, vc = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
            gc = dout.transpose(1, 2).contiguous()

            def run():
                out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True)
                out.backward(gc)
            return run
        qn, kn, vn = (t.npu().requires_grad_() for t in (q, k, v))
        gn, mn = dout.npu(), mask.npu()

        def run():
            out = torch_npu.npu_fusion_attention(qn, kn, vn, heads, "BSND", atten_mask=mn,
                                                 scale=D ** -0.5, sparse_mode=3)[0]
            out.backward(gn)
        return run
    return make


def bench_rms_norm(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 2048, generator=g).to(device)
    gamma = torch.rand(2048, generator=g).to(device)
    if device == "cpu":
        return lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    return lambda: torch_npu.npu_rms_norm(x, gamma)


def bench_swiglu(device):
    x = torch.randn(8192, 2 * 2752, generator=torch.Generator().manual_seed(0)).to(device)
    if device == "cpu":
        def run():
            a, b = x.chunk(2, -1)
            return F.silu(a) * b
        return run
    return lambda: torch_npu.npu_swiglu(x, dim=-1)


def bench_rotary(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2048, 16, 128, generator=g).to(device)
    r1 = torch.randn(1, 2048, 1, 128, generator=g).to(device)
    r2 = torch.randn(1, 2048, 1, 128, generator=g).to(device)
    if device == "cpu":
        def run():
            x1, x2 = x.chunk(2, -1)
            return x * r1 + torch.cat([-x2, x1], -1) * r2
        return run
    return lambda: torch_npu.npu_rotary_mul(x, r1, r2)


def attention_peak_mib(make):
    fn = make("npu")
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    fn()
    torch.npu.synchronize()
    return (torch.npu.max_memory_allocated() - base) / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="rounds")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--long", action="store_true", help="also S = 16384 (minutes on 2 cores)")
    ns = ap.parse_args()
    cases = {
        "attention fwd+bwd S=1024 (8 heads)": (bench_attention(1024, 8), 1.0, True),
        "attention fwd+bwd S=4096 (2 heads)": (bench_attention(4096, 2), 1.0, True),
        "npu_rms_norm 8192x2048": (bench_rms_norm, 0.5, False),
        "npu_swiglu 8192x5504": (bench_swiglu, 0.5, False),
        "npu_rotary_mul 4x2048x16x128": (bench_rotary, 0.5, False),
    }
    if ns.long:
        cases["attention fwd+bwd S=16384 (1 head)"] = (bench_attention(16384, 1), 1.0, True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"median of {ns.repeats} rounds (3 timed calls per device each)")
    print(f"{'case':<38} {'cpu':>11} {'npu':>11} {'npu/cpu':>8} {'goal':>6}  npu peak")
    for name, (make, goal, attention) in cases.items():
        if ns.only and ns.only not in name:
            continue
        runs = {d: make(d) for d in ("cpu", "npu")}
        for d in runs:
            timed(runs[d], d)  # warm-up
        times = {"cpu": [], "npu": []}
        for _ in range(ns.repeats):
            for d in ("cpu", "npu"):
                timed(runs[d], d)
                time.sleep(0.1)
                times[d].append(statistics.median(timed(runs[d], d) for _ in range(3)))
        cpu, npu = statistics.median(times["cpu"]), statistics.median(times["npu"])
        ratio = npu / cpu
        peak = f"{attention_peak_mib(make):.1f} MiB" if attention else ""
        print(f"{name:<38} {cpu * 1e3:>8.2f} ms {npu * 1e3:>8.2f} ms {ratio:>8.2f} "
              f"{'<=' + str(goal):>6}{'  MISSED' if ratio > goal else '        '}  {peak}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
