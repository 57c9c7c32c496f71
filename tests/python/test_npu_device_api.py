"""torch.npu device management and properties."""

import gc

import pytest
import torch
import torch_npu  # noqa: F401


def test_available_and_count():
    assert torch.npu.is_available()
    assert torch.npu.device_count() == 8


def test_set_device_is_per_thread_and_context_manager():
    import threading

    torch.npu.set_device(2)
    assert torch.npu.current_device() == 2
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.npu.current_device()))
    t.start()
    t.join()
    assert seen == [0]
    with torch.npu.device(5):
        assert torch.npu.current_device() == 5
        x = torch.empty(3, device="npu")
        assert x.device == torch.device("npu:5")
    assert torch.npu.current_device() == 2
    torch.npu.set_device("npu:0")
    assert torch.npu.current_device() == 0


def test_device_of():
    x = torch.empty(2, device="npu:3")
    with torch.npu.device_of(x):
        assert torch.npu.current_device() == 3
    assert torch.npu.current_device() == 0


def test_properties_repr_and_name():
    props = torch.npu.get_device_properties(0)
    assert props.total_memory == 64 * 1024**3
    assert repr(props) == (
        "_NPUDeviceProperties(name='Ascend910B2', total_memory=65536MB, "
        f"cube_core_num={props.cube_core_num}, vector_core_num={props.vector_core_num})"
    )
    assert torch.npu.get_device_name(0) == "Ascend910B2"
    assert torch.npu.get_device_name() == props.name
    assert torch.npu.get_device_capability(0) is None  # as torch_npu


@pytest.mark.parametrize("bad", [8, -1, "npu:9"])
def test_invalid_device_index_is_a_clear_error(bad):
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.npu.get_device_properties(bad)
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.npu.set_device(bad)


def test_wrong_device_type_is_rejected():
    with pytest.raises(ValueError, match="Expected a npu device, but got: cpu"):
        torch.npu.get_device_properties("cpu")


def test_synchronize_and_utilization():
    torch.npu.synchronize()
    torch.npu.synchronize(1)
    u = torch.npu.utilization(0)
    assert 0 <= u <= 100


def test_mem_get_info_tracks_allocation():
    gc.collect()  # earlier tests' tensors, and the cached blocks they leave, are released
    torch.npu.synchronize(0)
    torch.npu.empty_cache()
    free0, total = torch.npu.mem_get_info(0)
    assert total == 64 * 1024**3
    x = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="npu:0")
    free1, _ = torch.npu.mem_get_info(0)
    assert free0 - free1 >= 64 * 1024 * 1024
    del x


def test_device_module_registered():
    assert torch.get_device_module("npu") is torch.npu
    assert torch.npu.is_bf16_supported()
    assert torch.float16 in torch.npu.get_amp_supported_dtype()


def test_import_torch_npu_before_torch_in_a_fresh_interpreter(python):
    # torch's autoload looks torch_npu up while torch_npu itself is importing torch.
    r = python("import torch_npu, torch; print(torch.ones(1, device='npu').device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["npu:0"]
