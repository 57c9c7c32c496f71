"""transfer_to_npu against torch.cuda's whole public surface (issue 16): every name of
torch.cuda.__all__ is either torch.npu's object or listed in CUDA_SURFACE with what it becomes,
and each row behaves as listed. Each test runs in a fresh interpreter (the module patches torch
for the whole process)."""

import json

import torch

PROLOGUE = "import torch, torch_npu\nfrom torch_npu.contrib import transfer_to_npu as t2n\n"


def test_every_torch_cuda_name_has_a_row_and_behaves_as_listed(python):
    r = python(PROLOGUE + """
import json, torch_npu
npu = torch_npu.npu
rows, problems = {}, []
for name in torch.cuda.__all__:
    if name in npu.__all__ or hasattr(npu, name):
        rows[name] = "npu"
        value = getattr(torch.cuda, name)
        if isinstance(value, type) and value is not getattr(npu, name):
            problems.append(f"{name}: not torch.npu's class")
        continue
    if name not in t2n.CUDA_SURFACE:
        problems.append(f"{name}: no row in CUDA_SURFACE")
        continue
    kind, detail = t2n.CUDA_SURFACE[name]
    rows[name] = kind
    value = getattr(torch.cuda, name)
    if kind == "npu" and value is not getattr(npu, detail):
        problems.append(f"{name}: not torch.npu.{detail}")
    elif kind == "value" and value != detail:
        problems.append(f"{name}: {value!r} != {detail!r}")
    elif kind == "answer" and value() != detail:
        problems.append(f"{name}(): {value()!r} != {detail!r}")
    elif kind == "refuse":
        try:
            value()
            problems.append(f"{name}: did not refuse")
        except NotImplementedError as e:
            if "transfer_to_npu" not in str(e) or detail not in str(e):
                problems.append(f"{name}: message {e}")
problems += [f"{n}: a row for a name torch.cuda does not have" for n in t2n.CUDA_SURFACE
             if n not in torch.cuda.__all__]
problems += [f"{n}: a row for a name torch.npu has now (drop the row)" for n in t2n.CUDA_SURFACE
             if n in npu.__all__ or hasattr(npu, n)]
print(json.dumps({"rows": rows, "problems": problems}))
""")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["problems"] == []
    assert set(out["rows"]) == set(torch.cuda.__all__)


def test_generic_event_and_stream_accept_cuda_devices(python):
    r = python(PROLOGUE + """
s = torch.Stream(device="cuda")
e = torch.Event(device="cuda:0", enable_timing=True)
x = torch.ones(1000, device="cuda")
s.wait_stream(torch.cuda.current_stream())  # x is written on the default stream
with torch.cuda.stream(s):
    y = x * 2
e.record(s)
e.synchronize()
print(s.device_type == torch.npu.current_stream().device_type, e.device.type,
      isinstance(s, torch.Stream), isinstance(torch.npu.current_stream(), torch.Stream),
      isinstance(torch.npu.Event(), torch.Event), float(y.sum()))
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-6:] == ["True", "npu", "True", "True", "True", "2000.0"]


def test_device_context_managers_and_device_module(python):
    r = python(PROLOGUE + """
with torch.cuda.device("cuda:1"):
    a = torch.empty(1, device="cuda")
    inner = torch.cuda.current_device()
with torch.cuda.device(torch.device("cuda", 2)):
    b = torch.zeros(1).cuda()
with torch.cuda.device_of(b):
    c = torch.cuda.current_device()
mod = torch.get_device_module("cuda")
same_count = mod.device_count() == torch.npu.device_count()
print(a.device, inner, b.device, c, torch.cuda.current_device(), same_count,
      mod.current_device is torch.cuda.current_device)
""", env={"NPU_SIM_DEVICE_COUNT": "4"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-7:] == ["npu:1", "1", "npu:2", "2", "0", "True", "True"]


def test_memory_helpers_and_memory_history(python):
    r = python(PROLOGUE + """
import torch.cuda.memory as m
x = torch.ones(1 << 20, device="cuda")
print(m.memory_allocated() == torch.npu.memory_allocated() > 0)
torch.cuda.reset_max_memory_cached()
torch.cuda.memory._record_memory_history(max_entries=1000)
y = torch.ones(10, device="cuda")
trace = torch.cuda.memory._snapshot()["device_traces"][0]
print("traced:", [e["action"] for e in trace], y.data_ptr() == trace[-1]["addr"])
torch.cuda.memory._record_memory_history(enabled=None)
torch.cuda.memory._set_allocator_settings("expandable_segments:False")
""")
    assert r.returncode == 0, r.stderr
    assert "True" in r.stdout
    assert "traced: ['segment_alloc', 'alloc'] True" in r.stdout  # the first small segment


def test_nvtx_ranges_become_profiler_ranges(python):
    r = python(PROLOGUE + """
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    torch.cuda.nvtx.range_push("forward")
    y = torch.ones(4, device="cuda") + 1
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("backward"):
        y = y * 2
    torch.cuda.nvtx.mark("step")
names = {e.name for e in prof.events()}
print(sorted(n for n in names if n in ("forward", "backward", "step")), torch.cuda.nvtx.range_pop())
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "['backward', 'forward', 'step'] -1"


def test_backends_cuda_sdp_switches_act_on_npu(python):
    r = python(PROLOGUE + """
torch.backends.cuda.enable_flash_sdp(False)
print(torch.npu.flash_sdp_enabled(), torch._C._get_overrideable_sdp_enabled())
with torch.backends.cuda.sdp_kernel(enable_flash=True):
    print(torch._C._get_overrideable_sdp_enabled())
print(torch.cuda.is_tf32_supported(), torch.cuda.has_half, torch.cuda.get_arch_list())
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-4:-1] == ["False False", "True", "False True []"]
