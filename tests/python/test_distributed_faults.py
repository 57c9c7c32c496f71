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
