"""CANN's toolkit layout (torch_npu/utils/toolkit.py): ascend-toolkit/latest, set_env.sh, and
collect_env's ASCEND_TOOLKIT_HOME check; the article's checks (`source set_env.sh`,
`echo $ASCEND_TOOLKIT_HOME`, `ls .../latest`) run against it."""

import os
import subprocess
import sys

import pytest

import torch_npu
from torch_npu.utils import collect_env, toolkit


def _bash(script: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=120)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("Ascend")
    return prefix, toolkit.install(str(prefix))


def test_layout_is_canns(installed):
    prefix, set_env = installed
    root = prefix / "ascend-toolkit"
    version = torch_npu.utils.get_cann_version()
    assert set_env == str(root / "set_env.sh")
    assert os.readlink(root / "latest") == version
    latest = root / "latest"
    assert {"lib64", "bin", "include", f"{os.uname().machine}-linux"} <= set(os.listdir(latest))
    assert (latest / "lib64" / "libnpu_runtime.so").exists()
    assert (latest / "bin" / "npu-smi").exists()
    assert (latest / "include" / "npu" / "runtime.h").exists()
    info = (latest / f"{os.uname().machine}-linux" / toolkit.INFO_NAME).read_text()
    assert f"version={version}\n" in info and "package_name=Ascend-cann-toolkit" in info
    # installing again refreshes it in place
    assert toolkit.install(str(prefix)) == set_env


def test_set_env_exports_the_articles_variables_and_the_runtime_loads_from_it(installed):
    prefix, set_env = installed
    r = _bash(f"source {set_env} && echo $ASCEND_TOOLKIT_HOME && echo $ASCEND_HOME_PATH && "
              f"echo $LD_LIBRARY_PATH && ls $ASCEND_TOOLKIT_HOME && command -v npu-smi")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    home = str(prefix / "ascend-toolkit" / "latest")
    assert lines[0] == home and lines[1] == home
    assert lines[2].split(":")[0] == home + "/lib64"
    assert "lib64" in lines[3:] and lines[-1] == home + "/bin/npu-smi"
    # a program started from that shell maps torch_npu's own runtime (one library, two paths)
    code = ("import torch, torch_npu; torch.ones(1, device='npu'); "
            "print([l.split()[-1] for l in open('/proc/self/maps') if 'libnpu_runtime' in l][0])")
    r = _bash(f"source {set_env} && {sys.executable} -c \"{code}\"")
    assert r.returncode == 0, r.stderr
    expected = os.path.realpath(os.path.join(toolkit._compiled_dir(), "lib", "libnpu_runtime.so"))
    assert os.path.realpath(r.stdout.split()[-1]) == expected


def test_collect_env_checks_ascend_toolkit_home(installed, tmp_path):
    prefix, _ = installed
    runtime = os.path.join(toolkit._compiled_dir(), "lib", "libnpu_runtime.so")
    facts = {"expected_runtime_library": runtime}
    check = collect_env._toolkit_check(facts, {})
    assert check.status == "OK" and check.detail.startswith("unset")
    home = str(prefix / "ascend-toolkit" / "latest")
    check = collect_env._toolkit_check(facts, {"ASCEND_TOOLKIT_HOME": home})
    assert check.status == "OK" and torch_npu.utils.get_cann_version() in check.detail
    check = collect_env._toolkit_check(facts, {"ASCEND_TOOLKIT_HOME": str(tmp_path / "gone")})
    assert check.status == "FAIL" and "No such file or directory" in check.symptom
    other = tmp_path / "other" / "lib64"
    other.mkdir(parents=True)
    (other / "libnpu_runtime.so").write_bytes(b"another build")
    check = collect_env._toolkit_check(facts, {"ASCEND_TOOLKIT_HOME": str(other.parent)})
    assert check.status == "FAIL" and "another install's toolkit" in check.detail


def test_setup_made_a_toolkit_in_the_venv():
    stamp = os.path.join(sys.prefix, ".simnpu-package")
    assert os.path.exists(stamp), "run the tests in the virtual environment `make setup` made"
    set_env = os.path.join(sys.prefix, "Ascend", "ascend-toolkit", "set_env.sh")
    assert os.path.exists(set_env)
    assert toolkit.read_toolkit(os.path.join(os.path.dirname(set_env), "latest"))["version"] == \
        torch_npu.utils.get_cann_version()


def test_an_extension_linked_with_ltorch_npu_gets_the_loaded_adapter(installed, tmp_path):
    # What an extension built for a card does (DeepSpeed's npu op builders link -ltorch_npu
    # from the toolkit): it links against lib64/libtorch_npu.so, and a program started from the
    # sourced shell that loads it maps the adapter once, under the name Python loaded it by.
    prefix, set_env = installed
    lib64 = prefix / "ascend-toolkit" / "latest" / "lib64"
    assert os.path.realpath(lib64 / "libtorch_npu.so") == os.path.realpath(torch_npu._C.__file__)
    (tmp_path / "ext.c").write_text("int ext_answer(void) { return 42; }\n")
    r = _bash(f"source {set_env} && cd {tmp_path} && cc -shared -fPIC -o libext.so ext.c "
              "-Wl,--no-as-needed -L$ASCEND_HOME_PATH/lib64 -ltorch_npu")
    assert r.returncode == 0, r.stderr
    code = ("import ctypes, torch, torch_npu; "
            "maps = lambda: sorted({l.split()[-1] for l in open('/proc/self/maps') "
            "if 'torch_npu/_C' in l or 'libtorch_npu' in l}); before = maps(); "
            f"ext = ctypes.CDLL('{tmp_path}/libext.so'); "
            "print(ext.ext_answer(), before == maps(), len(before))")
    r = _bash(f"source {set_env} && {sys.executable} -c \"{code}\"")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["42", "True", "1"]
