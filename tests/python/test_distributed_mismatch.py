"""Collective mismatches: ranks that call different collectives, or the same one with other
sizes, dtypes or roots, fail on every rank with an error naming each rank's call, with and
without TORCH_DISTRIBUTED_DEBUG=DETAIL (dist_workers/mismatch.py). Without the check, an
all_reduce meeting an all_gather returned on both ranks with garbage in the outputs."""
import pytest
from dist_launch import ranks, worker

CALLS = {
    "kinds": ["rank 0 called HcclAllReduce (sequence 2, 1024 elements float32, sum)",
              "rank 1 called HcclAllGather (sequence 2, 4096 bytes per rank)"],
    "shapes": ["rank 0 called HcclAllReduce (sequence 2, 1024 elements float32, sum)",
               "rank 1 called HcclAllReduce (sequence 2, 1000 elements float32, sum)"],
    "dtypes": ["rank 1 called HcclAllReduce (sequence 2, 1024 elements float16, sum)"],
    "roots": ["rank 0 called HcclBroadcast (sequence 2, 4096 bytes, root 0)",
              "rank 1 called HcclBroadcast (sequence 2, 4096 bytes, root 1)"],
}


def rank_lines(results):
    lines = []
    for rank, (_, out) in enumerate(results):
        mine = [l for l in out.splitlines() if l.startswith(f"rank {rank} ")]
        assert mine, out[-3000:]
        lines.append(mine[-1])
    return lines


@pytest.mark.parametrize("mode", sorted(CALLS))
def test_every_rank_raises_naming_each_call(mode):
    # The error is raised where the program waits (TORCH_HCCL_ASYNC_ERROR_HANDLING=2); with the
    # default the watchdog would print the same message and take the process down.
    results, _ = ranks(worker("mismatch.py"), 2, mode,
                       env={"TORCH_HCCL_ASYNC_ERROR_HANDLING": "2"})
    for line in rank_lines(results):
        assert " raised " in line and "the ranks called different collectives" in line, line
        for call in CALLS[mode]:
            assert call in line, line


@pytest.mark.parametrize("mode", ["kinds", "shapes"])
def test_detail_debug_keeps_pytorchs_own_check(mode):
    results, _ = ranks(worker("mismatch.py"), 2, mode,
                       env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL",
                            "TORCH_HCCL_ASYNC_ERROR_HANDLING": "2"})
    for rank, line in enumerate(rank_lines(results)):
        assert "Detected mismatch between collectives on ranks" in line, line
        other = 1 - rank
        assert f"Rank {rank} is running collective" in line and \
            f"Rank {other} is running collective" in line, line
        assert ("ALLREDUCE" in line and "_ALLGATHER_BASE" in line) if mode == "kinds" else \
            "1024vs 1000" in line or "1000vs 1024" in line, line
