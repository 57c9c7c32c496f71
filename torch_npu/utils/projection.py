"""Projection: run a training (or inference) script at its real size under shadow execution and
report, per rank, the device memory it needs and its projected step time on the card
(docs/shadow.md).

    python -m torch_npu.utils.projection [options] -- train.py [args...]
    torchrun --nproc_per_node 8 -m torch_npu.utils.projection [options] -- train.py [args...]

Shadow execution (NPU_SIM_SHADOW=1) is switched on for the script (the process restarts itself
with it when it is not set). A step is what lies between two optimizer steps (every
torch.optim optimizer's step, through torch's global step hook): step k's time is the advance of
the device's simulated clock (the latest of its streams') from the end of step k-1 to the end of
step k, measured after the device is synchronized. The first step includes the set-up before it
(optimizer state creation, first collectives), so the projection is the median of the later
steps (the first one alone when there is only one).

Options:
  --profile NAME         card profile (torch_npu/data/profile_NAME.toml or a .toml path);
                         default NPU_SIM_PROFILE or 910B2
  --tokens-per-step N    tokens one step processes on this rank (tokens/s is reported)
  --samples-per-step N   samples one step processes on this rank (samples/s is reported)
  --model-flops N        the model's training flops per step on this rank, for MFU; default
                         the cube flops the cost model counted
  --top K                the K ops with the most modeled time (default 10)
  --json                 one JSON object per rank on stdout instead of the table
  --plot DIR             also write pictures of the last complete step into DIR, per rank R:
                         hbm_rank{R}.png (memory over the step, the largest tensors at its
                         peak), time_rank{R}.png (the step's time split) and
                         memory_snapshot_rank{R}.pickle (for PyTorch's memory_viz); needs
                         matplotlib, and holds the profiler for the run (the script cannot
                         profile itself). docs/projection.md, "Pictures: --plot".
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys


def _parse(argv):
    if "--" not in argv:
        raise SystemExit("usage: python -m torch_npu.utils.projection [options] -- script.py "
                         "[args...]  (the '--' before the script is required)")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m torch_npu.utils.projection")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--tokens-per-step", type=float, default=None)
    ap.add_argument("--samples-per-step", type=float, default=None)
    ap.add_argument("--model-flops", type=float, default=None)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", metavar="DIR", default=None)
    ns = ap.parse_args(argv[:cut])
    script = argv[cut + 1:]
    if not script:
        raise SystemExit("projection: no script after '--'")
    return ns, script


class _Steps:
    """Reads the simulated clock and the cost totals at the end of every optimizer step."""

    def __init__(self, torch, torch_npu, recorder=None):
        self.torch, self.torch_npu = torch, torch_npu
        self.recorder = recorder  # --plot's PlotRecorder, told of every step's end
        self.marks = []  # (clock ns, cube flops so far)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._mark)

    def _cube_flops(self):
        from torch_npu import _C
        return sum(flops for name, calls, ns, flops in _C._npu_costTotals() if _is_cube(name))

    def _mark(self, *_):
        self.torch.npu.synchronize()
        clock = self.torch_npu.npu.shadow.simulated_time_ns()
        self.marks.append((clock, self._cube_flops()))
        if self.recorder is not None:
            self.recorder.mark(clock)


_CUBE = ("mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "convolution_backward",
         "convolution_overrideable")


def _is_cube(name: str) -> bool:
    return name.removeprefix("aten::") in _CUBE or "scaled_dot_product" in name or \
        "flash_attention" in name


def _report(ns, steps, torch, torch_npu) -> dict:
    from torch_npu import _C
    installed = torch_npu.npu.shadow.installed_profile()
    figures = installed["profile"]["figures"]
    rank = int(os.environ.get("RANK", 0))
    device = torch.npu.current_device()
    clocks = [0] + [c for c, _ in steps.marks]
    flops = [0.0] + [f for _, f in steps.marks]
    step_ns = [b - a for a, b in zip(clocks, clocks[1:])]
    step_flops = [b - a for a, b in zip(flops, flops[1:])]
    later = step_ns[1:] or step_ns
    projected_s = statistics.median(later) / 1e9 if later else None
    out = {
        "rank": rank,
        "device": device,
        "profile": installed["profile"]["meta"].get("name", installed["profile"]["path"]),
        "steps": len(step_ns),
        "step_seconds": [t / 1e9 for t in step_ns],
        "projected_step_seconds": projected_s,
        "peak_allocated_bytes": torch.npu.max_memory_allocated(device),
        "peak_reserved_bytes": torch.npu.max_memory_reserved(device),
        "capacity_bytes": torch.npu.get_device_properties(device).total_memory,
    }
    if projected_s:
        if ns.tokens_per_step:
            out["tokens_per_second"] = ns.tokens_per_step / projected_s
        if ns.samples_per_step:
            out["samples_per_second"] = ns.samples_per_step / projected_s
        work = ns.model_flops or (statistics.median(step_flops[1:] or step_flops)
                                  if step_flops else 0)
        peak = float(figures["cube_tflops_bf16"]) * 1e12
        out["model_flops_per_step"] = work
        out["mfu"] = work / (projected_s * peak) if work else None
    totals = sorted(_C._npu_costTotals(), key=lambda t: -t[2])[:ns.top]
    out["top_ops"] = [{"op": name, "calls": calls, "seconds": t / 1e9, "flops": f}
                      for name, calls, t, f in totals]
    return out


def _print(r: dict) -> None:
    gib = 2 ** 30
    head = f"[rank {r['rank']}] projection on {r['profile']}"
    lines = [head, "-" * len(head),
             f"peak HBM      {r['peak_allocated_bytes'] / gib:8.2f} GiB allocated, "
             f"{r['peak_reserved_bytes'] / gib:.2f} GiB reserved of "
             f"{r['capacity_bytes'] / gib:.2f} GiB"]
    if r["projected_step_seconds"] is None:
        lines.append("step time     no optimizer step ran: nothing to project")
    else:
        lines.append(f"step time     {r['projected_step_seconds'] * 1e3:8.2f} ms projected "
                     f"(median of {max(1, r['steps'] - 1)} step(s); all: "
                     + ", ".join(f"{t * 1e3:.2f}" for t in r["step_seconds"]) + " ms)")
        if "tokens_per_second" in r:
            lines.append(f"throughput    {r['tokens_per_second']:10.1f} tokens/s")
        if "samples_per_second" in r:
            lines.append(f"throughput    {r['samples_per_second']:10.1f} samples/s")
        if r.get("mfu") is not None:
            lines.append(f"MFU           {r['mfu'] * 100:8.1f} % of the bf16 cube peak")
    if "plot" in r:
        lines.append(f"pictures      {r['plot']['dir']}: "
                     + ", ".join(os.path.basename(f) for f in r["plot"]["files"]))
    lines.append("top ops by modeled time (whole run):")
    for op in r["top_ops"]:
        lines.append(f"  {op['op']:<44} {op['calls']:>7} calls {op['seconds'] * 1e3:10.2f} ms")
    print("\n".join(lines), flush=True)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, script = _parse(argv)
    if os.environ.get("NPU_SIM_SHADOW") != "1":
        # The runtime reads the variable once, at start: restart with it.
        env = dict(os.environ, NPU_SIM_SHADOW="1")
        if ns.profile:
            env["NPU_SIM_PROFILE"] = ns.profile
        os.execve(sys.executable, [sys.executable, "-m", "torch_npu.utils.projection", *argv], env)
    if ns.profile:
        os.environ["NPU_SIM_PROFILE"] = ns.profile
    if ns.plot:
        from torch_npu.utils import _projection_plot
        _projection_plot.require_matplotlib()
    import torch

    import torch_npu

    recorder = None
    if ns.plot:
        recorder = _projection_plot.PlotRecorder(torch, torch_npu)
        recorder.start()
    steps = _Steps(torch, torch_npu, recorder)
    sys.argv = script
    sys.path.insert(0, os.path.dirname(os.path.abspath(script[0])))
    try:
        runpy.run_path(script[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        steps.handle.remove()
    report = _report(ns, steps, torch, torch_npu)
    if recorder is not None:
        torch.npu.synchronize()
        recorder.finish(torch_npu.npu.shadow.simulated_time_ns())
        report["plot"] = recorder.write(ns.plot, report)
    if ns.json:
        # One write with its newline: the ranks of a job share the output, and unbuffered
        # (python -u, PYTHONUNBUFFERED) print() writes the text and the newline separately,
        # so another rank's line could land between them. A pipe keeps a write of up to
        # PIPE_BUF (4096) bytes whole; a report is about 1.3 KB.
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
