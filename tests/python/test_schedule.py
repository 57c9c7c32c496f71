"""NPU_SIM_SCHEDULE=chaos[:SEED]: the race-exposing scheduler. A program with a cross-stream race
(a read on a side stream without waiting for the default stream's write) gives the right
numbers in a normal run nearly always (the write mostly runs at once on the launching thread),
and wrong ones in about a third of its steps under chaos, whose seeded delays reorder the streams' work; the same program with the wait is
right under chaos too. NPU_SIM_SCHEDULE=serial runs every task at its launch: the racy program is right. Collectives
keep their results under both."""
import pytest
from dist_launch import torchrun, worker

RACE = """
    import torch, torch_npu
    side = torch.npu.Stream()
    x = torch.zeros(4096, device="npu")
    wrong = 0
    for i in range(30):
        x.fill_(i + 1)                   # the default stream writes x
        {wait}
        with torch.npu.stream(side):
            y = x * 2                    # the side stream reads x
        side.synchronize()
        wrong += int(not bool((y.cpu() == 2 * (i + 1)).all()))
    print("wrong", wrong)
"""
BUG = RACE.format(wait="pass                             # BUG: no wait for the write")
FIXED = RACE.format(wait="side.wait_stream(torch.npu.current_stream())")


def wrong_results(python, code, schedule):
    r = python(code, env={"NPU_SIM_SCHEDULE": schedule} if schedule else {})
    assert r.returncode == 0, r.stderr[-3000:]
    if schedule and schedule.startswith("chaos"):
        seed = schedule.split(":")[1]
        assert f"seed {seed} " in r.stderr and f"NPU_SIM_SCHEDULE=chaos:{seed}" in r.stderr
    return int(r.stdout.split()[-1])


def test_a_race_that_passes_normally_fails_under_chaos(python):
    # A normal run is right nearly always (the write mostly runs on the launching thread before
    # the read is launched), which is why such a bug survives; chaos makes it fail often.
    normal = wrong_results(python, BUG, None)
    chaos = sum(wrong_results(python, BUG, f"chaos:{seed}") for seed in (1, 2, 3))
    assert normal <= 3, normal
    assert chaos >= 5 and chaos > 3 * normal, (normal, chaos)


def test_serial_runs_the_racy_program_in_launch_order(python):
    assert wrong_results(python, BUG, "serial") == 0


def test_the_fixed_program_is_right_under_chaos(python):
    for seed in (1, 2):
        assert wrong_results(python, FIXED, f"chaos:{seed}") == 0


@pytest.mark.parametrize("value", ["sometimes", "chaos:-3", "chaos:x", "serial:1"])
def test_a_bad_schedule_is_a_clear_error(python, value):
    r = python("""
        import torch, torch_npu
        torch.zeros(1, device="npu")
    """, env={"NPU_SIM_SCHEDULE": value})
    assert r.returncode != 0
    assert "NPU_SIM_SCHEDULE" in r.stderr and "chaos" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("schedule", ["chaos:7", "serial"])
def test_collectives_keep_their_results(schedule):
    # Serial once deadlocked here under load: the allocator's event record (made under its lock)
    # waited for a stream busy with work that needed the lock. It no longer waits.
    r = torchrun(worker("temporaries.py"), 2, env={"NPU_SIM_SCHEDULE": schedule})
    assert r.returncode == 0, r.stdout[-6000:]
    for rank in range(2):
        assert f"rank {rank} temporaries ok" in r.stdout
    assert "FAIL" not in r.stdout
