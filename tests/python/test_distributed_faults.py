"""A rank that dies, is stuck, or never joins turns into an error on the others within the
deadline (init_process_group(timeout=3 s) here), never a hang: torch_npu's watchdog wording,
naming the collective, its sequence number, the missing rank and the variable to raise."""
import re

from dist_launch import ranks, torchrun, worker

DEADLINE_S = 3


def assert_watchdog_report(out: str):
    assert "Watchdog caught collective operation timeout" in out, out[-6000:]
    report = out[out.index("Watchdog caught collective operation timeout"):]
    assert "SeqNum=2, OpType=ALLREDUCE" in report, report[:3000]  # the second collective
    assert "rank 1 did not arrive" in report  # the library's account of who is missing
    assert "HCCL_EXEC_TIMEOUT" in report and "timeout=" in report
    assert "ERR02011 DIST timeout error" in report
    ran_ms = int(re.search(r"ran for (\d+) milliseconds", report).group(1))
    assert DEADLINE_S * 1000 - 200 <= ran_ms <= DEADLINE_S * 1000 + 3000, ran_ms
    assert "unexpected success" not in out


def test_killed_rank():
    # Plain processes: torchrun would take the survivor down itself as soon as a rank dies.
    results, _ = ranks(worker("fault.py"), 2, "kill", env={"DEADLINE": str(DEADLINE_S)})
    (rc0, out0), (rc1, out1) = results
    assert rc1 == -9, out1
    assert "rank 0 ready" in out0 and rc0 != 0, out0[-4000:]
    assert_watchdog_report(out0)


def test_stuck_rank_under_torchrun():
    r = torchrun(worker("fault.py"), 2, "stuck", env={"DEADLINE": str(DEADLINE_S)}, timeout=120)
    assert r.returncode != 0
    assert_watchdog_report(r.stdout)


def test_rank_that_never_joins():
    results, _ = ranks(worker("fault.py"), 2, "never_join",
                       env={"DEADLINE": "30", "HCCL_CONNECT_TIMEOUT": str(DEADLINE_S)}, timeout=60)
    (rc0, out0), _ = results
    assert rc0 != 0 and "ready" not in out0, out0[-4000:]
    assert "DistBackendError" in out0 and "HCCL_CONNECT_TIMEOUT" in out0, out0[-4000:]
    assert "ERR02011 DIST timeout error" in out0
