"""Pictures for `python -m torch_npu.utils.projection --plot DIR` (docs/projection.md).

Per rank R it writes into DIR:
  hbm_rank{R}.png                 device memory over one step: allocated and reserved bytes at
                                  every allocator event, the capacity, and the largest tensors
                                  alive at the peak with the op and Python line that made them
  time_rank{R}.png                the step's time split: compute, communication overlapped with
                                  compute, communication exposed, copies only, idle; the
                                  streams' timeline; the ops with the most modeled time
  memory_snapshot_rank{R}.pickle  the allocator's snapshot (torch.cuda.memory._dump_snapshot's
                                  layout), for PyTorch's memory_viz

How it works:
  - Before the script, PlotRecorder.start opens the allocator's memory history (the Python
    stack of every allocation) and a profiler session (host ops, device activities, and a
    memory event per allocation and free carrying the allocator's allocated / reserved totals
    after it). Neither touches the device, so the script still chooses it.
  - At every optimizer step the projection synchronizes and calls mark(): the simulated clock,
    the profiler's (host) clock and the per-op modeled time so far.
  - The plotted step is the last complete one (the only one when there is one; the whole run
    when no optimizer step ran). Its memory is the memory events between its two marks: their
    totals are the allocator's own statistics, so the plotted peak is max_memory_allocated's
    when the run peaks in that step. The tensors alive at the peak come from replaying the
    events from the start; each is matched with its allocation in the memory history (the
    n-th allocation at an address in both) for its stack, and with the innermost host op open
    on its thread at the time for its op.
  - The time split needs the device activities on the simulated clock (profiler activities
    whose start_ns / end_ns are simulated time plus one constant offset). Whether they are is
    checked, not assumed: see _simulated_offset. When they are not, the picture says so and
    splits only what the cost model's totals give: the modeled time of the ops issued in the
    step (ops share the compute units one at a time, so their sum is the units' busy time,
    up to work that runs across the step's edges) and the rest.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import time

TOP_TENSORS = 5  # live tensors named at the peak
TOP_OPS = 10  # ops in the time picture
GIB = 2 ** 30

# Device activities: kinds as torch_npu/profiler/_result.py reads them; a collective's task is
# named after its HCCL call (ccl/communicator.cpp: "HcclAllReduce", "HcclAllGather", ...).
_MEMCPY, _MEMSET = 1, 2
_COLLECTIVE_PREFIX = "Hccl"
# Factory ops that only allocate: the op named for a tensor is the one around them.
_FACTORY_OPS = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                "aten::new_empty_strided", "aten::resize_")


def require_matplotlib() -> None:
    """Fails before the script runs, naming the fix, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise SystemExit("projection --plot needs matplotlib: pip install -r "
                         "scripts/requirements-dev.txt (or pip install matplotlib)") from e


@dataclasses.dataclass
class Mark:
    """The state at the end of one optimizer step, after the device was synchronized."""

    clock_ns: int  # the device's simulated clock
    host_ns: int  # the profiler's clock (CLOCK_MONOTONIC, time.monotonic_ns)
    cost_ns: dict  # op name -> modeled ns charged so far


def _cost_by_op() -> dict:
    from torch_npu import _C
    return {name: ns for name, calls, ns, flops in _C._npu_costTotals()}


class PlotRecorder:
    """Records what the pictures need while the script runs (see the module docstring)."""

    def __init__(self, torch, torch_npu):
        self.torch, self.torch_npu = torch, torch_npu
        self.marks: list[Mark] = []
        self.result = None  # the profiler's ProfileResult
        self.snapshot = None  # torch.npu.memory._snapshot()

    def start(self) -> None:
        from torch_npu import _C
        # _C directly: torch.npu.memory._record_memory_history would initialize the device,
        # which the script must still be free to choose (set_device, visible devices).
        _C._npu_recordMemoryHistory("all", "alloc", "python", sys.maxsize, True)
        try:
            _C._npu_profiler_start(True, True, False, True)
        except RuntimeError as e:
            raise SystemExit(f"projection --plot: cannot open the profiler: {e}") from e
        self.start_host_ns = time.monotonic_ns()
        self.start_cost = _cost_by_op()

    def mark(self, clock_ns: int) -> None:
        self.marks.append(Mark(clock_ns, time.monotonic_ns(), _cost_by_op()))

    def finish(self, clock_ns: int) -> None:
        """Ends the recording after the script (the device synchronized, at `clock_ns`)."""
        from torch_npu import _C
        from torch_npu.profiler._result import ProfileResult

        self.end = Mark(clock_ns, time.monotonic_ns(), _cost_by_op())
        self.result = ProfileResult(_C._npu_profiler_stop(), host=True, device=True,
                                    memory=True, steps=[], scheduled=False)
        self.snapshot = self.torch_npu.npu.memory._snapshot()
        _C._npu_recordMemoryHistory("", "", "python", sys.maxsize, True)

    # ---- the plotted step -------------------------------------------------------------------

    def step(self) -> dict:
        """The plotted step: its number (1-based; 0 for the whole run), how many there were,
        and its windows on the host clock, the simulated clock and the cost totals."""
        n = len(self.marks)
        if n == 0:
            return {"number": 0, "of": 0, "host": (self.start_host_ns, self.end.host_ns),
                    "clock": (0, self.end.clock_ns), "cost": (self.start_cost, self.end.cost_ns)}
        before = self.marks[n - 2] if n >= 2 else None
        last = self.marks[n - 1]
        return {"number": n, "of": n,
                "host": (before.host_ns if before else self.start_host_ns, last.host_ns),
                "clock": (before.clock_ns if before else 0, last.clock_ns),
                "cost": (before.cost_ns if before else self.start_cost, last.cost_ns)}

    def write(self, directory: str, report: dict) -> dict:
        """Writes the three files of this rank into `directory`; returns what they show (the
        "plot" entry of the --json report)."""
        os.makedirs(directory, exist_ok=True)
        rank = report["rank"]
        step = self.step()
        label = (f"step {step['number']} of {step['of']}" if step["number"]
                 else "the whole run (no optimizer step)")
        out = {"dir": os.path.abspath(directory), "step": step["number"], "files": []}

        snapshot_path = os.path.join(directory, f"memory_snapshot_rank{rank}.pickle")
        with open(snapshot_path, "wb") as f:
            pickle.dump(self.snapshot, f)
        out["files"].append(snapshot_path)

        memory = hbm_series(self.result.memory_events, report["device"], *step["host"])
        out["hbm"] = {
            "x_axis": "allocator event",
            "events": len(memory["allocated"]) - 1,
            "peak_allocated_bytes": memory["allocated"][memory["peak"]],
            "peak_reserved_bytes": max(memory["reserved"]),
            "capacity_bytes": report["capacity_bytes"],
            "run_peak_allocated_bytes": report["peak_allocated_bytes"],
            "peak_event": memory["peak"],
            "top_tensors": self._name_tensors(memory["live_at_peak"], report["device"]),
        }
        path = os.path.join(directory, f"hbm_rank{rank}.png")
        draw_hbm(path, rank, label, memory, out["hbm"])
        out["files"].append(path)

        if self.torch_npu.npu.shadow.installed_profile() is None:
            out["time"] = {"source": None, "why": "no cost model (NPU_SIM_PROFILE=none): no "
                           "simulated clock to split"}
            return out
        out["time"] = self._time_split(step, report)
        path = os.path.join(directory, f"time_rank{rank}.png")
        draw_time(path, rank, label, report["profile"], out["time"])
        # The timeline's intervals are the picture's, not the report's.
        out["time"].pop("streams", None)
        out["time"].pop("window_ns", None)
        out["files"].append(path)
        return out

    # ---- naming the tensors at the peak -----------------------------------------------------

    def _name_tensors(self, live: dict, device: int) -> list[dict]:
        traces = self.snapshot.get("device_traces", [])
        allocs: dict = {}  # address -> the frames of each allocation there, in order
        for entry in traces[device] if device < len(traces) else []:
            if entry["action"] == "alloc":
                allocs.setdefault(entry["addr"], []).append(entry["frames"])
        biggest = sorted(live.items(), key=lambda item: -item[1].bytes)[:TOP_TENSORS]
        named = []
        for ptr, t in biggest:
            frames = allocs.get(ptr, [])
            frame = _user_frame(frames[t.nth]) if t.nth < len(frames) else None
            named.append({"bytes": t.bytes, "op": self._op_at(t.thread, t.ts_ns),
                          "frame": frame})
        return named

    def _op_at(self, thread: int, ts_ns: int) -> str | None:
        """The op that made an allocation: the innermost host op open on its thread then,
        after the outermost one when they differ ("aten::linear > aten::addmm")."""
        chain = [op for op in self.result.host_ops
                 if op.thread == thread and not op.user_scope and op.start_ns <= ts_ns <= op.end_ns]
        if not chain:
            return None
        chain.sort(key=lambda op: op.start_ns)
        inner = [op for op in chain if op.name not in _FACTORY_OPS] or chain
        outer, innermost = chain[0].name, inner[-1].name
        return innermost if outer == innermost else f"{outer} > {innermost}"

    # ---- the time split ---------------------------------------------------------------------

    def _time_split(self, step: dict, report: dict) -> dict:
        lo, hi = step["clock"]
        before, after = step["cost"]
        per_op = {name: ns - before.get(name, 0) for name, ns in after.items()}
        charged = sum(per_op.values())
        top = sorted(((ns, name) for name, ns in per_op.items() if ns > 0), reverse=True)
        out = {"step_ns": hi - lo, "charged_ns": charged,
               "top_ops": [{"op": name, "seconds": ns / 1e9} for ns, name in top[:TOP_OPS]]}
        device = report["device"]
        activities = [a for a in self.result.activities if a.device == device]
        run_charged = sum(self.end.cost_ns.values()) - sum(self.start_cost.values())
        offset, why = _simulated_offset(activities, self.end.clock_ns, run_charged,
                                        self.result.dropped_records)
        if offset is None:
            # What the cost totals give exactly: the compute units' busy time. The rest mixes
            # communication, copies and idle time, which only intervals tell apart.
            out.update(source="cost_totals", why=why, compute_ns=charged,
                       not_compute_ns=max(0, (hi - lo) - charged),
                       comm_overlapped_ns=None, comm_exposed_ns=None, copy_only_ns=None,
                       idle_ns=None)
            return out
        out.update(source="profiler", **activity_split(activities, offset, lo, hi))
        return out


def activity_split(activities, offset: int, lo: int, hi: int) -> dict:
    """time_split of the simulated window [lo, hi) from device activities whose times are
    simulated time + offset, with each stream's intervals in the window ("streams": {stream:
    {"compute" | "comm" | "copy": [(start, end), ...]}}, simulated ns) for the timeline."""
    lanes: dict = {}
    for a in activities:
        lanes.setdefault(a.stream, {"compute": [], "comm": [], "copy": []})[_category(a)].append(
            (a.start_ns - offset, a.end_ns - offset))
    split = time_split(*([iv for lane in lanes.values() for iv in lane[kind]]
                         for kind in ("compute", "comm", "copy")), lo, hi)
    split["streams"] = {
        str(stream): {kind: clip(union(ivs), lo, hi) for kind, ivs in lane.items()}
        for stream, lane in sorted(lanes.items())}
    split["window_ns"] = (lo, hi)
    return split


def _category(activity) -> str:
    if activity.kind in (_MEMCPY, _MEMSET):
        return "copy"
    return "comm" if activity.name.startswith(_COLLECTIVE_PREFIX) else "compute"


def _simulated_offset(activities, clock_ns: int, charged_ns: int, dropped: int):
    """(offset, None) when the device activities are on the simulated clock: then activity
    time = simulated time + offset. Else (None, why).

    The device's clock after synchronize is the latest of its streams', and a stream's clock
    only moves at the end of a timed task (an op's charge, a copy, a memset, a collective) or
    to another stream's clock (a wait): so the latest activity end is the final clock plus the
    offset. The activities are then on the simulated clock when every one lies in
    [offset, offset + clock] and the compute activities cover as much time as the cost model
    charged (the compute units run one op at a time, so the charges never overlap; a kernel's
    own activity, if it has one, lies within its op's)."""
    if dropped:
        return None, f"the profiler dropped {dropped} device activities"
    if not activities or charged_ns <= 0:
        return None, "no device activity was recorded"
    offset = max(a.end_ns for a in activities) - clock_ns
    compute = length(union((a.start_ns, a.end_ns) for a in activities
                           if _category(a) == "compute"))
    if min(a.start_ns for a in activities) < offset or \
            abs(compute - charged_ns) > max(1000, charged_ns // 1000):
        return None, ("the profiler's device activities are not on the simulated clock (their "
                      f"compute covers {compute / 1e6:.3f} ms, the cost model charged "
                      f"{charged_ns / 1e6:.3f} ms)")
    return offset, None


# ---- interval arithmetic (sorted, disjoint [start, end) lists) ----------------------------------


def union(intervals) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def clip(u, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in u if min(e, hi) > max(s, lo)]


def intersect(u, v) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(u) and j < len(v):
        start, end = max(u[i][0], v[j][0]), min(u[i][1], v[j][1])
        if end > start:
            out.append((start, end))
        if u[i][1] < v[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(u, v) -> list[tuple[int, int]]:
    """u minus v."""
    out, j = [], 0
    for start, end in u:
        while j < len(v) and v[j][1] <= start:
            j += 1
        k = j
        while k < len(v) and v[k][0] < end:
            if v[k][0] > start:
                out.append((start, v[k][0]))
            start = max(start, v[k][1])
            k += 1
        if end > start:
            out.append((start, end))
    return out


def length(u) -> int:
    return sum(e - s for s, e in u)


def time_split(compute, comm, copies, lo: int, hi: int) -> dict:
    """The window [lo, hi) cut into parts that add up to it: compute without communication,
    communication overlapped with compute, communication exposed (no compute meanwhile), copies
    only (DMA, nothing else), idle. compute_ns is the whole compute busy time (overlapped
    included)."""
    c, m, d = (clip(union(x), lo, hi) for x in (compute, comm, copies))
    overlapped = length(intersect(c, m))
    exposed = length(subtract(m, c))
    copy_only = length(subtract(subtract(d, c), m))
    busy = length(c)
    return {"compute_ns": busy, "comm_overlapped_ns": overlapped, "comm_exposed_ns": exposed,
            "copy_only_ns": copy_only, "idle_ns": (hi - lo) - busy - exposed - copy_only}


# ---- the memory series ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Live:
    bytes: int  # requested
    ts_ns: int
    thread: int
    nth: int  # this is the nth allocation at its address (0-based)


def hbm_series(events, device: int, start_ns: int, end_ns: int) -> dict:
    """Allocated and reserved bytes at each of the device's memory events in (start_ns,
    end_ns], after the state at start_ns (point 0); the first peak of allocated bytes and the
    allocations alive then (address -> _Live)."""
    events = [e for e in events if e.device == device]
    first = next((i for i, e in enumerate(events) if e.ts_ns > start_ns), len(events))
    stop = next((i for i in range(first, len(events)) if events[i].ts_ns > end_ns), len(events))
    base = events[first - 1] if first else None
    allocated = [base.allocated_bytes if base else 0]
    reserved = [base.reserved_bytes if base else 0]
    for e in events[first:stop]:
        allocated.append(e.allocated_bytes)
        reserved.append(e.reserved_bytes)
    peak = allocated.index(max(allocated))
    live: dict = {}
    count: dict = {}
    for e in events[:first + peak]:  # point p is after event first + p - 1
        if e.delta_bytes > 0:
            nth = count.get(e.ptr, 0)
            count[e.ptr] = nth + 1
            live[e.ptr] = _Live(e.delta_bytes, e.ts_ns, e.thread, nth)
        else:
            live.pop(e.ptr, None)
    return {"allocated": allocated, "reserved": reserved, "peak": peak, "live_at_peak": live}


def _user_frame(frames: list) -> dict | None:
    """The innermost frame outside torch, torch_npu and runpy (the frames come innermost
    first), else the innermost."""
    import torch

    import torch_npu
    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, torch_npu))
    for frame in frames:
        name = frame.get("filename", "")
        if not name.startswith(skip) and "runpy" not in name and not name.startswith("<frozen"):
            return {"filename": name, "line": frame.get("line"), "name": frame.get("name")}
    if frames:
        f = frames[0]
        return {"filename": f.get("filename"), "line": f.get("line"), "name": f.get("name")}
    return None


# ---- drawing -------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100)


def draw_hbm(path: str, rank: int, label: str, memory: dict, info: dict) -> None:
    allocated = [b / GIB for b in memory["allocated"]]
    reserved = [b / GIB for b in memory["reserved"]]
    xs = list(range(len(allocated)))
    capacity = info["capacity_bytes"] / GIB
    fig = _figure(12, 7.5)
    ax = fig.add_axes((0.08, 0.33, 0.88, 0.57))
    ax.step(xs, reserved, where="post", color="tab:orange", lw=1.4,
            label="reserved (the caching allocator's segments)")
    ax.step(xs, allocated, where="post", color="tab:blue", lw=1.4,
            label="allocated (live tensors)")
    ax.fill_between(xs, allocated, step="post", color="tab:blue", alpha=0.15)
    top = max(reserved) if reserved else 0
    if capacity <= 4 * max(top, 1e-9):
        ax.axhline(capacity, color="tab:red", ls="--", lw=1.2,
                   label=f"capacity {capacity:.2f} GiB")
        ax.set_ylim(0, capacity * 1.05)
    else:  # a small job: drawn to its own scale, the capacity named
        ax.plot([], [], color="tab:red", ls="--",
                label=f"capacity {capacity:.2f} GiB (off the scale: "
                      f"{100 * top / capacity:.2f}% reserved at most)")
        ax.set_ylim(0, top * 1.15 if top else 1)
    run_peak = info["run_peak_allocated_bytes"]
    if run_peak > info["peak_allocated_bytes"]:
        ax.axhline(run_peak / GIB, color="tab:blue", ls=":", lw=1,
                   label=f"the run's peak allocated, in another step: {_size(run_peak)}")
        if top < run_peak / GIB and capacity > 4 * top:
            ax.set_ylim(0, run_peak / GIB * 1.15)
    p = memory["peak"]
    ax.axvline(p, color="gray", ls=":", lw=1)
    ax.plot([p], [allocated[p]], marker="v", color="black", ms=8)
    right_half = p > (len(xs) - 1) / 2
    ax.annotate(f"peak {_size(info['peak_allocated_bytes'])} allocated (event {p})",
                (p, allocated[p]), xytext=(-8 if right_half else 8, 8),
                textcoords="offset points", ha="right" if right_half else "left", fontsize=9)
    ax.set_xlim(0, max(1, len(xs) - 1))
    ax.set_xlabel("allocator event in the step (each allocation or free, in host order; "
                  "0 = the step's start)")
    ax.set_ylabel("device memory (GiB)")
    ax.set_title(f"rank {rank}: HBM in use over {label}\n"
                 f"(x axis: allocator event index, not time; {info['events']} events)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    lines = [f"Largest tensors alive at the peak (event {p}; "
             f"{_size(info['peak_allocated_bytes'])} allocated, "
             f"{_size(memory['reserved'][p])} reserved):"]
    for t in info["top_tensors"]:
        f = t["frame"]
        where = f"{os.path.basename(f['filename'])}:{f['line']} in {f['name']}" if f else \
            "(no stack recorded)"
        op = f"   [{t['op']}]" if t["op"] else ""
        lines.append(f"  {_size(t['bytes']):>11}   {where}{op}")
    fig.text(0.04, 0.2, "\n".join(lines), family="monospace", fontsize=9, va="top")
    fig.savefig(path)


_COLORS = {"compute": "tab:blue", "overlapped": "tab:purple", "exposed": "tab:red",
           "copy": "tab:green", "idle": "lightgray", "rest": "silver"}


def _short(name: str, width: int = 44) -> str:
    return name if len(name) <= width else name[:width // 2 - 1] + "..." + name[-(width // 2 - 2):]


def draw_time(path: str, rank: int, label: str, profile: str, t: dict) -> None:
    ms = 1e-6
    timeline = t["source"] == "profiler"
    streams = {k: v for k, v in t.get("streams", {}).items() if any(v.values())}
    fig = _figure(12, 9.5 if timeline else 7)
    heights = [0.5, 0.35 + 0.3 * len(streams), 2.4] if timeline else [0.5, 2.4]
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights,
                                                     "hspace": 0.9 if timeline else 0.6})
    fig.subplots_adjust(left=0.3, right=0.95, top=0.9, bottom=0.09)
    fig.suptitle(f"rank {rank}: time of {label}: {t['step_ns'] * ms:.3f} ms on the simulated "
                 f"{profile} clock")

    bar = axes[0]
    if timeline:
        parts = [("compute, no communication", t["compute_ns"] - t["comm_overlapped_ns"],
                  _COLORS["compute"]),
                 ("communication overlapped with compute", t["comm_overlapped_ns"],
                  _COLORS["overlapped"]),
                 ("communication exposed", t["comm_exposed_ns"], _COLORS["exposed"]),
                 ("copies only (DMA)", t["copy_only_ns"], _COLORS["copy"]),
                 ("idle", t["idle_ns"], _COLORS["idle"])]
    else:
        parts = [("compute (the cost model's op time)", t["compute_ns"], _COLORS["compute"]),
                 ("communication, copies and idle (not separated)", t["not_compute_ns"],
                  _COLORS["rest"])]
    left = 0.0
    for name, ns, color in parts:
        bar.barh([0], [ns * ms], left=left, height=0.8, color=color, edgecolor="white",
                 label=f"{name}: {ns * ms:.3f} ms ({100 * ns / max(1, t['step_ns']):.1f}%)")
        left += ns * ms
    bar.set_yticks([0], ["the step"])
    bar.set_xlim(0, max(left, t["step_ns"] * ms) or 1)
    bar.set_xlabel("ms")
    bar.set_title("the step's time split", fontsize=10)
    bar.legend(loc="upper left", bbox_to_anchor=(-0.35, -0.75), ncol=2, fontsize=8,
               frameon=False)

    if timeline:
        lanes = axes[1]
        lo = t["window_ns"][0]
        names = []
        for row, (stream, kinds) in enumerate(streams.items()):
            for kind, color in (("compute", _COLORS["compute"]), ("comm", _COLORS["exposed"]),
                                ("copy", _COLORS["copy"])):
                spans = [((s - lo) * ms, (e - s) * ms) for s, e in kinds[kind]]
                if spans:
                    lanes.broken_barh(spans, (row - 0.35, 0.7), color=color)
            what = ", ".join(w for w, k in (("ops", "compute"), ("collectives", "comm"),
                                            ("copies", "copy")) if kinds[k])
            names.append(f"stream {stream} ({what})")
        lanes.set_yticks(range(len(names)), names, fontsize=8)
        lanes.set_ylim(len(names) - 0.4, -0.6)
        lanes.set_xlim(0, t["step_ns"] * ms or 1)
        lanes.set_xlabel("ms since the step's start")
        lanes.set_title("streams (blue: ops, red: collectives, green: copies and memsets)",
                        fontsize=10)
        lanes.grid(axis="x", alpha=0.3)

    ops = axes[-1]
    top = list(reversed(t["top_ops"]))
    widths = [o["seconds"] * 1e3 for o in top]
    ops.barh(range(len(top)), widths, color=_COLORS["compute"])
    for y, w in enumerate(widths):
        ops.text(w, y, f" {w:.3f}", va="center", fontsize=7)
    ops.set_yticks(range(len(top)), [_short(o["op"]) for o in top], fontsize=8)
    ops.set_xlim(0, max(widths, default=0) * 1.15 or 1)
    ops.set_xlabel("modeled time in the step (ms)")
    ops.set_title(f"ops with the most modeled time in the step (of {t['charged_ns'] * ms:.3f} ms "
                  "charged)", fontsize=10)
    ops.grid(axis="x", alpha=0.3)
    if not timeline:
        fig.text(0.02, 0.015, f"Not split: {t['why']}.", fontsize=8, color="dimgray")
    fig.savefig(path)
