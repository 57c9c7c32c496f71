"""A rank that dies, is stuck, or never joins turns into an error on the others within the
deadline (init_process_group(timeout=3 s) here), never a hang: torch_npu's watchdog wording,
naming the collective, its sequence number, the missing rank and (for a deadline that expired)
the variable to raise. A dead rank's process is seen gone before the deadline."""
import re

from dist_launch import ranks, torchrun, worker

DEADLINE_S = 3


def watchdog_report(out: str, wording: str) -> tuple[str, int]:
    """The watchdog's report in `out` (it names the second collective and the missing rank) and
    how long the collective had run, in ms."""
    assert f"Watchdog caught collective operation {wording}" in out, out[-6000:]
    report = out[out.index(f"Watchdog caught collective operation {wording}"):]
    assert "SeqNum=2, OpType=ALLREDUCE" in report, report[:3000]  # the second collective
    assert "rank 1 did not arrive" in report  # the library's account of who is missing
    assert "unexpected success" not in out
    ran = re.search(r"(?:ran for|failed after) (\d+) milliseconds", report)
    return report, int(ran.group(1))


def assert_timeout_report(out: str):
    report, ran_ms = watchdog_report(out, "timeout")
    assert "HCCL_EXEC_TIMEOUT" in report and "timeout=" in report
    assert "ERR02011 DIST timeout error" in report
    assert DEADLINE_S * 1000 - 200 <= ran_ms <= DEADLINE_S * 1000 + 3000, ran_ms


def test_killed_rank():
    # Plain processes: torchrun would take the survivor down itself as soon as a rank dies.
    # The library sees the dead rank's process gone before the deadline.
    results, _ = ranks(worker("fault.py"), 2, "kill", env={"DEADLINE": str(DEADLINE_S)})
    (rc0, out0), (rc1, out1) = results
    assert rc1 == -9, out1
    assert "rank 0 ready" in out0 and rc0 != 0, out0[-4000:]
    report, ran_ms = watchdog_report(out0, "failure")
    assert "ERR02200 DIST" in report
    assert ran_ms <= DEADLINE_S * 1000 + 3000, ran_ms


def test_stuck_rank_under_torchrun():
    r = torchrun(worker("fault.py"), 2, "stuck", env={"DEADLINE": str(DEADLINE_S)}, timeout=120)
    assert r.returncode != 0
    assert_timeout_report(r.stdout)


def test_rank_that_never_joins():
    results, _ = ranks(worker("fault.py"), 2, "never_join",
                       env={"DEADLINE": "30", "HCCL_CONNECT_TIMEOUT": str(DEADLINE_S)}, timeout=60)
    (rc0, out0), _ = results
    assert rc0 != 0 and "ready" not in out0, out0[-4000:]
    assert "DistBackendError" in out0 and "HCCL_CONNECT_TIMEOUT" in out0, out0[-4000:]
    assert "ERR02011 DIST timeout error" in out0


def test_killed_rank_with_cleanup_only_error_handling():
    # TORCH_HCCL_ASYNC_ERROR_HANDLING=2: the communicator is aborted, the process is not; the
    # work says what happened and the group refuses further collectives.
    results, _ = ranks(worker("fault.py"), 2, "kill_cleanup_only",
                       env={"DEADLINE": str(DEADLINE_S), "TORCH_HCCL_ASYNC_ERROR_HANDLING": "2"})
    (rc0, out0), _ = results
    assert rc0 == 0, out0[-4000:]
    assert "rank 0 wait raised DistBackendError: [Rank 0] Watchdog caught collective operation " \
           "failure: WorkHCCL(SeqNum=2, OpType=ALLREDUCE" in out0, out0[-4000:]
    assert "rank 0 next collective raised" in out0, out0[-4000:]


def test_stuck_rank_flight_recorder_dumps_every_rank_for_torchfrtrace(tmp_path):
    """TORCH_HCCL_TRACE_BUFFER_SIZE + TORCH_HCCL_DUMP_ON_TIMEOUT: the rank whose collective times
    out dumps its recorder and asks the other through the store; PyTorch's own analyzer
    (torchfrtrace) reads the two dumps and names the rank that did not join the collective."""
    import os
    import subprocess
    import sys

    stem = str(tmp_path / "hccl_trace_rank_")
    r = torchrun(worker("fault.py"), 2, "stuck", timeout=120,
                 env={"DEADLINE": str(DEADLINE_S), "TORCH_HCCL_TRACE_BUFFER_SIZE": "64",
                      "TORCH_HCCL_DUMP_ON_TIMEOUT": "1",
                      "TORCH_HCCL_DEBUG_INFO_TEMP_FILE": stem})
    assert r.returncode != 0
    assert_timeout_report(r.stdout)
    assert sorted(os.listdir(tmp_path)) == ["hccl_trace_rank_0", "hccl_trace_rank_1"], \
        r.stdout[-4000:]
    assert "[Rank 1] flight recorder: another rank's collective timed out; wrote" in r.stdout
    # The dumps are PyTorch's format: its loader reads them, and rank 0's last entry is the
    # all_reduce that timed out, still not completed.
    from torch.distributed.flight_recorder.components.loader import read_dump
    dump0 = read_dump("hccl_trace_rank_", str(tmp_path / "hccl_trace_rank_0"))
    last = dump0["entries"][-1]
    assert last["profiling_name"] == "hccl:all_reduce" and last["collective_seq_id"] == 2
    assert last["state"] != "completed" and last["input_sizes"] == [[1024]]
    assert any("fault.py" in f["filename"] for f in last["frames"]), last["frames"]
    dump1 = read_dump("hccl_trace_rank_", str(tmp_path / "hccl_trace_rank_1"))
    assert [e["collective_seq_id"] for e in dump1["entries"]] == [1]
    analysis = subprocess.run([os.path.join(os.path.dirname(sys.executable), "torchfrtrace"),
                               str(tmp_path), "--prefix", "hccl_trace_rank_"],
                              capture_output=True, text=True, timeout=120)
    report = analysis.stdout + analysis.stderr
    assert "Not all ranks joining collective, sequence number: 2" in report, report[-4000:]
    assert "collective: hccl:all_reduce" in report and "missing ranks: {1}" in report, report


def test_writing_the_debug_pipe_dumps_the_flight_recorder(tmp_path, python):
    r = python(f"""
        import os, time
        import torch, torch_npu
        import torch.distributed as dist
        store = dist.HashStore()
        dist.init_process_group("hccl", store=store, rank=0, world_size=1)
        x = torch.ones(8, device="npu")
        dist.all_reduce(x)
        x.cpu()
        with open("{tmp_path}/pipe_0.pipe", "w") as pipe:  # made by the group
            pipe.write("dump")
        for _ in range(100):
            if os.path.exists("{tmp_path}/trace_0"):
                break
            time.sleep(0.05)
        from torch.distributed.flight_recorder.components.loader import read_dump
        entries = read_dump("trace_", "{tmp_path}/trace_0")["entries"]
        print("entries", [(e["profiling_name"], e["state"]) for e in entries])
        dist.destroy_process_group()
    """, env={"TORCH_HCCL_TRACE_BUFFER_SIZE": "8",
              "TORCH_HCCL_DEBUG_INFO_PIPE_FILE": f"{tmp_path}/pipe_",
              "TORCH_HCCL_DEBUG_INFO_TEMP_FILE": f"{tmp_path}/trace_"})
    assert "entries [('hccl:all_reduce', 'completed')]" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "flight recorder: the debug pipe was written; wrote" in r.stderr
