"""Faults on demand (NPU_SIM_FAULTS, docs/faults.md) and torch_npu's recovery API.

Each fault kind shows its exact error text and that nothing else is corrupted: the other device
keeps computing what the CPU computes, and after restart_device the faulty one does too. The
worked examples (examples/faults/) run under torchrun and end bit-equal to unfaulted runs."""
import os
import re
import subprocess
import sys

import pytest
import torch
from dist_launch import free_port, job_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "faults")


def faulted(python, plan, code, **env):
    return python(code, env={"NPU_SIM_FAULTS": plan, **env})


# ---- the plan is checked when the runtime starts --------------------------------------------

@pytest.mark.parametrize("plan, names", [
    ("devce_lost@launch=3", "fault 1 'devce_lost@launch=3': unknown fault 'devce_lost'"),
    ("kill@launch=2;oom@step=3", "fault 2 'oom@step=3': oom happens at an allocation: use oom@alloc=N"),
    ("kill@lunch=2", "unknown trigger 'lunch'"),
    ("kill@launch=0", "launch=0: expected an integer of at least 1"),
    ("kill", "expected KIND@TRIGGER"),
    ("straggler@launch=1", "straggler needs factor=F"),
    ("kill@step=1,factor=2", "kill takes no factor"),
    ("hbm_uce@step=2,target=weights", "target=weights: expected param[I], grad[I] or state[I].KEY"),
    ("hbm_uce@launch=2,target=param[0]", "hbm_uce hits a tensor: use hbm_uce@step=N"),
    ("hbm_uce@alloc=2,target=param[0]", "hbm_uce at an allocation hits that allocation's memory"),
    ("hbm_uce@step=2", "hbm_uce at a step needs target="),
    ("link_down@collective=2,mode=sometimes", "mode=sometimes: expected error or hang"),
    ("device_lost@launch=1,device=9", "names device 9 but this process sees 8 device(s)"),
    ("kill@step=1,colour=red", "unknown option 'colour'"),
])
def test_a_bad_plan_is_refused_at_start_naming_the_bad_part(python, plan, names):
    r = faulted(python, plan, "import torch, torch_npu; torch.ones(1, device='npu')")
    assert r.returncode != 0
    assert f"NPU_SIM_FAULTS='{plan}' is invalid: " in r.stderr
    assert names in r.stderr
    assert "docs/faults.md" in r.stderr


def test_no_plan_and_an_empty_plan_change_nothing(python):
    for plan in ("", " ; "):
        r = faulted(python, plan, """
            import torch, torch_npu
            print(torch.npu.device_count(), (torch.arange(4., device='npu') * 2).tolist())
        """)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["8", "[0.0,", "2.0,", "4.0,", "6.0]"]


# ---- each fault ----------------------------------------------------------------------------

def test_device_lost_fails_every_later_call_and_spares_the_other_device(python):
    r = faulted(python, "device_lost@launch=3,device=0", """
        import torch, torch_npu
        x = torch.ones(4, device="npu:0")
        y = torch.arange(6., device="npu:1")
        x = x + 1                            # launch 2 on NPU 0 (ones() was the first)
        for i in range(2):
            try:
                x = x * 2                    # the third and later launches
            except RuntimeError as e:
                print("ERR", str(e).splitlines()[0])
                print("PTA", str(e).splitlines()[1].endswith("ERR00100 PTA call acl api failed."))
        print("npu1", (y * 3 + 1).cpu().tolist())
        try:
            torch_npu.npu.restart_device(0)
        except RuntimeError as e:
            print("RESTART", "cannot be restarted" in str(e))
        print("health", torch_npu._C._npu_deviceHealth(0), torch_npu._C._npu_deviceHealth(1))
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERR")]
    assert len(errors) == 2
    for line in errors:
        assert "NPU function error: NPU 0 (physical 0) was lost: it stopped answering" in line
        assert line.endswith("error code is 507010")
    assert lines.count("PTA True") == 2
    assert f"npu1 {[float(v * 3 + 1) for v in range(6)]}" in lines  # NPU 1 still computes
    assert "RESTART True" in lines
    assert "health 3 0" in lines
    assert "[SimNPU] NPU_SIM_FAULTS: 'device_lost@launch=3,device=0' fired on NPU 0" in r.stderr


def test_stop_device_then_restart_device(python):
    r = python("""
        import torch, torch_npu
        x = torch.arange(8., device="npu")
        torch.npu.synchronize()  # stop_device aborts queued tasks: x must be written first
        print("stop", torch_npu.npu.stop_device(0))
        try:
            x + 1
        except RuntimeError as e:
            print("ERR", str(e).splitlines()[0])
            print("PTA", str(e).splitlines()[1].endswith("ERR00100 PTA call acl api failed."))
        torch_npu.npu.restart_device(0)
        print("after", (x + 1).cpu().tolist(), torch_npu._C._npu_deviceHealth(0))
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "stop 0"
    assert re.fullmatch(r"ERR .*:\d+ NPU function error: FORCE STOP: NPU 0 was stopped "
                        r"\(torch_npu\.npu\.stop_device\).*, error code is 107022", lines[1])
    assert lines[2] == "PTA True"
    assert lines[3] == f"after {[float(v + 1) for v in range(8)]} 0"


UCE_TRAINING = """
    import torch, torch_npu

    def range_of(t):  # numbers only: holding the storage would keep its memory allocated
        return {{"ptr": t.untyped_storage().data_ptr(), "size": t.untyped_storage().nbytes()}}

    torch.manual_seed(0)
    model = torch.nn.Linear({size}, {size}).npu()
    opt = torch.optim.Adam(model.parameters())
    x = torch.ones(2, {size}, device="npu")
    for step in range(1, 4):
        try:
            model(x).sum().backward()
            opt.step()
            {after_step}
            torch.npu.synchronize()
            torch.ones(1, device="npu").item()
            print("step", step, "ok")
        except RuntimeError as e:
            print("step", step, "UCE" if "UCE ERROR" in str(e) else str(e))
            print("kind", torch_npu.npu.check_uce_in_memory(0))
            print("addr", torch_npu.npu._get_uce_addr() == {expected})
            torch_npu.npu.stop_device(0)
            torch_npu.npu.restart_device(0)
            print("repaired", torch_npu.npu.check_uce_in_memory(0), torch_npu.npu._get_uce_addr())
"""


def test_hbm_uce_in_optimizer_state_is_persistent_memory(python):
    code = UCE_TRAINING.format(size=8, after_step="opt.zero_grad()",
                               expected='[range_of(opt.state[model.weight]["exp_avg"])]')
    r = faulted(python, "hbm_uce@step=2,target=state[0].exp_avg", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["step 1 ok", "step 2 UCE", "kind 3", "addr True",
                                     "repaired 0 []", "step 3 ok"]


def test_hbm_uce_in_a_freed_gradient_is_temporary_memory(python):
    # The gradient is freed (zero_grad sets it to None) before the error is looked at: the
    # memory is only cached, and emptying the cache releases it (check_uce_in_memory says 2).
    # 64 MiB, so that it has a segment of its own (small blocks share segments with live ones).
    code = UCE_TRAINING.format(size=4096, after_step="opt.zero_grad(set_to_none=True)",
                               expected="[grad_range]")
    code = code.replace("opt.step()\n", "grad_range = range_of(model.weight.grad)\n"
                        "            opt.step()\n", 1)
    r = faulted(python, "hbm_uce@step=2,target=grad[0]", code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:4] == ["step 1 ok", "step 2 UCE", "kind 2", "addr True"]
    assert lines[-1] == "step 3 ok"


def test_hbm_uce_at_an_allocation_hits_that_activation(python):
    # The third allocation is a + b's result: the kernel that writes it is the first to fail.
    r = faulted(python, "hbm_uce@alloc=3", """
        import torch, torch_npu
        a = torch.ones(64, device="npu")         # allocation 1
        b = torch.ones(64, device="npu")         # allocation 2
        try:
            c = a + b                            # allocation 3: the faulty one
        except RuntimeError as e:
            print("UCE" if "UCE ERROR" in str(e) else str(e))
        addr = torch_npu.npu._get_uce_addr()
        print("addr", len(addr), addr[0]["size"])
        print("kind", torch_npu.npu.check_uce_in_memory(0))
        torch_npu.npu.restart_device(0)
        print("after", (a + b).sum().item())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["UCE", "addr 1 256", "kind 3", "after 128.0"]


def test_hbm_uce_naming_a_missing_state_says_what_exists(python):
    r = faulted(python, "hbm_uce@step=1,target=state[0].momentum_buffer", """
        import torch, torch_npu
        model = torch.nn.Linear(4, 4).npu()
        opt = torch.optim.Adam(model.parameters())
        model(torch.ones(1, 4, device="npu")).sum().backward()
        opt.step()
    """)
    assert r.returncode != 0
    assert ("NPU_SIM_FAULTS 'hbm_uce@step=1,target=state[0].momentum_buffer': the optimizer "
            "state of parameter 0 has no tensor 'momentum_buffer' (it has ['exp_avg', "
            "'exp_avg_sq', 'step'])") in r.stderr


def test_oom_fails_the_kth_allocation_with_the_normal_message(python):
    r = faulted(python, "oom@alloc=3", """
        import torch, torch_npu
        kept = [torch.ones(256, device="npu") for _ in range(2)]
        try:
            torch.ones(1024, device="npu")
        except torch.OutOfMemoryError as e:
            print("OOM", str(e).splitlines()[0])
        print("next", torch.ones(1024, device="npu").sum().item(), len(kept))
        print("ooms", torch.npu.memory_stats()["num_ooms"])
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("OOM NPU out of memory. Tried to allocate 4.00 KiB (NPU 0; "
                               "64.00 GiB total capacity;")
    assert lines[1:] == ["next 1024.0 2", "ooms 1"]


def test_a_straggler_takes_factor_times_as_long_in_simulated_time(python):
    code = """
        import torch, torch_npu
        a = torch.ones(1024, 1024, device="npu")
        for _ in range(20):
            a = a @ a
        torch.npu.synchronize()
        print(torch_npu.npu.shadow.simulated_time_ns(0))
    """
    base = python(code, env={"NPU_SIM_SHADOW": "1"})
    slow = faulted(python, "straggler@launch=1,factor=3", code, NPU_SIM_SHADOW="1")
    assert base.returncode == 0 and slow.returncode == 0, base.stderr + slow.stderr
    ratio = int(slow.stdout) / int(base.stdout)
    assert 2.9 < ratio < 3.05, ratio


def test_kill_ends_the_process_with_sigkill_at_the_trigger(python):
    r = faulted(python, "kill@launch=3", """
        import torch, torch_npu
        x = torch.zeros(1, device="npu")
        for i in range(5):
            print("launch", i + 1, flush=True)
            x = x + 1
    """)
    assert r.returncode == -9
    assert r.stdout.split("\n")[:3] == ["launch 1", "launch 2", "launch 3"]
    assert "[SimNPU] NPU_SIM_FAULTS: 'kill@launch=3' fired on NPU 0" in r.stderr


def test_a_fault_for_another_rank_or_attempt_does_not_fire(python):
    r = faulted(python, "kill@launch=1,rank=1;kill@launch=1,restart=1", """
        import torch, torch_npu
        print((torch.ones(2, device="npu") + 1).tolist())
    """, RANK="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0]"


# ---- the worked examples, under torchrun ---------------------------------------------------

def torchrun(script, out_dir, *args, env=None, restarts=0, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}",
           f"--max-restarts={restarts}", "--monitor-interval=0.5",
           os.path.join(EXAMPLES, script), str(out_dir), *args]
    return subprocess.run(cmd, env=job_env(env), capture_output=True, text=True, timeout=timeout)


def same_parameters(a, b):
    x, y = torch.load(a), torch.load(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_elastic_restart_resumes_from_the_checkpoint_and_ends_as_the_unfaulted_run(tmp_path):
    faulty, clean = tmp_path / "faulty", tmp_path / "clean"
    faulty.mkdir()
    clean.mkdir()
    r = torchrun("elastic_restart.py", faulty, env={"NPU_SIM_FAULTS": "kill@step=5,rank=1"},
                 restarts=1)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert (faulty / "starts.txt").read_text() == "restart 0\nrestart 1\n"
    assert "'kill@step=5,rank=1' fired on NPU 1, rank 1" in r.stderr
    assert "rank 0: resumed after step 4" in r.stdout
    r = torchrun("elastic_restart.py", clean)
    assert r.returncode == 0, r.stderr[-5000:]
    assert same_parameters(faulty / "final.pt", clean / "final.pt")


def test_in_job_uce_recovery_ends_as_the_unfaulted_run(tmp_path):
    faulty, clean = tmp_path / "faulty", tmp_path / "clean"
    faulty.mkdir()
    clean.mkdir()
    r = torchrun("uce_recovery.py", faulty,
                 env={"NPU_SIM_FAULTS": "hbm_uce@step=3,rank=0,target=state[0].exp_avg"})
    assert r.returncode == 0, r.stderr[-5000:]
    assert (faulty / "recovery.txt").read_text().splitlines() == [
        "step 3: UCE ERROR, check_uce_in_memory=3", "rank 0: rolled back to after step 2"]
    r = torchrun("uce_recovery.py", clean)
    assert r.returncode == 0, r.stderr[-5000:]
    assert (clean / "recovery.txt").read_text().strip() == ""
    assert same_parameters(faulty / "final.pt", clean / "final.pt")


@pytest.mark.parametrize("mode", ["error", "hang"])
def test_link_down_is_a_clear_error_on_every_rank(tmp_path, mode):
    plan = "link_down@collective=3,rank=0,peer=1" + (",mode=hang" if mode == "hang" else "")
    r = torchrun("link_down.py", tmp_path, env={"NPU_SIM_FAULTS": plan, "HCCL_EXEC_TIMEOUT": "3",
                                                "TORCH_HCCL_ASYNC_ERROR_HANDLING": "2"},
                 timeout=120)
    assert r.returncode != 0
    reports = {}
    for rank in (0, 1):
        report = (tmp_path / f"rank{rank}.txt").read_text()
        m = re.fullmatch(r"rank (\d) failed after ([\d.]+) s: (.*)\n", report)
        assert m, report
        reports[m[1]] = m.groups()
    assert sorted(reports) == ["0", "1"], r.stdout + r.stderr[-3000:]
    _, seconds0, text0 = reports["0"]
    _, seconds1, text1 = reports["1"]
    assert "HcclAllReduce (sequence 3" in text0 and "HcclAllReduce (sequence 3" in text1
    assert "HCCS LINK ERROR: the link to rank 1 is down" in text0
    assert "error code is 507056" in text0
    if mode == "error":
        assert "rank 0 gave up waiting (HCCL_E_NETWORK: network error)" in text1
        assert float(seconds0) < 3 and float(seconds1) < 3    # at once, not at the deadline
    else:
        assert "hung until its deadline (3 s, HCCL_EXEC_TIMEOUT)" in text0
        assert "rank 0 did not arrive" in text1  # at its own deadline, or told by rank 0
        assert float(seconds0) < 30 and float(seconds1) < 30


def test_npu_smi_shows_a_faulty_device_s_health(python):
    # npu-smi reads the process registry: Warning while stopped, Alarm after a memory error,
    # Critical when lost, OK again after restart_device.
    r = faulted(python, "device_lost@launch=1,device=1", """
        import os, subprocess, sys, torch, torch_npu
        NPU_SMI = os.path.join(os.path.dirname(sys.executable), "npu-smi")

        def health(device):
            out = subprocess.run([NPU_SMI, "info"], capture_output=True, text=True).stdout
            row = next(line for line in out.splitlines()
                       if line.startswith(f"| {device} ") and "910B2" in line)
            return row.split("|")[2].strip()

        x = torch.ones(1, device="npu:0")
        try:
            torch.ones(1, device="npu:1")
        except RuntimeError:
            pass
        print("lost", health(0), health(1))
        torch_npu.npu.stop_device(0)
        print("stopped", health(0))
        torch_npu.npu.restart_device(0)
        storage = x.untyped_storage()
        stream = torch.npu.current_stream(0).npu_stream
        torch_npu._C._npu_injectUce(0, stream, storage.data_ptr(), storage.nbytes())
        torch.npu.synchronize(0)  # the error happens in stream order
        print("uce", health(0))
        torch_npu.npu.restart_device(0)
        print("restarted", health(0))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["lost OK Critical", "stopped Warning", "uce Alarm",
                                     "restarted OK"]
