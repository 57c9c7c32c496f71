import os
import subprocess
import sys
import textwrap

import pytest

# Tests run the same way in CI and by hand; an npu-smi or stale registry entry from a test must
# not leak into the user's real registry, so every test process gets its own.
os.environ.setdefault("NPU_SIM_RUNTIME_DIR", f"/tmp/simnpu-tests-{os.getpid()}")
# Likewise the runtime's CANN-style log files (errors, by default): not in the user's ~/ascend/log.
os.environ.setdefault("ASCEND_PROCESS_LOG_PATH", f"/tmp/simnpu-tests-{os.getpid()}/ascend-log")
# A test process that dies of a signal (an abort at exit, a crash in a stream worker) prints the
# Python stack of every thread, so a rare failure in CI says where it happened.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (environment variables are read at start-up)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=timeout,
    )


@pytest.fixture
def python():
    return run_python


@pytest.fixture
def conv_full_float32():
    """torch.npu.conv.allow_hf32 off for the test (convolutions in full float32, to compare
    with the CPU's), restored after."""
    import torch
    import torch_npu  # noqa: F401  (torch.npu)

    saved = torch.npu.conv.allow_hf32
    torch.npu.conv.allow_hf32 = False
    yield
    torch.npu.conv.allow_hf32 = saved


@pytest.fixture(autouse=True)
def _no_sanitizer_reports():
    """Under TORCH_NPU_SANITIZER=1 (`make test-sanitized`), a test whose own process made the
    stream sanitizer report fails, showing the reports."""
    if os.environ.get("TORCH_NPU_SANITIZER") != "1":
        yield
        return
    from torch_npu.npu import _sanitizer

    _sanitizer.clear_reports()
    yield
    found = _sanitizer.reports()
    _sanitizer.clear_reports()
    assert not found, "the stream sanitizer reported:\n" + "\n".join(found)
