"""torch_npu.profiler: the trace and CSV files, the schedule, PROFILING_MODE, torch.profiler.

Each test profiles a few ops, opens the files the handler wrote and checks them against what
the program did (which kernels, which streams, which steps) and against each other.
"""

import csv
import glob
import json
import os
from decimal import Decimal

import pytest
import torch

import torch_npu
from torch_npu.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

BOTH = [ProfilerActivity.CPU, ProfilerActivity.NPU]
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def run_dirs(root):
    return sorted(glob.glob(os.path.join(str(root), "*_ascend_pt")))


def load(run_dir):
    out = os.path.join(run_dir, "ASCEND_PROFILER_OUTPUT")
    with open(os.path.join(out, "trace_view.json")) as f:
        events = json.load(f)
    tables = {}
    for name in ("kernel_details", "operator_details", "op_statistic", "memory_record"):
        path = os.path.join(out, f"{name}.csv")
        if os.path.exists(path):
            with open(path, newline="") as f:
                tables[name] = list(csv.DictReader(f))
    return events, tables


def profile_once(tmp_path, body, **kwargs):
    with profile(activities=kwargs.pop("activities", BOTH),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path)), **kwargs):
        body()
        torch.npu.synchronize()
    (run_dir,) = run_dirs(tmp_path)
    return load(run_dir)


def dec(text):
    """Times as written (exact decimal microseconds), for exact comparisons."""
    return Decimal(str(text))


def device_events(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]


def host_ops(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def check_linked(events, kernel):
    """The kernel's host op, with the checks every linked kernel must pass."""
    ops = {e["args"]["External id"]: e for e in host_ops(events)}
    op = ops[kernel["args"]["External id"]]
    # Launched asynchronously: the kernel runs no earlier than its op started.
    assert dec(kernel["ts"]) >= dec(op["ts"])
    flows = [e for e in events if e.get("cat") == "ac2g" and e["id"] == kernel["args"]["correlation"]]
    assert sorted(f["ph"] for f in flows) == ["f", "s"]
    start = next(f for f in flows if f["ph"] == "s")
    finish = next(f for f in flows if f["ph"] == "f")
    # The arrow leaves from inside the op's slice, on its thread, and lands on the kernel.
    assert (start["pid"], start["tid"]) == (op["pid"], op["tid"])
    assert dec(op["ts"]) <= dec(start["ts"]) <= dec(op["ts"]) + dec(op["dur"])
    assert (finish["pid"], finish["tid"], dec(finish["ts"])) == (
        kernel["pid"], kernel["tid"], dec(kernel["ts"]))
    return op


def test_kernel_starts_after_its_host_op_and_is_linked_by_a_flow(tmp_path):
    x = torch.empty(256, 256, device="npu")
    torch.npu.synchronize()

    def body():
        torch_npu._C._npu_sleep(20)  # a busy stream: the kernel runs well after its launch
        x.fill_(3.0)

    events, _ = profile_once(tmp_path, body)
    (fill,) = [e for e in device_events(events) if e["name"] == "fill_"]
    op = check_linked(events, fill)
    assert op["name"] == "aten::fill_"
    assert dec(fill["ts"]) >= dec(op["ts"]) + dec(op["dur"])  # after the op even returned
    assert torch.equal(x.cpu(), torch.full((256, 256), 3.0))


def test_matmul_device_work_is_linked_to_the_matmul(tmp_path):
    a = torch.randn(64, 32, device="npu")
    b = torch.randn(32, 16, device="npu")
    torch.npu.synchronize()
    result = {}
    events, _ = profile_once(tmp_path, lambda: result.setdefault("c", a @ b))
    torch.testing.assert_close(result["c"].cpu(), a.cpu() @ b.cpu())
    # The outermost aten::mm (a fallback dispatches the CPU one inside it).
    mm = max((e for e in host_ops(events) if e["name"] == "aten::mm"), key=lambda e: dec(e["dur"]))
    mm_end = dec(mm["ts"]) + dec(mm["dur"])
    inside = []
    for kernel in device_events(events):
        op = check_linked(events, kernel)
        if dec(mm["ts"]) <= dec(op["ts"]) and dec(op["ts"]) + dec(op["dur"]) <= mm_end:
            inside.append(kernel)
    # Whatever runs aten::mm on the device (its GEMM kernel, or the CPU fallback's copies in a
    # build without one) is launched inside it and starts no earlier than it.
    assert inside, "no device work was launched by aten::mm"
    assert all(dec(k["ts"]) >= dec(mm["ts"]) for k in inside)
    mm_kernels = [k for k in inside if k["cat"] == "kernel" and "mm" in k["name"]]
    if "aten::mm" in torch_npu._C._fallback_ops() or "aten::mm.out" in torch_npu._C._fallback_ops():
        assert not mm_kernels  # the fallback runs on the host: only copies are device work
    else:
        assert mm_kernels, "aten::mm has an npu kernel but none appears in the trace"


def test_kernels_are_on_one_row_per_stream(tmp_path):
    x = torch.empty(128, device="npu")
    y = torch.empty(128, device="npu")
    side = torch.npu.Stream()
    torch.npu.synchronize()

    def body():
        x.fill_(1.0)
        with torch.npu.stream(side):
            y.fill_(2.0)

    events, tables = profile_once(tmp_path, body)
    fills = [e for e in device_events(events) if e["name"] == "fill_"]
    assert len(fills) == 2
    assert {e["pid"] for e in fills} == {0}
    assert len({e["tid"] for e in fills}) == 2
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert {rows[(0, e["tid"])] for e in fills} == {f"Stream {e['tid']}" for e in fills}
    assert {r["Stream ID"] for r in tables["kernel_details"] if r["Name"] == "fill_"} == {
        str(e["tid"]) for e in fills}


def test_copies_appear_with_direction_and_bytes(tmp_path):
    host = torch.arange(1000, dtype=torch.float32)
    result = {}

    def body():
        d = host.to("npu")
        result["back"] = d.cpu()

    events, tables = profile_once(tmp_path, body)
    copies = [e for e in device_events(events) if e["cat"] == "gpu_memcpy"]
    by_name = {e["name"]: e for e in copies}
    assert "Memcpy HtoD" in by_name and "Memcpy DtoH" in by_name
    assert by_name["Memcpy HtoD"]["args"]["bytes"] == 4000
    assert by_name["Memcpy DtoH"]["args"]["bytes"] == 4000
    assert dec(by_name["Memcpy DtoH"]["ts"]) >= dec(by_name["Memcpy HtoD"]["ts"])
    assert {r["Type"] for r in tables["kernel_details"]} >= {"MEMCPY_ASYNC"}
    assert torch.equal(result["back"], host)


def test_csv_totals_agree_with_the_trace(tmp_path):
    x = torch.empty(4096, device="npu")

    def body():
        for value in range(1, 6):  # not 0: zero fills are memsets
            x.fill_(float(value))
        x.cpu()
        torch.ones(10).npu()

    events, tables = profile_once(tmp_path, body, record_shapes=True)
    dev = device_events(events)
    trace_total = sum(dec(e["dur"]) for e in dev)
    assert len(tables["kernel_details"]) == len(dev)
    assert sum(dec(r["Duration(us)"]) for r in tables["kernel_details"]) == trace_total
    stats = {r["OP Type"]: r for r in tables["op_statistic"]}
    assert sum(dec(r["Total Time(us)"]) for r in stats.values()) == trace_total
    assert int(stats["fill_"]["Count"]) == 5
    assert dec(stats["fill_"]["Total Time(us)"]) == sum(
        dec(e["dur"]) for e in dev if e["name"] == "fill_")
    # Every device task is some op's self time: the op details add up to the trace too.
    linked = sum(dec(e["dur"]) for e in dev if e["args"]["External id"])
    assert sum(dec(r["Device Self Duration(us)"]) for r in tables["operator_details"]) == linked
    # aten::fill_ nests (the dispatcher records it twice); the innermost one owns the kernel.
    fill_rows = [r for r in tables["operator_details"]
                 if r["Name"] == "aten::fill_" and dec(r["Device Self Duration(us)"]) > 0]
    assert len(fill_rows) == 5 and all(r["Input Shapes"].startswith("[[4096]") for r in fill_rows)
    assert sum(dec(r["Ratio(%)"]) for r in stats.values()) == pytest.approx(100, abs=0.05)


def test_schedule_records_only_the_active_steps(tmp_path):
    x = torch.empty(64, device="npu")
    with profile(activities=BOTH, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for step in range(6):
            x.fill_(float(step))  # one fill_ kernel per step
            prof.step()
    (run_dir,) = run_dirs(tmp_path)  # one window: repeat=1
    events, tables = load(run_dir)
    steps = sorted(e["name"] for e in events if e.get("cat") == "user_annotation")
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert len([e for e in device_events(events) if e["name"] == "fill_"]) == 2
    assert sorted(r["Step Id"] for r in tables["kernel_details"]) == ["2", "3"]


def test_two_windows_with_repeat(tmp_path):
    x = torch.empty(8, device="npu")
    with profile(activities=BOTH, schedule=schedule(wait=0, warmup=0, active=1, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(4):
            x.fill_(1.0)
            prof.step()
    dirs = run_dirs(tmp_path)
    assert len(dirs) == 2
    for run_dir in dirs:
        events, _ = load(run_dir)
        assert len([e for e in device_events(events) if e["name"] == "fill_"]) == 1


def test_memory_events(tmp_path):
    def body():
        t = torch.empty(1 << 20, dtype=torch.uint8, device="npu")
        del t

    events, tables = profile_once(tmp_path, body, profile_memory=True)
    mem = [e for e in events if e.get("name") == "[memory]"]
    sizes = [e["args"]["Bytes"] for e in mem]
    assert any(s >= 1 << 20 for s in sizes) and any(s <= -(1 << 20) for s in sizes)
    assert len(tables["memory_record"]) == len(mem)


def test_npu_only_and_cpu_only(tmp_path):
    x = torch.empty(8, device="npu")
    events, tables = profile_once(tmp_path / "npu", lambda: x.fill_(1.0),
                                  activities=[ProfilerActivity.NPU])
    assert not host_ops(events) and device_events(events)
    assert "operator_details" not in tables
    events, tables = profile_once(tmp_path / "cpu", lambda: x.fill_(1.0),
                                  activities=[torch.profiler.ProfilerActivity.CPU])
    assert host_ops(events) and not device_events(events)
    assert "kernel_details" not in tables


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown activity 'GPU'"):
        profile(activities=["GPU"])
    with pytest.raises(ValueError, match="wait must be an integer >= 0"):
        schedule(wait=-1, warmup=0, active=1)
    with pytest.raises(ValueError, match="active must be an integer >= 1"):
        schedule(wait=0, warmup=0, active=0)
    with pytest.raises(TypeError, match="schedule must be a callable"):
        profile(schedule=3)
    with pytest.raises(NotImplementedError, match="with_stack=True is not supported"):
        profile(with_stack=True)
    with pytest.raises(TypeError, match="experimental_config must be a "
                                        "torch_npu.profiler._ExperimentalConfig"):
        profile(experimental_config=object())
    with pytest.raises(TypeError, match="returned 'record'"):
        with profile(schedule=lambda step: "record"):
            pass


def test_one_profiler_at_a_time():
    with profile(activities=BOTH):
        with pytest.raises(RuntimeError, match="already running"):
            with profile(activities=BOTH):
                pass
    with profile(activities=BOTH):  # and the first one released everything
        pass


@pytest.mark.skipif(not torch_npu._C._npu_profiler_has_kineto_plugin,
                    reason="torch was built without Kineto")
def test_torch_profiler_does_not_take_the_records_of_a_running_npu_profiler(tmp_path):
    x = torch.empty(8, device="npu")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with profile(activities=BOTH, on_trace_ready=tensorboard_trace_handler(str(tmp_path))):
        with torch.profiler.profile(activities=activities) as inner:
            x.fill_(1.0)
            torch.npu.synchronize()
    assert not [e for e in inner.events() if e.name == "fill_"]  # only aten::fill_, on the host
    (run_dir,) = run_dirs(tmp_path)
    events, _ = load(run_dir)
    assert [e["name"] for e in device_events(events)] == ["fill_"]


def test_profiling_mode_prints_a_table_at_exit(python):
    code = """
        import torch, torch_npu
        x = torch.empty(1024, device="npu")
        for i in range(1, 4):  # not 0: zero fills are memsets
            x.fill_(float(i))
        print("result", x.cpu()[0].item())
    """
    done = python(code, env={"PROFILING_MODE": "true"})
    assert done.returncode == 0, done.stderr
    assert "result 3.0" in done.stdout
    assert "SimNPU device time per op (PROFILING_MODE=true)" in done.stderr
    (fill_line,) = [line for line in done.stderr.splitlines() if " fill_ " in line]
    assert fill_line.split()[3] == "3"  # Calls
    assert "MEMCPY_ASYNC" in done.stderr
    off = python(code, env={"PROFILING_MODE": "false"})
    assert "device time per op" not in off.stderr
    bad = python(code, env={"TORCH_NPU_PROFILING_MODE": "maybe"})
    assert "ignoring TORCH_NPU_PROFILING_MODE='maybe'" in bad.stderr


def test_profiling_mode_refuses_a_second_profiler(python):
    done = python("""
        import torch, torch_npu
        try:
            with torch_npu.profiler.profile():
                pass
        except RuntimeError as e:
            print("refused:", e)
    """, env={"TORCH_NPU_PROFILING_MODE": "1"})
    assert "refused: torch_npu.profiler.profile: TORCH_NPU_PROFILING_MODE=true" in done.stdout


@pytest.mark.skipif(not torch_npu._C._npu_profiler_has_kineto_plugin,
                    reason="torch was built without Kineto")
def test_torch_profiler_privateuse1_shows_npu_kernels(tmp_path):
    x = torch.empty(4096, device="npu")
    torch.npu.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=activities) as prof:
        torch_npu._C._npu_sleep(10)
        x.fill_(5.0)
        torch.npu.synchronize()
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    (fill,) = [e for e in events if e.get("cat") == "kernel" and e["name"] == "fill_"]
    launches = [e for e in events if e.get("name") == "npuLaunchTask"
                and str(e["args"]["External id"]) == fill["args"]["External id"]]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::fill_"
           and dec(e["ts"]) <= dec(launches[0]["ts"]) <= dec(e["ts"]) + dec(e["dur"])]
    assert ops and dec(fill["ts"]) >= dec(ops[0]["ts"])
    flow_ids = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"
                and e["ts"] == fill["ts"]}
    assert flow_ids & {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"
                       and e["ts"] == launches[0]["ts"]}
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::fill_"].device_time_total > 0


def test_offline_analysis_writes_what_the_online_handler_writes(tmp_path):
    """tensorboard_trace_handler(analyse_flag=False) + torch_npu.profiler.analyse in another
    process gives the same files as analysing at trace time."""
    import subprocess
    import sys

    online, offline = tmp_path / "online", tmp_path / "offline"
    for where, flag in ((online, True), (offline, False)):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.NPU], profile_memory=True,
                     on_trace_ready=tensorboard_trace_handler(str(where), worker_name="w",
                                                              analyse_flag=flag)):
            x = torch.randn(64, 64, device="npu")
            (x @ x).sum().item()
    (raw_dir,) = run_dirs(offline)
    assert not os.path.exists(os.path.join(raw_dir, "ASCEND_PROFILER_OUTPUT"))
    r = subprocess.run([sys.executable, "-c", "import sys, torch_npu; "
                        "print(torch_npu.profiler.profiler.analyse(sys.argv[1]))", str(offline)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert raw_dir in r.stdout
    events, tables = load(raw_dir)
    assert "aten::mm" in {e.get("name") for e in events}
    assert tables["kernel_details"] and tables["operator_details"] and tables["memory_record"]
    # the same process's records analysed twice give identical files
    (online_dir,) = run_dirs(online)
    before = open(os.path.join(online_dir, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")).read()
    assert torch_npu.profiler.analyse(online_dir) == [online_dir]
    after = open(os.path.join(online_dir, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")).read()
    assert after == before


def test_offline_analysis_names_a_folder_without_records(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no \\*_ascend_pt folder"):
        torch_npu.profiler.analyse(str(tmp_path))
    (tmp_path / "x_ascend_pt").mkdir()
    with pytest.raises(FileNotFoundError, match="has no recorded data"):
        torch_npu.profiler.analyse(str(tmp_path))
    with pytest.raises(ValueError, match="max_process_number must be a positive integer"):
        torch_npu.profiler.analyse(str(tmp_path), max_process_number=0)


# ---- torch_npu.profiler._ExperimentalConfig ------------------------------------------------

def test_experimental_config_has_torch_npus_values_and_defaults(capsys):
    from torch_npu.profiler import AiCMetrics, ExportType, ProfilerLevel, _ExperimentalConfig

    assert (ProfilerLevel.Level0, ProfilerLevel.Level_none) == ("Level0", "Level_none")
    assert AiCMetrics.PipeUtilization == "ACL_AICORE_PIPE_UTILIZATION"
    assert (ExportType.Text, ExportType.Db) == ("text", "db")
    c = _ExperimentalConfig()
    assert (c.profiler_level, c.aic_metrics, c.export_type, c.data_simplification) == (
        "Level0", "ACL_AICORE_NONE", "text", True)
    # Level1 collects the pipe utilization unless told otherwise, as torch_npu.
    assert _ExperimentalConfig(profiler_level=ProfilerLevel.Level1).aic_metrics == \
        AiCMetrics.PipeUtilization
    assert capsys.readouterr().out == ""


def test_experimental_config_resets_bad_values_with_torch_npus_warning(capsys):
    from torch_npu.profiler import AiCMetrics, ProfilerLevel, _ExperimentalConfig

    c = _ExperimentalConfig(profiler_level="Level9", aic_metrics="bogus", l2_cache="yes",
                            export_type="xml", op_attr=True, gc_detect_threshold=-1)
    assert (c.profiler_level, c.aic_metrics, c.export_type) == ("Level0", "ACL_AICORE_NONE",
                                                                "text")
    assert c.to_dict()["_l2_cache"] is False and c.to_dict()["_op_attr"] is False
    assert c.gc_detect_threshold is None
    out = capsys.readouterr().out
    for line in ("Invalid parameter profiler_level, reset it to ProfilerLevel.Level0.",
                 "Invalid parameter aic_metrics, reset it to default.",
                 "Invalid parameter l2_cache, which must be of boolean type, reset it to False.",
                 "Invalid parameter type, reset it to text.",
                 "op_attr switch is invalid with export type set as text.",
                 "Parameter gc_detect_threshold can not be negetive, reset it to default."):
        assert f"[WARNING] [{os.getpid()}] profiler.py: {line}" in out, line
    # Metrics at Level0 are dropped with torch_npu's advice.
    c = _ExperimentalConfig(aic_metrics=AiCMetrics.Memory)
    assert c.aic_metrics == AiCMetrics.AiCoreNone
    assert "Please use level1 or level2" in capsys.readouterr().out
    assert _ExperimentalConfig(profiler_level=ProfilerLevel.Level2,
                               aic_metrics=AiCMetrics.Memory).aic_metrics == AiCMetrics.Memory


def test_experimental_config_is_in_profiler_info_and_simplifies_data(tmp_path):
    from torch_npu.profiler import ProfilerLevel, _ExperimentalConfig

    x = torch.ones(64, device="npu")
    config = _ExperimentalConfig(profiler_level=ProfilerLevel.Level1)
    with pytest.warns(UserWarning, match="aic_metrics, which SimNPU does not simulate"):
        prof = profile(activities=BOTH, experimental_config=config,
                       on_trace_ready=tensorboard_trace_handler(str(tmp_path)))
    with prof:
        (x * 2).sum()
        torch.npu.synchronize()
    (run_dir,) = run_dirs(tmp_path)
    with open(os.path.join(run_dir, "profiler_info.json")) as f:
        info = json.load(f)
    assert info["config"]["experimental_config"]["_profiler_level"] == "Level1"
    assert info["config"]["experimental_config"]["_aic_metrics"] == "ACL_AICORE_PIPE_UTILIZATION"
    events, tables = load(run_dir)
    assert device_events(events) and tables["kernel_details"]
    # data_simplification (True by default): the raw records are gone once analysed.
    assert not os.path.exists(os.path.join(run_dir, "FRAMEWORK"))

    kept = tmp_path / "kept"
    _, _ = profile_once(kept, lambda: (x * 2).sum(),
                        experimental_config=_ExperimentalConfig(data_simplification=False))
    assert os.path.isdir(os.path.join(run_dirs(kept)[0], "FRAMEWORK"))


def test_level_none_records_no_device_tasks(tmp_path):
    from torch_npu.profiler import ProfilerLevel, _ExperimentalConfig

    x = torch.ones(64, device="npu")
    events, tables = profile_once(
        tmp_path, lambda: (x * 2).sum(),
        experimental_config=_ExperimentalConfig(profiler_level=ProfilerLevel.Level_none))
    assert host_ops(events) and not device_events(events)
    assert "kernel_details" not in tables and "operator_details" in tables


def test_export_type_db_writes_the_tables_into_sqlite(tmp_path):
    import sqlite3

    from torch_npu.profiler import ExportType, _ExperimentalConfig

    x = torch.ones(64, device="npu")
    with profile(activities=BOTH, on_trace_ready=tensorboard_trace_handler(str(tmp_path)),
                 experimental_config=_ExperimentalConfig(export_type=ExportType.Db)):
        (x * 2).sum()
        torch.npu.synchronize()
    (run_dir,) = run_dirs(tmp_path)
    out = os.path.join(run_dir, "ASCEND_PROFILER_OUTPUT")
    assert sorted(os.listdir(out)) == ["ascend_pytorch_profiler.db"]
    with sqlite3.connect(os.path.join(out, "ascend_pytorch_profiler.db")) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"KERNEL_DETAILS", "OPERATOR_DETAILS", "OP_STATISTIC"} <= names
        kernels = [r[0] for r in db.execute('SELECT "Name" FROM KERNEL_DETAILS')]
    db.close()
    assert any("mul" in k.lower() for k in kernels), kernels
