"""Every environment variable the runtime, the allocator and the kernels read is validated: a
bad value is refused at the first NPU use with a message naming the value and the allowed
range; the visible-devices warning is printed once."""

import pytest

USE = "import torch, torch_npu\nx = torch.ones(4, device='npu')\nprint(x.sum().item())\n"


@pytest.mark.parametrize("name,value,expected", [
    ("NPU_KERNEL_THREADS", "0", "expected an integer from 1 to 256"),
    ("NPU_KERNEL_THREADS", "-3", "expected an integer from 1 to 256"),
    ("NPU_KERNEL_THREADS", "abc", "expected an integer from 1 to 256"),
    ("ASCEND_LAUNCH_BLOCKING", "yes", "expected 0 or 1"),
    ("NPU_SIM_HBM_GB", "1e-10", "from 0.0009765625 (1 MiB) to 1048576 (1 PiB)"),
    ("NPU_SIM_HBM_GB", "1e9", "from 0.0009765625 (1 MiB) to 1048576 (1 PiB)"),
    ("NPU_SIM_MAX_PENDING_LAUNCHES", "-1", "expected an integer from 1 to 1048576"),
    ("NPU_SIM_INLINE_TASKS", "maybe", "expected 0 or 1"),
    ("PYTORCH_NO_NPU_MEMORY_CACHING", "disable", "expected 1 (disable the caching allocator) or 0"),
])
def test_bad_value_is_refused_naming_it_and_the_range(python, name, value, expected):
    r = python(USE, env={name: value})
    assert r.returncode != 0, r.stdout
    assert f"{name}='{value}' is invalid" in r.stderr, r.stderr
    assert expected in r.stderr, r.stderr


@pytest.mark.parametrize("name,value", [
    ("NPU_KERNEL_THREADS", "2"), ("ASCEND_LAUNCH_BLOCKING", "0"), ("NPU_SIM_HBM_GB", "0.5"),
    ("NPU_SIM_MAX_PENDING_LAUNCHES", "16"), ("NPU_SIM_INLINE_TASKS", "0"),
    ("PYTORCH_NO_NPU_MEMORY_CACHING", "0"),
])
def test_good_values_work(python, name, value):
    r = python(USE, env={name: value})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4.0"


def test_visible_devices_warning_is_printed_once(python):
    code = """
    import torch, torch_npu
    print(torch.npu.is_available())
    print(torch.npu.device_count())
    print(torch.npu.device_count())
    """
    r = python(code, env={"ASCEND_RT_VISIBLE_DEVICES": "3,1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "0", "0"]
    assert r.stderr.count("ASCEND_RT_VISIBLE_DEVICES='3,1' is invalid") == 1, r.stderr
