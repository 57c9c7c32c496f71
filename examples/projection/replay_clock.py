"""Timing a replay's micro-batches and optimizer step on the simulated clock.

A published training step accumulates gradients over many micro-batches (64 for MindSpeed's
LLaMA-2-7B, 128 for its LLaMA-2-13B). Replaying all of them takes too long on the host, so a
replay runs a few and scales:

    step time = n_micro * t_micro + t_opt

t_micro is the median simulated time of a micro-batch that is neither the first of its step nor
the last (so neither the set-up nor the gradient sync is in it; with only two per step, the
first of each step after the first), and t_opt the time from the end of the last micro-batch's
forward/backward to the end of optimizer.step() and zero_grad() (the last micro-batch's
gradient reduction that did not overlap, plus the optimizer). Each boundary synchronizes the
device and reads its clock (torch_npu.npu.shadow.simulated_time_ns), which only ends the
overlap of a collective with the next micro-batch at that boundary.

The replay writes OUT/rank<R>.json: the micro-batch and optimizer times (ns), the host seconds
and the peak host RSS of the process, and the allocator's peaks.
"""
import json
import os
import statistics
import time

import torch

import torch_npu
from torch_npu.testing import peak_rss_mb


class ReplayClock:
    def __init__(self):
        self.micro_ns = []      # per step, a list of micro-batch times
        self.opt_ns = []
        self.host_s = []
        self._t = None
        self._host = None

    def _now(self):
        torch.npu.synchronize()
        return torch_npu.npu.shadow.simulated_time_ns()

    def step_begin(self):
        self._t = self._now()
        self._host = time.time()
        self.micro_ns.append([])

    def micro_end(self):
        t = self._now()
        self.micro_ns[-1].append(t - self._t)
        self._t = t

    def step_end(self):
        t = self._now()
        self.opt_ns.append(t - self._t)
        self._t = t
        self.host_s.append(time.time() - self._host)

    def summary(self, n_micro_published: int | None = None) -> dict:
        inner = [m for step in self.micro_ns[1:] for m in (step[1:-1] or step[:1])] or \
            [m for step in self.micro_ns for m in step]
        t_micro = statistics.median(inner)
        t_opt = statistics.median(self.opt_ns[1:] or self.opt_ns)
        out = {"micro_ns": self.micro_ns, "opt_ns": self.opt_ns, "t_micro_ns": t_micro,
               "t_opt_ns": t_opt, "host_step_seconds": self.host_s}
        if n_micro_published:
            out["n_micro"] = n_micro_published
            out["step_seconds_scaled"] = (n_micro_published * t_micro + t_opt) / 1e9
        return out


def write_report(out_dir: str | None, clock: ReplayClock, n_micro: int, extra: dict) -> dict:
    rank = int(os.environ.get("RANK", 0))
    device = torch.npu.current_device()
    report = {"rank": rank, "world": int(os.environ.get("WORLD_SIZE", 1)),
              **clock.summary(n_micro),
              "peak_allocated_bytes": torch.npu.max_memory_allocated(device),
              "peak_reserved_bytes": torch.npu.max_memory_reserved(device),
              "rss_mb": peak_rss_mb(), **extra}
    if out_dir:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
    return report
