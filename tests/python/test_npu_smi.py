"""npu-smi reads live memory use from the registry; dead processes disappear (also kill -9)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

HOLDER = """
import sys, torch, torch_npu
x = torch.empty(300 * 1024 * 1024, dtype=torch.uint8, device='npu:6')
x.fill_(1); torch.npu.synchronize()
print('ready', flush=True)
sys.stdin.read()
"""


def npu_smi(*args, env=None) -> subprocess.CompletedProcess:
    exe = shutil.which("npu-smi") or os.path.join(os.path.dirname(sys.executable), "npu-smi")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)


def process_rows(out: str, pid: int):
    return [l for l in out.splitlines() if re.search(rf"\|\s*{pid}\s*\|", l)]


@pytest.mark.parametrize("how", ["exit", "kill9"])
def test_process_appears_then_disappears(how, tmp_path):
    # A registry of its own: the test process (and earlier tests in it) may hold devices too.
    env = dict(os.environ, NPU_SIM_RUNTIME_DIR=str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = npu_smi("info", env=env)
        assert r.returncode == 0, r.stderr
        rows = process_rows(r.stdout, holder.pid)
        assert len(rows) == 1, r.stdout
        fields = [f.strip() for f in rows[0].strip("|").split("|")]
        assert fields[0].split()[0] == "6"  # NPU 6
        assert int(fields[3]) >= 300  # MB
        assert "No running processes found in NPU 7" in r.stdout
        hbm = re.findall(r"(\d+) / 65536", r.stdout)
        assert int(hbm[6]) >= 300
    finally:
        if how == "kill9":
            holder.send_signal(signal.SIGKILL)
        else:
            holder.stdin.close()
        holder.wait(timeout=30)
    r = npu_smi("info", env=env)
    assert process_rows(r.stdout, holder.pid) == []
    assert "No running processes found in NPU 6" in r.stdout


def test_list_one_device_and_bad_option():
    r = npu_smi("info", "-l")
    assert r.returncode == 0 and "Total Count                    : 8" in r.stdout
    r = npu_smi("info", "-i", "3")
    assert r.returncode == 0
    assert len(re.findall(r"910B2", r.stdout)) == 1
    r = npu_smi("info", "--bogus")
    assert r.returncode == 2
    assert "unknown option '--bogus'" in r.stderr and "Usage: npu-smi" in r.stderr
    r = npu_smi("info", "-i", "99")
    assert r.returncode == 2 and "invalid device id '99'" in r.stderr


def test_watch_prints_rows():
    r = npu_smi("info", "watch", "-i", "0", "-n", "2", "-d", "0.2")
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines()[1:] if l.strip()]
    assert len(rows) == 2 and all(l.split()[0] == "0" for l in rows)
