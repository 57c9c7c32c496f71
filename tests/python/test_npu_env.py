"""Environment variables, each in a fresh process."""

PROLOGUE = "import torch, torch_npu\n"


def test_visible_devices_select_and_renumber(python):
    r = python(PROLOGUE + "print(torch.npu.device_count()); x = torch.ones(2, device='npu:1'); print(x.device)",
               env={"ASCEND_RT_VISIBLE_DEVICES": "2,5"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "npu:1"]


def test_invalid_visible_devices_warn_and_hide_all(python):
    r = python(PROLOGUE + "print(torch.npu.device_count(), torch.npu.is_available())",
               env={"ASCEND_RT_VISIBLE_DEVICES": "3,1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False"]
    assert "ASCEND_RT_VISIBLE_DEVICES='3,1' is invalid" in r.stderr
    assert "ascending and unique" in r.stderr


def test_launch_blocking_makes_launches_synchronous(python):
    code = PROLOGUE + """
import time
t = time.perf_counter(); torch.npu._sleep(200); dt = time.perf_counter() - t
print(dt >= 0.2, torch.npu.current_stream().query())
"""
    r = python(code, env={"ASCEND_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    r = python(code)  # and without it, the launch returns at once
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_alloc_conf_bad_key_names_it(python):
    r = python(PROLOGUE + "torch.empty(10, device='npu')", env={"PYTORCH_NPU_ALLOC_CONF": "foo:1"})
    assert r.returncode != 0
    assert "PYTORCH_NPU_ALLOC_CONF" in r.stderr and "foo" in r.stderr


def test_alloc_conf_bad_value_names_it(python):
    r = python(PROLOGUE + "torch.empty(10, device='npu')",
               env={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:abc"})
    assert r.returncode != 0
    assert "max_split_size_mb" in r.stderr


def test_expandable_segments_work(python):
    code = PROLOGUE + """
xs = [torch.empty(n * 1024 * 1024 + 7, dtype=torch.uint8, device='npu') for n in (3, 30, 5, 50)]
for x in xs: x.fill_(1)
print(sum(int(x.sum().item()) if False else x.numel() for x in xs) > 0,
      torch.npu.memory_snapshot()[0]['is_expandable'])
"""
    r = python(code, env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


def test_no_memory_caching(python):
    code = PROLOGUE + """
x = torch.empty(8 * 1024 * 1024, dtype=torch.uint8, device='npu'); del x
torch.npu.synchronize()
print(torch.npu.memory_reserved())
"""
    r = python(code, env={"PYTORCH_NO_NPU_MEMORY_CACHING": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]
    r = python(code)
    assert int(r.stdout.split()[0]) >= 8 * 1024 * 1024, r.stderr


def test_hbm_size_setting(python):
    r = python(PROLOGUE + "print(torch.npu.get_device_properties(0).total_memory)",
               env={"NPU_SIM_HBM_GB": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(2 * 1024**3)]
