"""Interpreter exit (issue 9, item 6): torch_npu's atexit handler drains the devices a program used
and parks their autograd threads before Python finalizes (adapter/AtExit.cpp says why: a thread
that takes the GIL during finalization aborts the process), and an abort names its thread."""

import json
import os
import resource
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quiesce_drains_and_parks_only_the_devices_that_were_used(python):
    r = python("""
import json, os
import torch, torch_npu
w = torch.randn(64, 64, device="npu:1", requires_grad=True)
loss = (w @ w).relu().sum()
loss.backward()
for _ in range(50):          # queued, not waited for
    w2 = w.detach() @ w.detach()
key = "allocation.all.allocated"
before = {d: torch.npu.memory_stats(d).get(key, 0) for d in (0, 1)}
torch_npu._C._npu_quiesceAtExit()
after = {d: torch.npu.memory_stats(d).get(key, 0) for d in (0, 1)}
names = sorted(open(f"/proc/self/task/{t}/comm").read().strip()
               for t in os.listdir("/proc/self/task"))
print(json.dumps({"before": before, "after": after, "names": names,
                  "idle": torch.npu.current_stream(1).query()}))
""")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    before, after = out["before"], out["after"]
    # Device 1 ran the program's backward; the barrier's backward allocated there too.
    assert after["1"] > before["1"] > 0
    # Device 0 held no tensor: it was neither touched nor given a stream worker.
    assert after["0"] == before["0"] == 0
    assert "npu1_s0" in out["names"] and "npu0_s0" not in out["names"], out["names"]
    assert out["idle"] is True


def test_a_program_that_exits_with_queued_work_and_autograd_exits_cleanly(python):
    # The shape of the programs that aborted at exit: train on npu, print, exit with the last
    # step's work still queued. Not a proof (the abort was a rare race), but it must stay clean.
    r = python("""
import torch, torch_npu
from torch_npu.testing import models
losses = models.train("mlp", "npu", "sgd")
x = torch.randn(256, 256, device="npu")
for _ in range(20):
    x = torch.tanh(x @ x)
print("done", len(losses))
""")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "done 20"
    assert "terminate" not in r.stderr


def test_terminate_names_the_dying_thread_and_keeps_the_standard_message(tmp_path):
    code = """
import ctypes
import torch, torch_npu
print("ready", flush=True)
ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()
"""
    # No core file: where cores are enabled one would land in the working directory.
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": REPO},
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    assert r.returncode == -6  # SIGABRT, as without torch_npu
    assert r.stdout.strip() == "ready"
    assert "torch_npu: std::terminate on thread 'python' (tid " in r.stderr, r.stderr[-2000:]
    assert "native backtrace:" in r.stderr
    # The previous handler (libstdc++'s verbose one) still runs after ours.
    assert "terminate called without an active exception" in r.stderr
