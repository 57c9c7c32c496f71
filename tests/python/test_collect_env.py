"""python -m torch_npu.utils.collect_env: the portrait, and a diagnosis for each broken condition.

Each failure is made on purpose in a fresh interpreter: most tests run the tool on a copy of
torch_npu in a temporary folder (the Python sources of this checkout plus the installed compiled
parts), broken in one way. The copy is first on sys.path because `python -m` runs in its folder.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

import torch_npu

SOURCES = os.path.dirname(os.path.abspath(torch_npu.__file__))
# The compiled parts: this folder for an installed package, the installed one for a checkout.
COMPILED = next(p for p in torch_npu.__path__ if os.path.exists(os.path.join(p, "version.py")))
# Where `python -m` finds this torch_npu (for the tests that need no broken copy).
HERE = os.path.dirname(SOURCES)


def collect_env(cwd, env=None, timeout=180):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "torch_npu.utils.collect_env"], cwd=cwd,
                          capture_output=True, text=True, env=full_env, timeout=timeout)


def check_line(out: str, name: str) -> str:
    """The report's line for check `name` plus its symptom/cause/fix lines."""
    m = re.search(rf"^\[(?: OK |FAIL|SKIP)\] {re.escape(name)}: .*(?:\n {{7}}\S.*)*", out, re.M)
    assert m, f"no check {name!r} in:\n{out}"
    return m.group(0)


def status(out: str, name: str) -> str:
    return check_line(out, name)[1:5].strip()


@pytest.fixture
def package_copy(tmp_path):
    """A working torch_npu in tmp_path/torch_npu; tests break it and run collect_env there."""
    dest = tmp_path / "torch_npu"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(SOURCES, dest, ignore=ignore)
    for name in os.listdir(COMPILED):
        src = os.path.join(COMPILED, name)
        if name.startswith("_C.") or name == "version.py":
            shutil.copy2(src, dest / name)
        elif name in ("lib", "bin"):
            shutil.copytree(src, dest / name, dirs_exist_ok=True, ignore=ignore)
    return tmp_path


def test_healthy_environment_prints_the_portrait_and_passes():
    r = collect_env(HERE)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for field in ("PyTorch version: 2.13.0", "torch_npu version: 0.1.0",
                  "NPU driver version: 24.1.rc3.sim", "CANN version: 8.0.RC3.sim",
                  "Python version: 3.", "OS: ", "GCC version: ", "CPU: ", "[pip3] torch=="):
        assert field in out, field
    assert re.search(r"^  npu:0  Ascend910B2  65536 MB HBM", out, re.M)
    for name in ("version matrix", "native libraries load", "import torch_npu", "torch.npu exists",
                 "devices visible", "ASCEND_RT_VISIBLE_DEVICES", "PYTORCH_NPU_ALLOC_CONF",
                 "a matmul on npu"):
        assert status(out, name) == "OK", check_line(out, name)
    assert "All checks passed." in out


def test_the_copy_used_by_the_other_tests_is_healthy(package_copy):
    r = collect_env(package_copy)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"torch_npu location: {package_copy / 'torch_npu'}" in r.stdout


def test_version_mismatch_is_diagnosed_with_the_matrix_and_the_fix(package_copy):
    version = package_copy / "torch_npu" / "version.py"
    text = re.sub(r'torch_version = "[^"]*"', 'torch_version = "2.99.0+cpu"', version.read_text())
    version.write_text(text)
    r = collect_env(package_copy)
    assert r.returncode == 1
    line = check_line(r.stdout, "version matrix")
    assert line.startswith("[FAIL]")
    assert "needs torch 2.99.0+cpu, found torch 2.13.0+cpu" in line
    assert "ImportError: torch_npu 0.1.0 was built for torch 2.99.0+cpu" in line
    assert "ACL_ERROR_INVALID_PARAM" in line  # the article's name for the same failure
    assert "pip install torch==2.99.0 --index-url https://download.pytorch.org/whl/cpu" in line
    # The import fails for that reason, and the report says so instead of a traceback.
    assert "see 'version matrix' above" in check_line(r.stdout, "import torch_npu")
    assert "Traceback" not in r.stdout + r.stderr


def test_missing_native_library_is_diagnosed(package_copy):
    os.remove(package_copy / "torch_npu" / "lib" / "libnpu_runtime.so")
    r = collect_env(package_copy)
    assert r.returncode == 1
    line = check_line(r.stdout, "native libraries load")
    assert line.startswith("[FAIL]")
    assert "libnpu_runtime.so: cannot open shared object file" in line
    assert "libascendcl.so" in line and "lib/ folder" in line and "make setup" in line
    assert status(r.stdout, "import torch_npu") == "FAIL"
    # The article's third failure follows from it: torch.npu does not exist.
    npu = check_line(r.stdout, "torch.npu exists")
    assert "AttributeError: module 'torch' has no attribute 'npu'" in npu
    assert "torch_npu does not import" in npu
    assert status(r.stdout, "devices visible") == "SKIP"
    assert "Traceback" not in r.stdout + r.stderr


def test_runtime_library_from_ld_library_path_is_diagnosed(package_copy, tmp_path_factory):
    other = tmp_path_factory.mktemp("other_build")
    shutil.copy2(package_copy / "torch_npu" / "lib" / "libnpu_runtime.so", other)
    r = collect_env(package_copy, env={"LD_LIBRARY_PATH": str(other)})
    assert r.returncode == 1
    line = check_line(r.stdout, "native libraries load")
    assert line.startswith("[FAIL]")
    assert f"loaded {other}/libnpu_runtime.so instead of its own" in line
    assert f"remove {other} from LD_LIBRARY_PATH" in line


def test_missing_compiled_extension_is_diagnosed(package_copy):
    for name in os.listdir(package_copy / "torch_npu"):
        if name.startswith("_C."):
            os.remove(package_copy / "torch_npu" / name)
    r = collect_env(package_copy)
    assert r.returncode == 1
    line = check_line(r.stdout, "native libraries load")
    assert "no compiled extension _C.*.so" in line and "make setup" in line


def test_torch_without_npu_when_autoload_is_off():
    r = collect_env(HERE, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 1
    line = check_line(r.stdout, "torch.npu exists")
    assert line.startswith("[FAIL]")
    assert "AttributeError: module 'torch' has no attribute 'npu'" in line
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in line
    assert "add `import torch_npu` after `import torch`" in line
    assert status(r.stdout, "import torch_npu") == "OK"


@pytest.mark.parametrize("value, why", [("3,1", "ascending and unique"),
                                        ("0,abc", "'abc' is not a device id")])
def test_invalid_visible_devices_are_diagnosed(value, why):
    r = collect_env(HERE, env={"ASCEND_RT_VISIBLE_DEVICES": value})
    assert r.returncode == 1
    line = check_line(r.stdout, "ASCEND_RT_VISIBLE_DEVICES")
    assert line.startswith("[FAIL]") and why in line
    assert "fix: Set it to ascending, unique ids" in line
    assert "ASCEND_RT_VISIBLE_DEVICES is invalid" in check_line(r.stdout, "devices visible")
    assert "NPU devices: 0 visible" in r.stdout


def test_valid_visible_devices_are_reported():
    r = collect_env(HERE, env={"ASCEND_RT_VISIBLE_DEVICES": "2,5"})
    assert r.returncode == 0, r.stdout
    line = check_line(r.stdout, "ASCEND_RT_VISIBLE_DEVICES")
    assert "'2,5': 2 device(s), renumbered from 0" in line
    assert "  ASCEND_RT_VISIBLE_DEVICES=2,5" in r.stdout


@pytest.mark.parametrize("conf, what", [
    ("bogus:1", "unknown key 'bogus'"),
    ("max_split_size_mb:abc", "bad value 'abc' for max_split_size_mb"),
])
def test_bad_alloc_conf_is_diagnosed(conf, what):
    r = collect_env(HERE, env={"PYTORCH_NPU_ALLOC_CONF": conf})
    assert r.returncode == 1
    line = check_line(r.stdout, "PYTORCH_NPU_ALLOC_CONF")
    assert line.startswith("[FAIL]") and what in line
    assert "max_split_size_mb:128" in line  # the format, by example


def test_good_alloc_conf_parses():
    r = collect_env(HERE, env={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128"})
    assert r.returncode == 0, r.stdout
    assert "'max_split_size_mb:128' parses" in check_line(r.stdout, "PYTORCH_NPU_ALLOC_CONF")


def test_no_device_at_all_is_diagnosed():
    r = collect_env(HERE, env={"NPU_SIM_DEVICE_COUNT": "0"})
    assert r.returncode == 1
    line = check_line(r.stdout, "devices visible")
    assert line.startswith("[FAIL]") and "NPU_SIM_DEVICE_COUNT=0" in line


def test_a_probe_that_crashes_becomes_a_diagnosis(package_copy):
    # Worse than an exception: the interpreter dies while importing torch_npu.
    init = package_copy / "torch_npu" / "__init__.py"
    init.write_text(init.read_text() + "\nimport os\nos.abort()\n")
    r = collect_env(package_copy)
    assert r.returncode == 1
    line = check_line(r.stdout, "probe")
    assert "killed by signal 6 during 'import torch_npu'" in line
    assert "PyTorch version: Could not collect" in r.stdout  # the portrait is still printed
    assert "OS: " in r.stdout


def test_the_report_is_available_as_a_function():
    from torch_npu.utils.collect_env import get_pretty_env_info

    text = get_pretty_env_info()
    assert "CANN version: 8.0.RC3.sim" in text and "[ OK ] import torch_npu" in text
