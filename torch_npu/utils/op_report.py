"""Operator report: which aten ops a script runs on npu, and how each one ran.

    python -m torch_npu.utils.op_report my_train.py [script args...]

Each aten op that touched an npu tensor is listed with its call count and how it ran:
  npu kernel        a kernel of SimNPU's operator library (kernels/), queued on the stream
  composite         a composite implementation made of other ops that ran as npu kernels
  aten host kernel  ATen's own CPU kernel run as the device kernel, on the stream (async)
  aten host (sync)  the same for an op whose output size depends on the data: waits for the
                    stream (nonzero, masked_select, unique, boolean indexing, ...)
  cpu fallback      no device kernel: copied to the CPU, run there, copied back (slow)
An op whose calls took different paths (a dtype the library lacks) lists each with its count.

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


KINDS = ("npu kernel", "composite", "aten host kernel", "aten host (sync)", "cpu fallback")


class OpRecorder(TorchDispatchMode):
    """Counts every aten op that has an npu tensor among its arguments or results, and how each
    call ran: the adapter's per-path call counters are read around the call."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()      # op -> calls
        self.paths: collections.Counter = collections.Counter()       # (op, kind) -> calls
        from torch_npu import _C
        self._totals = _C._npu_pathTotals

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self._totals()
        out = func(*args, **(kwargs or {}))
        after = self._totals()
        leaves, _ = tree_flatten((args, kwargs, out))
        if any(isinstance(t, torch.Tensor) and t.device.type == "npu" for t in leaves):
            name = func.name()
            self.counts[name] += 1
            self.paths[(name, classify_call(name, before, after))] += 1
        return out


def classify_call(name: str, before, after) -> str:
    """How one call of `name` ran, from the path counters (async host, sync host, fallback)."""
    if after[2] > before[2]:
        return "cpu fallback"
    if after[1] > before[1]:
        return "aten host (sync)"
    if after[0] > before[0]:
        return "aten host kernel"
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return "npu kernel"
    return "composite"


def format_report(counts, paths) -> str:
    lines = [f"{'operator':<48} {'calls':>8}  how it ran", "-" * 76]
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        kinds = [(k, paths[(name, k)]) for k in KINDS if paths[(name, k)]]
        how = kinds[0][0] if len(kinds) == 1 else ", ".join(f"{k} {c}" for k, c in kinds)
        lines.append(f"{name:<48} {n:>8}  {how}")
    totals = collections.Counter()
    for (name, kind), n in paths.items():
        totals[kind] += n
    lines.append("-" * 76)
    lines.append(
        f"{len(counts)} ops, {sum(counts.values())} calls: "
        + ", ".join(f"{totals[k]} {k}" for k in KINDS)
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
    print(format_report(recorder.counts, recorder.paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
