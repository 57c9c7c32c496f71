"""Reliability of the process registry: npu-smi never hangs or lists junk because of a file in
the runtime directory, and a process whose runtime directory is unusable warns once and runs."""

import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest


def npu_smi(env, *args) -> subprocess.CompletedProcess:
    exe = shutil.which("npu-smi") or os.path.join(os.path.dirname(sys.executable), "npu-smi")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def record(pid: int, version: int = 2) -> bytes:
    """A record (runtime/registry.cpp's layout) claiming `pid`: version 1 holds memory and busy
    counters for 64 devices, version 2 adds their health."""
    head = struct.pack("<IIiiQ64s", 0x4E505552, version, pid, 8, 0, b"forged")
    return head + b"\0" * (8 * 64 * (2 if version == 1 else 3))


def test_npu_smi_skips_bad_records_with_a_note():
    with tempfile.TemporaryDirectory() as d:
        os.mkfifo(os.path.join(d, "proc-4242.reg"))            # would hang a blocking open
        for pid in (0, -1):                                      # would show as live forever
            with open(os.path.join(d, f"proc-{pid}.reg"), "wb") as f:
                f.write(record(pid))
        truncated = os.path.join(d, f"proc-{os.getpid()}.reg")  # a live pid, cut short
        with open(truncated, "wb") as f:
            f.write(record(os.getpid())[:100])
        os.utime(truncated, (1_000_000_000, 1_000_000_000))
        with open(os.path.join(d, "proc-1.reg"), "wb") as f:    # an older SimNPU's record
            f.write(record(1, version=1))
        r = npu_smi({"NPU_SIM_RUNTIME_DIR": d}, "info")
        assert r.returncode == 0, r.stderr
        assert "No running processes found in NPU 0" in r.stdout
        assert "forged" not in r.stdout
        notes = [l for l in r.stderr.splitlines() if l.startswith("npu-smi: note: skipped ")]
        assert len(notes) == 5, r.stderr
        assert any("proc-4242.reg: not a regular file" in n for n in notes)
        assert any("proc-0.reg: pid 0 (must be positive" in n for n in notes)
        assert any("proc--1.reg: pid -1 (must be positive" in n for n in notes)
        assert any("not a complete record (100 bytes" in n for n in notes)
        assert any("proc-1.reg: version 1, expected 2 (written by another SimNPU" in n
                   for n in notes)


@pytest.mark.parametrize("kind", ["file", "under_a_file"])
def test_unusable_runtime_dir_warns_once_and_the_process_runs(python, kind):
    with tempfile.NamedTemporaryFile() as f:
        target = f.name if kind == "file" else os.path.join(f.name, "sub")
        code = """
        import torch, torch_npu
        x = torch.arange(6.0, device='npu')
        y = torch.arange(6.0, device='npu:1')
        print((x * 2).sum().item(), (y + 1).sum().item())
        """
        r = python(code, env={"NPU_SIM_RUNTIME_DIR": target})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["30.0", "21.0"]
        warnings = [l for l in r.stderr.splitlines() if "SimNPU warning" in l]
        assert len(warnings) == 1, r.stderr
        assert f"NPU_SIM_RUNTIME_DIR='{target}' is unusable" in warnings[0]
        assert "runs unregistered" in warnings[0]
