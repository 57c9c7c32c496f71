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
