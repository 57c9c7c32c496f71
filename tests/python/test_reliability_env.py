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


POOL = """
import os
for name, value in {env!r}.items():
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
if {one_cpu!r}:
    os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
import torch, torch_npu
x = torch.randn(1 << 20, device="npu")
torch.npu.synchronize()
assert abs((x * 2).sum().item() - 2 * x.cpu().sum().item()) < 1e-2 * x.numel() ** 0.5
workers = sum(open(f"/proc/self/task/{{t}}/comm").read().startswith("npu_kernel")
              for t in os.listdir("/proc/self/task"))
print(workers + 1, len(os.sched_getaffinity(0)))
"""


@pytest.mark.parametrize("env,one_cpu,expected", [
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": "1"}, False, 1),       # a torchrun rank
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": "3"}, False, 3),
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": "2,1"}, False, 2),     # OpenMP's levels
    ({"NPU_KERNEL_THREADS": "3", "OMP_NUM_THREADS": "1"}, False, 3),        # ours wins
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": None}, True, 1),       # taskset -c 0
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": None}, False, "cpus"),
    ({"NPU_KERNEL_THREADS": None, "OMP_NUM_THREADS": "many"}, False, "cpus"),  # not ours to refuse
])
def test_kernel_pool_follows_omp_threads_and_the_affinity_mask(python, env, one_cpu, expected):
    r = python(POOL.format(env=env, one_cpu=one_cpu))
    assert r.returncode == 0, r.stderr
    threads, cpus = map(int, r.stdout.split())
    assert threads == (cpus if expected == "cpus" else expected), r.stdout
