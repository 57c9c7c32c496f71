"""The hccl backend's collectives in real torchrun jobs: every collective against an exact
reference for each dtype and reduce op, odd and empty sizes, many small calls, stream semantics
and asynchronous overlap, bad input (dist_workers/collectives.py does the checking)."""
import pytest

from dist_launch import torchrun, worker


@pytest.mark.parametrize("world", [2, 3])
def test_every_collective_matches_the_reference(world):
    # A 1 MB staging buffer makes the large tensors go through it in many chunks.
    r = torchrun(worker("collectives.py"), world, env={"HCCL_BUFFSIZE": "1"})
    assert r.returncode == 0, r.stdout[-8000:]
    for rank in range(world):
        assert f"rank {rank} collectives ok" in r.stdout, r.stdout[-8000:]
    assert "FAIL" not in r.stdout


@pytest.mark.parametrize("world", [2, 3])
def test_temporaries_made_from_user_tensors_match_gloo(world):
    """PREMUL_SUM's scaled copy, the copies of in-place inputs and the list forms' packed
    buffers keep dtype and offsets (against gloo in the same job); PREMUL_SUM refuses what NCCL's
    backend refuses, with its TypeError (dist_workers/temporaries.py)."""
    r = torchrun(worker("temporaries.py"), world)
    assert r.returncode == 0, r.stdout[-8000:]
    for rank in range(world):
        assert f"rank {rank} temporaries ok" in r.stdout, r.stdout[-8000:]
    assert "FAIL" not in r.stdout


def test_a_dropped_work_frees_its_output_while_the_collective_is_in_flight():
    """The watchdog does not keep a collective's output alive: dropped by the program, the
    memory counts as free at once, the block stays out of reuse until the comm stream is done,
    and the values are right (dist_workers/work_release.py)."""
    r = torchrun(worker("work_release.py"), 2)
    assert r.returncode == 0, r.stdout[-8000:]
    for rank in range(2):
        assert f"rank {rank} work release ok" in r.stdout, r.stdout[-8000:]
    assert "FAIL" not in r.stdout
