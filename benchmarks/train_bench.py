"""Eager training steps, npu vs cpu in one run, against issue 30's goal (npu step <= 0.8x the
CPU device's): the MLP, CNN, GPT-style and LLaMA-style (d=32 and d=128, written without fused
kernels) steps of torch_npu/testing/cases.py, each at the batch the cases use and at 4x it.
AdamW (its default foreach step) on one batch, synchronized at the end of each call; the figure
is time per step. Devices alternate in rounds as in ops_bench.py (its compare()).

    .venv/bin/python benchmarks/train_bench.py [--repeats N] [--steps N] [--only NAME]
"""

import argparse
import sys

import torch

import torch_npu  # noqa: F401
from ops_bench import compare
from torch_npu.testing.cases import default_batch, train_steps

GOAL = 0.8

# (name, kind, d): the models of cases.py's training rows
MODELS = [
    ("MLP", "mlp", None),
    ("CNN", "cnn", None),
    ("GPT-style", "gpt", None),
    ("LLaMA-style d=32", "llama", 32),
    ("LLaMA-style d=128", "llama", 128),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3, help="rounds")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps per timed call")
    ap.add_argument("--only", default=None, help="run the models whose name contains this")
    ns = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, median of "
          f"{ns.repeats} rounds (3 timed calls of {ns.steps} steps per device each), per step")
    print(f"{'model':<20} {'batch':>5} {'cpu':>11} {'npu':>11} {'npu/cpu':>8} {'goal':>6}")
    missed = 0
    for name, kind, d in MODELS:
        if ns.only and ns.only not in name:
            continue
        for scale in (1, 4):
            batch = default_batch(kind) * scale
            cpu, npu = compare(train_steps(kind, steps=ns.steps, batch=batch, d=d), ns.repeats)
            ratio = npu / cpu
            missed += ratio > GOAL
            print(f"{name:<20} {batch:>5} {cpu * 1e3:>8.2f} ms {npu * 1e3:>8.2f} ms {ratio:>8.2f} "
                  f"{'<=' + str(GOAL):>6}{'  MISSED' if ratio > GOAL else ''}", flush=True)
    print(f"{missed} of the rows above miss the goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
