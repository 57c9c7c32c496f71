"""One recording window, and everything written from it: the Chrome trace and the CSV tables.

All four outputs are computed from the same records, so their totals agree by construction
(tests/python/test_profiler.py checks it anyway). Times are kept as integer nanoseconds of
CLOCK_MONOTONIC (the runtime's clock, Python's time.monotonic_ns) and written as Unix-epoch
microseconds with three decimals, so nothing is rounded before it is printed.

Linking, as in PyTorch's CUDA traces: every host op has an "External id"; every device activity
has its own "correlation" id and the External id of the innermost op that launched it; a flow
arrow ("ph": "s" at the launch, inside the op's slice, and "ph": "f" at the kernel) carries the
correlation id.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import threading
import time
from typing import Any, Iterable

_KERNEL, _MEMCPY, _MEMSET = 0, 1, 2
_MEMCPY_NAMES = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD"}


@dataclasses.dataclass
class HostOp:
    name: str
    external_id: int  # 0 for user scopes (record_function, ProfilerStep#n)
    start_ns: int
    end_ns: int
    thread: int
    user_scope: bool
    input_shapes: str
    input_dtypes: str

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclasses.dataclass
class DeviceActivity:
    kind: int
    task_name: str
    external_id: int  # the launching op's External id; 0 if launched outside any op
    launch_ns: int
    start_ns: int
    end_ns: int
    device: int
    stream: int
    bytes: int
    memcpy_kind: int
    launch_thread: int
    correlation: int = 0  # unique per activity, assigned in launch order

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def name(self) -> str:
        if self.kind == _MEMCPY:
            return f"Memcpy {_MEMCPY_NAMES.get(self.memcpy_kind, '?')}"
        if self.kind == _MEMSET:
            return "Memset"
        return self.task_name

    @property
    def type(self) -> str:
        """The OP Type of the CSV tables."""
        return {_MEMCPY: "MEMCPY_ASYNC", _MEMSET: "MEMSET_ASYNC"}.get(self.kind, self.task_name)

    @property
    def core_type(self) -> str:
        return "AI_CORE" if self.kind == _KERNEL else "DMA"


@dataclasses.dataclass
class MemoryEvent:
    ts_ns: int
    ptr: int
    delta_bytes: int
    device: int
    allocated_bytes: int
    reserved_bytes: int
    thread: int


def us(ns: int) -> str:
    """Integer nanoseconds as microseconds with three decimals, exactly."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


class _Micros(float):
    """A time for the JSON writer: printed exactly from integer ns (a float would round)."""

    def __new__(cls, ns: int) -> "_Micros":
        obj = super().__new__(cls, ns / 1000)
        obj.ns = ns
        return obj


def _dump_json(value: Any) -> str:
    if isinstance(value, _Micros):
        return us(value.ns)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_dump_json(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dump_json(v) for v in value) + "]"
    return json.dumps(value)


class ProfileResult:
    """The records of one window (the raw dict of torch_npu._C._npu_profiler_stop)."""

    def __init__(self, raw: dict, *, host: bool, device: bool, memory: bool,
                 steps: list[int], scheduled: bool, process: dict | None = None,
                 experimental: dict | None = None) -> None:
        # Unix time of CLOCK_MONOTONIC's zero, measured now (good to a few microseconds); a
        # result loaded for offline analysis brings the recording process's own (`process`).
        process = process or {"epoch_offset_ns": time.time_ns() - time.monotonic_ns(),
                              "pid": os.getpid(),
                              "main_thread": threading.main_thread().native_id}
        self.epoch_offset_ns = process["epoch_offset_ns"]
        self.pid = process["pid"]
        self.main_thread = process["main_thread"]
        self.raw = raw
        # torch_npu.profiler._ExperimentalConfig's fields (to_dict), None when none was given.
        self.experimental = experimental
        self.show_host = host
        # ProfilerLevel.Level_none records no device tasks.
        self.show_device = device and (experimental or {}).get("_profiler_level") != "Level_none"
        self.show_memory = memory
        self.scheduled = scheduled
        self.steps = steps
        self.dropped_records = int(raw.get("dropped", 0))
        all_ops = [HostOp(*t) for t in raw["ops"]]
        self.step_spans = [op for op in all_ops
                           if op.user_scope and op.name.startswith("ProfilerStep#")]
        self.host_ops = sorted(all_ops, key=lambda op: (op.start_ns, -op.end_ns))
        self.activities = sorted((DeviceActivity(*t) for t in raw["activities"]),
                                 key=lambda a: a.launch_ns)
        for i, activity in enumerate(self.activities, start=1):
            activity.correlation = i
        self.activities.sort(key=lambda a: (a.device, a.stream, a.start_ns))
        self.memory_events = [MemoryEvent(*t) for t in raw["memory"]]
        self._ops_by_id = {op.external_id: op for op in all_ops if op.external_id}

    # ---- lookups ----------------------------------------------------------------------------

    def op_of(self, activity: DeviceActivity) -> HostOp | None:
        """The host op that launched `activity` (the innermost one), if recorded."""
        return self._ops_by_id.get(activity.external_id)

    def step_of(self, activity: DeviceActivity) -> int | None:
        for span in self.step_spans:
            if span.start_ns <= activity.launch_ns <= span.end_ns:
                return int(span.name.split("#", 1)[1])
        return None

    def epoch_us(self, ns: int) -> str:
        return us(ns + self.epoch_offset_ns)

    # ---- the Chrome trace -------------------------------------------------------------------

    def trace_events(self) -> list[dict]:
        events: list[dict] = []
        off = self.epoch_offset_ns

        def ts(ns: int) -> _Micros:
            return _Micros(ns + off)

        host_threads: set[int] = set()
        if self.show_host:
            events.append({"ph": "M", "name": "process_name", "pid": self.pid,
                           "args": {"name": f"Python {self.pid} (host)"}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": self.pid,
                           "args": {"sort_index": 0}})
            for op in self.host_ops:
                host_threads.add(op.thread)
                args: dict[str, Any] = {}
                if op.external_id:
                    args["External id"] = op.external_id
                if op.input_shapes:
                    args["Input Dims"] = op.input_shapes
                    args["Input type"] = op.input_dtypes
                events.append({"ph": "X", "cat": "user_annotation" if op.user_scope else "cpu_op",
                               "name": op.name, "pid": self.pid, "tid": op.thread,
                               "ts": ts(op.start_ns), "dur": _Micros(op.dur_ns), "args": args})
        if self.show_device:
            streams = sorted({(a.device, a.stream) for a in self.activities})
            for device in sorted({d for d, _ in streams}):
                events.append({"ph": "M", "name": "process_name", "pid": device,
                               "args": {"name": f"NPU {device} (Ascend Hardware)"}})
                events.append({"ph": "M", "name": "process_sort_index", "pid": device,
                               "args": {"sort_index": 1 + device}})
            for device, stream in streams:
                events.append({"ph": "M", "name": "thread_name", "pid": device, "tid": stream,
                               "args": {"name": f"Stream {stream}"}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": device,
                               "tid": stream, "args": {"sort_index": stream}})
            for a in self.activities:
                cat = {_MEMCPY: "gpu_memcpy", _MEMSET: "gpu_memset"}.get(a.kind, "kernel")
                args = {"device": a.device, "stream": a.stream, "correlation": a.correlation,
                        "External id": a.external_id, "Launch Time(us)": self.epoch_us(a.launch_ns)}
                if a.kind != _KERNEL:
                    args["bytes"] = a.bytes
                events.append({"ph": "X", "cat": cat, "name": a.name, "pid": a.device,
                               "tid": a.stream, "ts": ts(a.start_ns), "dur": _Micros(a.dur_ns),
                               "args": args})
                if self.show_host and a.external_id and a.external_id in self._ops_by_id:
                    host_threads.add(a.launch_thread)
                    events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": a.correlation,
                                   "pid": self.pid, "tid": a.launch_thread,
                                   "ts": ts(a.launch_ns)})
                    events.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g",
                                   "id": a.correlation, "pid": a.device, "tid": a.stream,
                                   "ts": ts(a.start_ns)})
        if self.show_memory:
            for m in self.memory_events:
                host_threads.add(m.thread)
                events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event",
                               "name": "[memory]", "pid": self.pid, "tid": m.thread,
                               "ts": ts(m.ts_ns),
                               "args": {"Device Type": "npu", "Device Id": m.device,
                                        "Addr": m.ptr, "Bytes": m.delta_bytes,
                                        "Total Allocated": m.allocated_bytes,
                                        "Total Reserved": m.reserved_bytes}})
                events.append({"ph": "C", "name": f"NPU {m.device} memory", "pid": self.pid,
                               "ts": ts(m.ts_ns),
                               "args": {"Allocated (MB)": m.allocated_bytes / 2**20,
                                        "Reserved (MB)": m.reserved_bytes / 2**20}})
        for thread in sorted(host_threads):
            label = "main thread" if thread == self.main_thread else "thread"
            events.append({"ph": "M", "name": "thread_name", "pid": self.pid, "tid": thread,
                           "args": {"name": f"{label} {thread}"}})
        return events

    def write_trace(self, path: str) -> None:
        events = self.trace_events()
        with open(path, "w") as f:
            f.write("[\n")
            f.write(",\n".join(_dump_json(e) for e in events))
            f.write("\n]\n")

    # ---- the CSV tables ---------------------------------------------------------------------

    def kernel_rows(self) -> list[dict]:
        rows = []
        previous_end: dict[tuple[int, int], int] = {}
        task_ids: dict[tuple[int, int], int] = {}
        for a in sorted(self.activities, key=lambda a: a.start_ns):  # per stream, in order too
            key = (a.device, a.stream)
            op = self.op_of(a)
            wait_ns = max(0, a.start_ns - previous_end[key]) if key in previous_end else 0
            previous_end[key] = a.end_ns
            task_ids[key] = task_ids.get(key, 0) + 1
            row = {}
            if self.scheduled:
                step = self.step_of(a)
                row["Step Id"] = "" if step is None else step
            row.update({
                "Device_id": a.device, "Stream ID": a.stream, "Task ID": task_ids[key],
                "Name": a.name, "Type": a.type, "Accelerator Core": a.core_type,
                "Start Time(us)": self.epoch_us(a.start_ns), "Duration(us)": us(a.dur_ns),
                "Wait Time(us)": us(wait_ns),
                "Input Shapes": op.input_shapes if op else "",
                "Input Data Types": op.input_dtypes if op else "",
            })
            rows.append(row)
        return rows

    def operator_rows(self) -> list[dict]:
        ops = [op for op in self.host_ops if not op.user_scope]
        device_self: dict[int, int] = {}
        aicore_self: dict[int, int] = {}
        for a in self.activities:
            device_self[a.external_id] = device_self.get(a.external_id, 0) + a.dur_ns
            if a.kind == _KERNEL:
                aicore_self[a.external_id] = aicore_self.get(a.external_id, 0) + a.dur_ns
        # Nesting per thread: an op's children are the ops inside its time range on its thread.
        children: dict[int, list[HostOp]] = {}
        by_thread: dict[int, list[HostOp]] = {}
        for op in ops:
            by_thread.setdefault(op.thread, []).append(op)
        for thread_ops in by_thread.values():
            stack: list[HostOp] = []
            for op in thread_ops:  # sorted by (start, -end)
                while stack and stack[-1].end_ns < op.end_ns:
                    stack.pop()
                if stack:
                    children.setdefault(stack[-1].external_id, []).append(op)
                stack.append(op)
        totals: dict[int, tuple[int, int]] = {}

        def total(op: HostOp) -> tuple[int, int]:
            if op.external_id not in totals:
                dev = device_self.get(op.external_id, 0)
                aic = aicore_self.get(op.external_id, 0)
                for child in children.get(op.external_id, []):
                    d, c = total(child)
                    dev += d
                    aic += c
                totals[op.external_id] = (dev, aic)
            return totals[op.external_id]

        rows = []
        for op in ops:
            host_children = sum(c.dur_ns for c in children.get(op.external_id, []))
            dev_total, aic_total = total(op)
            rows.append({
                "Name": op.name, "Input Shapes": op.input_shapes, "Call Stack": "",
                "Host Self Duration(us)": us(op.dur_ns - host_children),
                "Host Total Duration(us)": us(op.dur_ns),
                "Device Self Duration(us)": us(device_self.get(op.external_id, 0)),
                "Device Total Duration(us)": us(dev_total),
                "Device Self Duration With AICore(us)": us(aicore_self.get(op.external_id, 0)),
                "Device Total Duration With AICore(us)": us(aic_total),
            })
        return rows

    def op_statistic_rows(self) -> list[dict]:
        groups: dict[tuple[int, str, str], list[int]] = {}
        for a in self.activities:
            groups.setdefault((a.device, a.type, a.core_type), []).append(a.dur_ns)
        grand = sum(sum(d) for d in groups.values()) or 1
        rows = []
        for (device, op_type, core), durations in groups.items():
            total_ns = sum(durations)
            rows.append({
                "Device_id": device, "OP Type": op_type, "Core Type": core,
                "Count": len(durations), "Total Time(us)": us(total_ns),
                "Min Time(us)": us(min(durations)),
                "Avg Time(us)": us(total_ns // len(durations)),
                "Max Time(us)": us(max(durations)),
                "Ratio(%)": f"{100.0 * total_ns / grand:.2f}",
                "_total_ns": total_ns,
            })
        rows.sort(key=lambda r: -r["_total_ns"])
        for r in rows:
            del r["_total_ns"]
        return rows

    def memory_rows(self) -> list[dict]:
        return [{"Component": "PTA", "Timestamp(us)": self.epoch_us(m.ts_ns),
                 "Total Allocated(MB)": f"{m.allocated_bytes / 2**20:.4f}",
                 "Total Reserved(MB)": f"{m.reserved_bytes / 2**20:.4f}",
                 "Device Type": f"NPU:{m.device}"} for m in self.memory_events]

    @staticmethod
    def _write_csv(path: str, rows: Iterable[dict], header: list[str]) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)

    # ---- raw data, for offline analysis (torch_npu.profiler.analyse) ----------------------

    RAW_FILE = os.path.join("FRAMEWORK", "simnpu_records.json")

    def write_raw(self, run_dir: str) -> None:
        """The window's records and everything needed to analyse them in another process."""
        os.makedirs(os.path.join(run_dir, "FRAMEWORK"), exist_ok=True)
        saved = {"format": 1, "raw": self.raw,
                 "options": {"host": self.show_host, "device": self.show_device,
                             "memory": self.show_memory, "steps": self.steps,
                             "scheduled": self.scheduled, "experimental": self.experimental},
                 "process": {"epoch_offset_ns": self.epoch_offset_ns, "pid": self.pid,
                             "main_thread": self.main_thread}}
        with open(os.path.join(run_dir, self.RAW_FILE), "w") as f:
            json.dump(saved, f)

    @classmethod
    def read_raw(cls, run_dir: str) -> "ProfileResult":
        path = os.path.join(run_dir, cls.RAW_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"torch_npu.profiler.analyse: {run_dir} has no recorded data ({cls.RAW_FILE}); "
                "pass a folder written by tensorboard_trace_handler (a *_ascend_pt folder, or "
                "the folder that holds them)")
        with open(path) as f:
            saved = json.load(f)
        if saved.get("format") != 1:
            raise ValueError(f"torch_npu.profiler.analyse: {path} has format "
                             f"{saved.get('format')!r}; this torch_npu reads format 1")
        raw = {k: [tuple(r) for r in v] if isinstance(v, list) else v
               for k, v in saved["raw"].items()}
        return cls(raw, process=saved["process"], **saved["options"])

    def write_output(self, run_dir: str) -> None:
        out = os.path.join(run_dir, "ASCEND_PROFILER_OUTPUT")
        os.makedirs(out, exist_ok=True)
        experimental = self.experimental or {}
        tables = self._tables()
        if experimental.get("_export_type") == "db":
            self._write_db(os.path.join(out, "ascend_pytorch_profiler.db"), tables)
        else:
            self.write_trace(os.path.join(out, "trace_view.json"))
            for name, (rows, header) in tables.items():
                self._write_csv(os.path.join(out, f"{name}.csv"), rows, header)
        info = {"simnpu": True, "pid": self.pid, "steps": self.steps,
                "activities": [n for n, on in (("CPU", self.show_host), ("NPU", self.show_device))
                               if on],
                "profile_memory": self.show_memory, "dropped_device_records": self.dropped_records}
        if self.experimental is not None:
            info["config"] = {"experimental_config": self.experimental}
        with open(os.path.join(run_dir, "profiler_info.json"), "w") as f:
            json.dump(info, f, indent=2)
        # data_simplification (an explicit experimental_config's, True by default): the raw
        # records go once the output is written, as torch_npu deletes its intermediate data.
        if experimental.get("_data_simplification"):
            shutil.rmtree(os.path.join(run_dir, "FRAMEWORK"), ignore_errors=True)

    def _tables(self) -> dict[str, tuple[list[dict], list[str]]]:
        """The tables of ASCEND_PROFILER_OUTPUT by file name: (rows, header)."""
        tables = {}
        kernel_header = (["Step Id"] if self.scheduled else []) + [
            "Device_id", "Stream ID", "Task ID", "Name", "Type", "Accelerator Core",
            "Start Time(us)", "Duration(us)", "Wait Time(us)", "Input Shapes",
            "Input Data Types"]
        if self.show_device:
            tables["kernel_details"] = (self.kernel_rows(), kernel_header)
            tables["op_statistic"] = (
                self.op_statistic_rows(),
                ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)",
                 "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"])
        if self.show_host:
            tables["operator_details"] = (
                self.operator_rows(),
                ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)",
                 "Host Total Duration(us)", "Device Self Duration(us)",
                 "Device Total Duration(us)", "Device Self Duration With AICore(us)",
                 "Device Total Duration With AICore(us)"])
        if self.show_memory:
            tables["memory_record"] = (
                self.memory_rows(),
                ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)",
                 "Device Type"])
        return tables

    @staticmethod
    def _write_db(path: str, tables: dict[str, tuple[list[dict], list[str]]]) -> None:
        """ExportType.Db: the tables of the text export in one SQLite file, a table each
        (upper-case names, the CSV headers as columns). torch_npu's database has CANN's own
        schema; this one carries SimNPU's tables, not that schema."""
        import sqlite3

        if os.path.exists(path):
            os.remove(path)
        with sqlite3.connect(path) as db:
            for name, (rows, header) in tables.items():
                columns = ", ".join(f'"{c}"' for c in header)
                db.execute(f'CREATE TABLE "{name.upper()}" ({columns})')
                db.executemany(
                    f'INSERT INTO "{name.upper()}" VALUES ({", ".join("?" * len(header))})',
                    [tuple(str(r.get(c, "")) for c in header) for r in rows])
        db.close()

    # ---- the PROFILING_MODE table -----------------------------------------------------------

    def device_time_table(self, row_limit: int | None = None) -> str:
        rows = self.op_statistic_rows()
        if row_limit is not None:
            rows = rows[:row_limit]
        header = ("Device", "OP Type", "Core", "Calls", "Total(us)", "Avg(us)", "Min(us)",
                  "Max(us)", "Ratio(%)")
        body = [(str(r["Device_id"]), r["OP Type"], r["Core Type"], str(r["Count"]),
                 r["Total Time(us)"], r["Avg Time(us)"], r["Min Time(us)"], r["Max Time(us)"],
                 r["Ratio(%)"]) for r in rows]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
                  for i, h in enumerate(header)]

        def line(cells: Iterable[str]) -> str:
            return "  ".join(c.ljust(w) if i in (1, 2) else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths)))

        total_ns = sum(a.dur_ns for a in self.activities)
        out = [line(header), "  ".join("-" * w for w in widths)]
        out += [line(b) for b in body]
        out.append(f"{len(self.activities)} device tasks, {us(total_ns)} us of device time")
        if self.dropped_records:
            out.append(f"({self.dropped_records} records lost: the runtime's buffer was full)")
        return "\n".join(out)
