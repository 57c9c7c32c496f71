"""`python -m torch_npu.utils.projection --plot DIR` (docs/projection.md, "Pictures: --plot").

One projection of a small training script whose step holds a deliberately large tensor checks
the files, that the plotted memory peak is the allocator's own, that the tensor named first at
the peak is that tensor with the line that made it, and the time split's sums. The split from
device activities on the simulated clock (what the profiler gives once its activities carry
simulated times) is checked on activities built by hand."""
import json
import os
import pickle
import subprocess
import sys

import pytest
from matplotlib import image  # scripts/requirements-dev.txt

from torch_npu.profiler._result import DeviceActivity
from torch_npu.utils import _projection_plot as plot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRATCH = 512 * 2 ** 20
SCRIPT = f"""\
import torch, torch_npu
from torch_npu.testing.models import GPT, batches, loss_fn
torch.manual_seed(0)
model = GPT().npu()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for i, (x, y) in enumerate(batches("gpt", 4, batch=8, seed=1)):
    if i:  # from the second step on, so the run peaks in every later step
        scratch = torch.empty({SCRATCH}, dtype=torch.uint8, device="npu")
    loss = loss_fn("gpt", model(x.npu()), y.npu())
    loss.backward()
    opt.step()
    opt.zero_grad()
    scratch = None
"""
SCRATCH_LINE = 8


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 600, pixels.shape
    assert pixels.std() > 0.05, f"{path} is blank"


@pytest.fixture(scope="module")
def projected(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plot")
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env.pop("NPU_SIM_SHADOW", None)  # the tool turns it on itself
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "torch_npu.utils.projection", "--json", "--plot",
                        str(tmp / "pictures"), "--", str(script)],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), tmp / "pictures", script


def test_plot_writes_the_pictures_and_the_snapshot(projected):
    report, pictures, _ = projected
    names = {"hbm_rank0.png", "time_rank0.png", "memory_snapshot_rank0.pickle"}
    assert {os.path.basename(f) for f in report["plot"]["files"]} == names
    assert set(os.listdir(pictures)) == names
    assert_png(pictures / "hbm_rank0.png")
    assert_png(pictures / "time_rank0.png")
    with open(pictures / "memory_snapshot_rank0.pickle", "rb") as f:
        snapshot = pickle.load(f)
    assert set(snapshot) == {"segments", "device_traces"}
    # memory_viz's layout: the trace of device 0 has the scratch tensor's three allocations.
    scratch = [e for e in snapshot["device_traces"][0]
               if e["action"] == "alloc" and e["size"] == SCRATCH]
    assert len(scratch) == 3 and all(e["frames"] for e in scratch)
    assert any(seg["total_size"] >= SCRATCH for seg in snapshot["segments"])


def test_plotted_memory_peaks_at_the_allocators_peak_naming_the_big_tensor(projected):
    report, _, script = projected
    hbm = report["plot"]["hbm"]
    assert report["plot"]["step"] == report["steps"] == 4
    assert hbm["peak_allocated_bytes"] == report["peak_allocated_bytes"]
    assert hbm["peak_reserved_bytes"] == report["peak_reserved_bytes"]
    assert hbm["capacity_bytes"] == report["capacity_bytes"]
    assert 0 < hbm["peak_event"] <= hbm["events"]
    biggest = hbm["top_tensors"][0]
    assert biggest["bytes"] == SCRATCH
    assert biggest["frame"] == {"filename": str(script), "line": SCRATCH_LINE, "name": "<module>"}
    assert biggest["op"] == "aten::empty"
    assert all(t["bytes"] < SCRATCH for t in hbm["top_tensors"][1:])


def test_time_split_adds_up_to_the_projected_step(projected):
    report, _, _ = projected
    t = report["plot"]["time"]
    assert t["step_ns"] == round(report["step_seconds"][-1] * 1e9)
    # One stream: the step is its ops' modeled time plus its copies and memsets, and the waits
    # for the host's dispatch (this small model's ops are shorter than it: 4-5x measured).
    assert 0 < t["charged_ns"] <= t["step_ns"] <= 8 * t["charged_ns"]
    assert t["compute_ns"] == t["charged_ns"]
    if t["source"] == "cost_totals":
        assert t["compute_ns"] + t["not_compute_ns"] == t["step_ns"]
        assert "not on the simulated clock" in t["why"]
    else:
        assert t["source"] == "profiler"
        assert t["comm_overlapped_ns"] == t["comm_exposed_ns"] == 0  # no collective
        assert t["compute_ns"] + t["copy_only_ns"] + t["idle_ns"] == t["step_ns"]
    tops = [op["seconds"] for op in t["top_ops"]]
    assert tops == sorted(tops, reverse=True) and sum(tops) * 1e9 <= t["charged_ns"] + 10


OFFSET = 5_000_000  # the profiler's time of simulated time 0


def activity(kind, name, start, end, stream):
    return DeviceActivity(kind, name, 0, 0, start + OFFSET, end + OFFSET, 0, stream, 0, 0, 0)


def simulated_step():
    """40 ops of 20 us every 25 us on stream 1; all-reduces on stream 2 over [300, 700) and
    [900, 1300) us; a copy inside the second."""
    acts = [activity(0, "aten::mm", 25_000 * i, 25_000 * i + 20_000, 1) for i in range(40)]
    acts += [activity(0, "HcclAllReduce", 300_000, 700_000, 2),
             activity(0, "HcclAllReduce", 900_000, 1_300_000, 2),
             activity(1, "memcpy", 1_050_000, 1_100_000, 3),
             activity(0, "aten::add", 1_310_000, 1_320_000, 1)]  # the next step's
    return acts


def test_time_split_from_activities_on_the_simulated_clock(tmp_path):
    acts = simulated_step()
    charged = 40 * 20_000 + 10_000
    assert plot._simulated_offset(acts, 1_320_000, charged, 0) == (OFFSET, None)
    split = plot.activity_split(acts, OFFSET, 0, 1_300_000)
    # Stream 1 is busy 20 of every 25 us until 1 ms; the all-reduces cover 16 + 4 such periods.
    assert {k: v for k, v in split.items() if k.endswith("_ns")} == {
        "compute_ns": 800_000, "comm_overlapped_ns": 400_000, "comm_exposed_ns": 400_000,
        "copy_only_ns": 0, "idle_ns": 100_000, "window_ns": (0, 1_300_000)}
    assert split["streams"]["2"]["comm"] == [(300_000, 700_000), (900_000, 1_300_000)]
    assert split["streams"]["3"]["copy"] == [(1_050_000, 1_100_000)]
    t = {"step_ns": 1_300_000, "charged_ns": 800_000, "source": "profiler",
         "top_ops": [{"op": "aten::mm", "seconds": 8e-4}], **split}
    plot.draw_time(str(tmp_path / "time.png"), 0, "step 2 of 2", "Ascend910B2", t)
    assert_png(tmp_path / "time.png")


def test_activities_on_another_clock_are_not_split():
    acts = simulated_step()
    charged = 40 * 20_000 + 10_000
    # Host times: the ops' durations are not what the cost model charged.
    offset, why = plot._simulated_offset(acts, 1_320_000, 3 * charged, 0)
    assert offset is None and "not on the simulated clock" in why
    # An activity before the clock's zero.
    early = acts + [activity(0, "aten::mm", -50_000, -40_000, 1)]
    assert plot._simulated_offset(early, 1_320_000, charged + 10_000, 0)[0] is None
    assert plot._simulated_offset(acts, 1_320_000, charged, 7) == (
        None, "the profiler dropped 7 device activities")


def test_interval_arithmetic():
    u = plot.union([(5, 9), (0, 3), (2, 4), (9, 12), (20, 20)])
    assert u == [(0, 4), (5, 12)]
    v = [(1, 2), (3, 6), (11, 30)]
    assert plot.intersect(u, v) == [(1, 2), (3, 4), (5, 6), (11, 12)]
    assert plot.subtract(u, v) == [(0, 1), (2, 3), (6, 11)]
    assert plot.clip(u, 2, 8) == [(2, 4), (5, 8)]
    assert plot.time_split([(0, 10)], [(5, 15)], [(14, 18)], 0, 20) == {
        "compute_ns": 10, "comm_overlapped_ns": 5, "comm_exposed_ns": 5, "copy_only_ns": 3,
        "idle_ns": 2}
