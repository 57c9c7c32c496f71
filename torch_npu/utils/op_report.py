"""Operator report: which aten ops a script runs on npu, and how each one ran.

    python -m torch_npu.utils.op_report my_train.py [script args...]

Each aten op that touched an npu tensor is listed with its call count and how it ran:
  npu kernel     an NPU kernel registered by torch_npu (PrivateUse1 dispatch key)
  composite      no NPU kernel, but a composite implementation made of other ops
  cpu fallback   no NPU kernel: copied to the CPU, run there, copied back (slow)

Ops are observed with a TorchDispatchMode, i.e. after autograd and after
CompositeImplicitAutograd decomposition, which is the level at which kernels are chosen.
"""

from __future__ import annotations

import argparse
import collections
import os
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class OpRecorder(TorchDispatchMode):
    """Counts every aten op that has an npu tensor among its arguments or results."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves, _ = tree_flatten((args, kwargs, out))
        if any(isinstance(t, torch.Tensor) and t.device.type == "npu" for t in leaves):
            self.counts[func.name()] += 1
        return out


def classify_name(name: str) -> str:
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return "npu kernel"
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
        return "composite"
    return "cpu fallback"


def format_report(counts, kinds) -> str:
    lines = [f"{'operator':<48} {'calls':>8}  how it ran", "-" * 72]
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"{name:<48} {n:>8}  {kinds[name]}")
    totals = collections.Counter()
    for name, n in counts.items():
        totals[kinds[name]] += n
    lines.append("-" * 72)
    lines.append(
        f"{len(counts)} ops, {sum(counts.values())} calls: "
        + ", ".join(f"{totals[k]} {k}" for k in ("npu kernel", "composite", "cpu fallback"))
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_npu.utils.op_report",
        description="Run a script and report the aten ops it executed on npu.",
    )
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    ns = parser.parse_args(argv)
    if not os.path.isfile(ns.script):
        parser.error(f"script not found: {ns.script}")
    import torch_npu  # noqa: F401

    recorder = OpRecorder()
    sys.argv = [ns.script, *ns.args]
    with recorder:
        try:
            runpy.run_path(ns.script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                print(f"op_report: the script exited with {e.code}", file=sys.stderr)
    kinds = {name: classify_name(name) for name in recorder.counts}
    print(format_report(recorder.counts, kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
