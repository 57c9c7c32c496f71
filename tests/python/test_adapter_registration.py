"""The adapter's registration of the "npu" device: naming, generated methods, autoload, version
check, build info and device discovery (torch_npu/__init__.py and torch_npu._C)."""

import pytest
import torch

import torch_npu


def test_privateuse1_backend_is_named_npu():
    assert torch._C._get_privateuse1_backend_name() == "npu"
    d = torch.device("npu:1")
    assert (d.type, d.index) == ("npu", 1)
    assert torch.npu is torch_npu.npu
    assert torch.accelerator.current_accelerator() == torch.device("npu")


def test_tensor_npu_is_npu_and_round_trip():
    x = torch.arange(12.0).reshape(3, 4)
    y = x.npu(1)
    assert y.device == torch.device("npu:1")
    assert y.is_npu and not x.is_npu
    assert torch.equal(y.cpu(), x)
    with torch.npu.device(1):
        assert x.npu().device == torch.device("npu:1")
    assert x.to("npu").device == torch.device("npu", torch.npu.current_device())


def test_factories_on_npu_match_cpu():
    for make in (torch.zeros, torch.ones):
        t = make(2, 3, dtype=torch.int16, device="npu:1")
        assert t.device == torch.device("npu:1")
        assert torch.equal(t.cpu(), make(2, 3, dtype=torch.int16))
    f = torch.full((4,), 2.5, device="npu")
    assert torch.equal(f.cpu(), torch.full((4,), 2.5))
    e = torch.empty(2, 3, 4, device="npu")
    assert e.shape == (2, 3, 4) and e.is_contiguous()
    cl = torch.empty(2, 3, 4, 5, device="npu", memory_format=torch.channels_last)
    assert cl.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()


def test_module_npu_moves_parameters_and_buffers():
    m = torch.nn.BatchNorm1d(3)
    ref = {k: v.clone() for k, v in m.state_dict().items()}
    m = m.npu()
    assert all(p.is_npu for p in m.parameters())
    assert all(b.is_npu for b in m.buffers())
    for k, v in m.state_dict().items():
        assert torch.equal(v.cpu(), ref[k]), k


def test_untyped_storage_on_npu():
    x = torch.arange(4, dtype=torch.int32)
    s = x.untyped_storage().npu()
    assert s.is_npu and s.device.type == "npu" and s.nbytes() == 16
    t = torch.empty(0, dtype=torch.int32, device="npu").set_(s)
    assert torch.equal(t.cpu(), x)
    s.resize_(32)  # UntypedStorage.resize_ -> hooks.resizePrivateUse1Bytes: keeps the data
    assert s.nbytes() == 32
    t2 = torch.empty(0, dtype=torch.int32, device="npu").set_(s)
    assert torch.equal(t2[:4].cpu(), x)
    assert s.cpu().tolist()[:16] == x.untyped_storage().tolist()


def test_build_info_records_the_torch_it_was_built_for():
    from torch_npu import version

    assert version.__version__ == torch_npu.__version__ == "0.1.0"
    assert version.torch_version == str(torch.__version__)
    assert torch_npu._C._built_torch_version == version.torch_version


def test_device_discovery_and_properties():
    assert torch_npu._C._npu_getDeviceCount() == torch.npu.device_count() == 8
    assert torch.accelerator.device_count() == 8
    props = torch_npu._C._npu_getDeviceProperties(0)
    assert set(props) == {"name", "soc_version", "total_memory", "cube_core_num",
                          "vector_core_num", "major", "minor"}
    assert props["name"] == "Ascend910B2" and props["total_memory"] == 64 << 30
    free, total = torch_npu._C._npu_memGetInfo(0)
    assert total == 64 << 30 and 0 < free <= total
    assert torch_npu._C._npu_runtimeVersion() and torch_npu._C._npu_driverVersion()
    with pytest.raises(RuntimeError, match="Invalid device index 8"):
        torch_npu._C._npu_memGetInfo(8)


def test_autoload_imports_torch_npu_with_torch(python):
    r = python("import sys, torch; print('torch_npu' in sys.modules, torch.npu.device_count(), "
               "torch.ones(2, device='npu').device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "8", "npu:0"]


def test_autoload_can_be_disabled(python):
    r = python("import sys, torch; print('torch_npu' in sys.modules, hasattr(torch, 'npu')); "
               "import torch_npu; print(hasattr(torch, 'npu'), torch.zeros(1).npu().is_npu)",
               env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "True", "True"]


def test_other_torch_version_fails_before_loading_the_extension(python):
    code = """
import sys, torch
built = str(torch.__version__)
torch.__version__ = "2.99.0+cpu"
try:
    import torch_npu
    print("imported")
except ImportError as e:
    print("built-for-ok" if built in str(e) else "no-built", "2.99.0+cpu" in str(e))
print("_C-loaded" if "torch_npu._C" in sys.modules else "_C-not-loaded")
"""
    r = python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["built-for-ok", "True", "_C-not-loaded"]


def test_invalid_visible_devices_means_no_device_and_a_clear_init_error(python):
    code = """
import torch, torch_npu
C = torch_npu._C
print(C._npu_getDeviceCount(), bool(C._npu_visibleDevicesWarning()), torch.npu.is_available())
try:
    C._npu_init()
except RuntimeError as e:
    print("init-error", "ASCEND_RT_VISIBLE_DEVICES" in str(e))
"""
    r = python(code, env={"ASCEND_RT_VISIBLE_DEVICES": "1,0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True", "False", "init-error", "True"]


def test_visible_devices_renumber(python):
    r = python("import torch; print(torch.npu.device_count(), "
               "torch.ones(1, device='npu:1').device)",
               env={"ASCEND_RT_VISIBLE_DEVICES": "2,5"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "npu:1"]


def test_querying_devices_before_fork_keeps_the_child_usable(python):
    code = """
import os, torch, torch_npu
assert torch.npu.is_available() and torch_npu._C._npu_getDeviceCount() == 8
pid = os.fork()
if pid == 0:
    ok = not torch_npu._C._npu_isInBadFork() and torch.ones(2, device='npu').sum().item() == 2
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), torch_npu._C._npu_isInBadFork())
"""
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False"]


def test_forked_child_of_initialised_parent_is_in_bad_fork(python):
    code = """
import os, torch, torch_npu
torch.ones(1, device='npu')
pid = os.fork()
if pid == 0:
    try:
        torch.empty(1, device='npu')  # the C++ path: the allocator's lazy init refuses
        os._exit(2)
    except RuntimeError as e:
        ok = torch_npu._C._npu_isInBadFork() and "Cannot re-initialize NPU in forked" in str(e)
        os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]
