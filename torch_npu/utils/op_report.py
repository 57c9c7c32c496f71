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

Readiness for a real card, before anyone books one:

    python -m torch_npu.utils.op_report --target 910B [--json] -- my_train.py [script args...]

lists every (op, dtype) the run used with what the card does with it (from
torch_npu/data/card_<target>.toml, see docs/card_support.md): native, aicpu (slow), cpu_fallback
(host), unsupported (raises), or unknown (the sources do not establish it); then the float32 ops
that HF32 settings affect, the ops that synchronize the host, and a one-line verdict. A call's
dtype is that of its first tensor argument (the first tensor of a list for foreach ops), or of
its first result when it has no tensor argument (factories).
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


# Ops that move data between npu and the host when one side is a CPU tensor.
HOST_COPY_OPS = ("aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize")

KINDS = ("npu kernel", "composite", "aten host kernel", "aten host (sync)", "cpu fallback")


class OpRecorder(TorchDispatchMode):
    """Counts every aten op that has an npu tensor among its arguments or results, and how each
    call ran: the adapter's per-path call counters are read around the call."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()      # op -> calls
        self.paths: collections.Counter = collections.Counter()       # (op, kind) -> calls
        self.typed: collections.Counter = collections.Counter()       # (op, dtype) -> calls
        self.typed_paths: collections.Counter = collections.Counter()  # (op, dtype, kind) -> calls
        self.transfers: collections.Counter = collections.Counter()   # op -> npu<->cpu copies
        from torch_npu import _C
        self._totals = _C._npu_pathTotals

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self._totals()
        out = func(*args, **(kwargs or {}))
        after = self._totals()
        leaves, _ = tree_flatten((args, kwargs, out))
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        if any(t.device.type == "npu" for t in tensors):
            name = func.name()
            how = classify_call(name, before, after)
            self.counts[name] += 1
            self.paths[(name, how)] += 1
            dtype = call_dtype(args, kwargs, out)
            self.typed[(name, dtype)] += 1
            self.typed_paths[(name, dtype, how)] += 1
            if name in HOST_COPY_OPS and any(t.device.type == "cpu" for t in tensors):
                self.transfers[name] += 1
        return out


def call_dtype(args, kwargs, out) -> str:
    """The dtype a call is filed under: its first tensor argument's, else its first result's."""
    for tree in ((args, kwargs), out):
        for t in tree_flatten(tree)[0]:
            if isinstance(t, torch.Tensor):
                return str(t.dtype).removeprefix("torch.")
    return "-"


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


def card_readiness(recorder: OpRecorder, target: str) -> dict:
    """Every (op, dtype) the run used, with what `target` does with it; HF32; host syncs; verdict.
    A plain dict (what --json prints)."""
    from torch_npu.utils import card_support

    card = card_support.load(target)
    rows = []
    for (op, dtype), calls in sorted(recorder.typed.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        r = card.row(op)
        kind = card.kind(op, dtype if dtype != "-" else None)
        sims = [k for k in KINDS if recorder.typed_paths[(op, dtype, k)]]
        sync = card.synchronizes(op) or "aten host (sync)" in sims
        row = dict(op=op, dtype=dtype, calls=calls, kind=kind, simnpu=", ".join(sims),
                   sync=sync, hf32=None, data_row=r["name"] if r else None)
        family = card.hf32_family(op)
        if family and dtype == "float32":
            row["hf32"] = family
        if kind == "unsupported":
            row["message"] = card.unsupported_message(op, dtype)
        rows.append(row)

    counts = collections.Counter(r["kind"] for r in rows)
    hf32 = {}
    for family in ("matmul", "conv"):
        ops = sorted({r["op"] for r in rows if r["hf32"] == family})
        if not ops:
            continue
        flag, default = card.hf32_flag(family)
        current = _current_flag(flag, default)
        hf32[family] = dict(flag=flag, default=default, current=current, ops=ops,
                            calls=sum(r["calls"] for r in rows if r["hf32"] == family))
    sync_ops = collections.Counter()
    for r in rows:
        if r["sync"]:
            sync_ops[r["op"]] += r["calls"]
    transfers = dict(recorder.transfers)

    bad = [r for r in rows if r["kind"] == "unsupported"]
    fallback = [r for r in rows if r["kind"] == "cpu_fallback"]
    aicpu = [r for r in rows if r["kind"] == "aicpu"]
    unknown = [r for r in rows if r["kind"] == "unknown"]
    if bad:
        status = "not_ready"
        line = (f"{target}: NOT READY: {len(bad)} (op, dtype) unsupported ("
                + ", ".join(f"{r['op']} {r['dtype']}" for r in bad[:5])
                + (", ..." if len(bad) > 5 else "") + ")")
    elif fallback or aicpu or unknown:
        status = "caveats"
        line = (f"{target}: READY WITH CAVEATS: {len(fallback)} fall back to the host CPU, "
                f"{len(aicpu)} run on AI CPU, {len(unknown)} not established by the sources")
    else:
        status = "ready"
        line = f"{target}: READY: every (op, dtype) runs natively"
    if status != "not_ready":
        line += f"; {sum(sync_ops.values())} host syncs"
    return dict(target=target, rows=rows, counts={k: counts[k] for k in
                                                 (*card_support.KINDS, card_support.UNKNOWN)},
                hf32=hf32, host_sync=dict(sync_ops), host_transfers=transfers,
                verdict=dict(status=status, line=line))


def _current_flag(flag: str, default: bool) -> bool:
    obj = torch
    for part in flag.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return default
    return bool(obj)


def format_readiness(rep: dict) -> str:
    t = rep["target"]
    lines = [f"Readiness for {t} (data: torch_npu/data/card_{t}.toml)", "",
             f"{'operator':<52} {'dtype':<10} {'calls':>6}  {'on ' + t:<13} {'SimNPU ran it as'}",
             "-" * 110]
    for r in rep["rows"]:
        marks = (" [sync]" if r["sync"] else "") + (f" [hf32:{r['hf32']}]" if r["hf32"] else "")
        lines.append(f"{r['op']:<52} {r['dtype']:<10} {r['calls']:>6}  {r['kind']:<13} "
                     f"{r['simnpu']}{marks}")
    lines.append("-" * 110)
    c = rep["counts"]
    lines.append(f"{len(rep['rows'])} (op, dtype) rows: "
                 + ", ".join(f"{v} {k}" for k, v in c.items()))
    lines += ["", "HF32 (float32 on the cube unit: float32 exponent, 10 mantissa bits):"]
    if not rep["hf32"]:
        lines.append("  no float32 matmul or convolution")
    for family, h in rep["hf32"].items():
        state = "on" if h["current"] else "off"
        lines.append(f"  {family}: {h['calls']} calls ({', '.join(h['ops'])}); {h['flag']} = "
                     f"{h['current']} (card default {h['default']}): HF32 {state} on the card")
    lines += ["", "Host synchronization (the host waits for the device):"]
    if not rep["host_sync"] and not rep["host_transfers"]:
        lines.append("  none")
    for op, n in sorted(rep["host_sync"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {op:<50} {n:>6} calls")
    for op, n in sorted(rep["host_transfers"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {op:<50} {n:>6} calls copy between npu and the host")
    for r in rep["rows"]:
        if r.get("message"):
            lines += ["", f"On {t}, {r['op']} {r['dtype']} would raise:", r["message"]]
    lines += ["", rep["verdict"]["line"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_npu.utils.op_report",
        description="Run a script and report the aten ops it executed on npu.",
        usage="%(prog)s [--target CARD [--json]] [--] script [args...]",
    )
    parser.add_argument("--target", metavar="CARD",
                        help="say what this card does with each (op, dtype), e.g. 910B")
    parser.add_argument("--json", action="store_true",
                        help="with --target: print the readiness report as JSON")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    ns = parser.parse_args(argv)
    if ns.json and not ns.target:
        parser.error("--json needs --target")
    if not os.path.isfile(ns.script):
        parser.error(f"script not found: {ns.script}")
    if ns.target:
        from torch_npu.utils import card_support
        try:
            card_support.load(ns.target)
        except ValueError as e:
            parser.error(str(e))
    import torch_npu  # noqa: F401

    recorder = OpRecorder()
    sys.argv = [ns.script, *ns.args]
    with recorder:
        try:
            runpy.run_path(ns.script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                print(f"op_report: the script exited with {e.code}", file=sys.stderr)
    if not ns.target:
        print(format_report(recorder.counts, recorder.paths))
        return 0
    rep = card_readiness(recorder, ns.target)
    if ns.json:
        import json
        print(json.dumps(rep, indent=1))
    else:
        print(format_readiness(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
