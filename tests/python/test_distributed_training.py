"""The user paths of the hccl backend in real torchrun jobs: DDP and FSDP2 (fully_shard) training
of the GPT-style test model equal single-process training on the global batch (float32, 1e-5);
the article's DDP script on 2 and 8 ranks; an unmodified CUDA-style DDP script under
TORCH_TRANSFER_TO_NPU=1 ("nccl" becomes "hccl"), with npu-smi listing every rank's process."""
import os
import re

import pytest

from dist_launch import REPO, torchrun, worker


def rank_verdicts(out: str, kind: str) -> dict[int, str]:
    """Each rank's final report "rank N <kind> key=value ... ok|FAILED", by rank. Matched field
    by field, not line by line: the ranks share one pipe, so one rank's line can run into
    another's before its newline arrives."""
    found = re.findall(rf"rank (\d+) {kind} (?:\S+=\S+ )+(ok|FAILED)", out)
    return {int(rank): verdict for rank, verdict in found}


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_equals_single_process_training(world):
    r = torchrun(worker("ddp.py"), world)
    assert r.returncode == 0, r.stdout[-6000:]
    assert rank_verdicts(r.stdout, "ddp") == {rank: "ok" for rank in range(world)}, \
        r.stdout[-6000:]


def test_fsdp2_equals_single_process_training():
    r = torchrun(worker("fsdp2.py"), 2)
    assert r.returncode == 0, r.stdout[-6000:]
    assert rank_verdicts(r.stdout, "fsdp2") == {0: "ok", 1: "ok"}, r.stdout[-6000:]


def epoch_losses(out: str, world: int) -> list[float]:
    return [float(v) for v in re.findall(rf"epoch \d: loss ([\d.]+) over 512 samples on {world} "
                                         "ranks", out)]


@pytest.mark.parametrize("world", [2, 8])
def test_article_ddp_script(world):
    # 8 ranks is the article's `torchrun --nproc_per_node=8 main.py` (and this suite's smoke run).
    r = torchrun(os.path.join(REPO, "examples", "ddp_main.py"), world, timeout=360)
    assert r.returncode == 0, r.stdout[-6000:]
    losses = epoch_losses(r.stdout, world)
    assert len(losses) == 3 and losses[2] < losses[0], r.stdout[-3000:]


def test_cuda_style_script_with_transfer_to_npu_and_npu_smi():
    r = torchrun(worker("cuda_style.py"), 2, env={"TORCH_TRANSFER_TO_NPU": "1"})
    assert r.returncode == 0, r.stdout[-6000:]
    ranks = dict(re.findall(r"rank (\d) backend=hccl device=(\d) pid=\d+", r.stdout))
    assert ranks == {"0": "0", "1": "1"}, r.stdout[-4000:]
    pids = dict(re.findall(r"rank (\d) backend=hccl device=\d pid=(\d+)", r.stdout))
    smi = r.stdout.split("NPU-SMI-BEGIN", 1)[1].split("NPU-SMI-END", 1)[0]
    for rank, pid in pids.items():
        rows = [l for l in smi.splitlines() if re.search(rf"\|\s*{pid}\s*\|", l)]
        assert len(rows) == 1, smi
        fields = [f.strip() for f in rows[0].strip("|").split("|")]
        assert fields[0].split()[0] == rank  # each rank's process on its own device
        assert int(fields[3]) >= 64  # MB it holds
    assert "cuda-style ok" in r.stdout
