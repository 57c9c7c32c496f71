"""The replays of published 910B training runs (examples/projection/, docs/projection.md
"Against published measurements"), shrunk to 2 ranks, 2 layers and short sequences so they run
in seconds: the projection's peak memory against footprint.py's analytic count, tokens/s
against a roofline computed here by hand, and DTensor tensor parallelism on npu (the plan the
TP replays use) against a CPU reference. The full-size figures are in docs/projection.md."""
import json
import os
import sys

import pytest

from dist_launch import REPO, torchrun, worker

EXAMPLES = os.path.join(REPO, "examples", "projection")
sys.path.insert(0, EXAMPLES)
from footprint import Llama, footprint, layer_activation_bytes  # noqa: E402

SHADOW = {"NPU_SIM_SHADOW": "1"}
PEAK_BF16 = 353.9e12 * 0.90  # profile_910B2.toml: cube_tflops_bf16 x gemm_efficiency


def test_footprint_matches_a_hand_count():
    m = Llama(layers=2, hidden=8, ffn=16, heads=2, kv_heads=1, vocab=32)
    # Parameters: per layer q 64 + k 32 + v 32 + o 64 + MLP 3 x 128 + norms 16 = 592; root
    # 2 x 32 x 8 + 8 = 520.
    assert m.kv_width == 4 and m.layer_params() == 592 and m.params() == 2 * 592 + 520
    s, b = 4, 1
    # fsdp2: 2sb(8h + 3k) + 6sbf + 8bs + 4abs = 8 x 76 + 384 + 32 + 32
    assert layer_activation_bytes(m, "fsdp2", s, b) == 8 * 76 + 384 + 32 + 32
    fp = footprint(m, "fsdp2", ranks=2, seq=s, micro_batch=b)
    P = 2 * 592 + 520
    assert fp["terms"]["parameters (fp32 shard)"] == 4 * P / 2
    assert fp["terms"]["optimizer (AdamW, 2 x fp32 shard)"] == 8 * P / 2
    assert fp["terms"]["unsharded bf16: root + 2 layers"] == 2 * 520 + 4 * 592
    assert fp["terms"]["activations: final norm + loss"] == 4 * 32 + 10 * 4 * 32
    assert fp["total"] == pytest.approx(16 * P / 2 + 2 * 520 + 4 * 592 + 2 * (608 + 384 + 64)
                                        + 128 + 1280)
    # tp_autocast, t = 2: 8sbh/t + 8sbh + [2sb(4h + 3k) + 6sbf + 4abs]/t + 8bs/t
    t = 2
    assert layer_activation_bytes(m, "tp_autocast", s, b, t) == \
        8 * 32 / t + 8 * 32 + (8 * 44 + 384 + 32) / t + 32 / t
    fp = footprint(m, "tp_autocast", ranks=t, seq=s, micro_batch=b)
    assert fp["terms"]["autocast bf16 weight copies"] == 2 * (2 * 576 + 32 * 8) / t
    with pytest.raises(ValueError, match="strategy"):
        footprint(m, "pp", 2, s, b)


def _replay(tmp_path, script, model, args, tokens_per_step):
    r = torchrun("-m", 2, "torch_npu.utils.projection", "--json", "--tokens-per-step",
                 str(tokens_per_step), "--", os.path.join(EXAMPLES, script), *args,
                 "--out", str(tmp_path), env=SHADOW, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    projections = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    replays = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(2)]
    return projections, replays


def _roofline_seconds(m: Llama, tokens: int, seq: int, ranks_sharing: int) -> float:
    """Cube work of one micro-batch on one rank at the bf16 rate: 6 x (parameters without the
    embedding) x tokens, plus causal attention (4 b h x s(s + 1)/2 query-key pairs forward, 2.5 x
    that backward), divided over the ranks that share the micro-batch."""
    dense = 6 * (m.params() - m.vocab * m.hidden) * tokens
    attention = 3.5 * 4 * (tokens // seq) * (seq * (seq + 1) // 2) * m.hidden * m.layers
    return (dense + attention) / ranks_sharing / PEAK_BF16


def _check(projections, replays, m, strategy, seq, micro_batch, tokens, ranks_sharing):
    fp = footprint(m, strategy, ranks=2, seq=seq, micro_batch=micro_batch)["total"]
    for proj, rep in zip(sorted(projections, key=lambda p: p["rank"]), replays):
        peak = proj["peak_allocated_bytes"]
        assert peak == rep["peak_allocated_bytes"]
        # The analytic count is what must be live (state + saved activations); the allocator's
        # peak differs by transients (gradients being reduced, casts in flight, small buffers)
        # and by the activations freed in the backward before the peak. FSDP2: within 10% here
        # as at full size. TP: +8% at full size (docs/projection.md), +21% at this shrunk size,
        # where the vocabulary-parallel loss's float32 transients weigh more.
        low, high = (0.9, 1.1) if strategy == "fsdp2" else (1.0, 1.3)
        assert low * fp <= peak <= high * fp, (peak / fp, peak, fp)
        assert max(rep["host_step_seconds"][1:]) < 60 and rep["rss_mb"] < 2048
        t_micro = rep["t_micro_ns"] / 1e9
        roof = _roofline_seconds(m, tokens, seq, ranks_sharing)
        # Never faster than the cube's roofline; at this size launches and copies dominate.
        assert 0.05 < roof / t_micro <= 1.0, roof / t_micro
        assert proj["tokens_per_second"] > 0 and rep["step_seconds_scaled"] > 0


def test_llama2_7b_fsdp2_replay_shrunk(tmp_path):
    m = Llama(layers=2, hidden=1024, ffn=2816, heads=8, kv_heads=8, vocab=8000)
    args = ["--layers", "2", "--hidden", "1024", "--ffn", "2816", "--heads", "8", "--vocab",
            "8000", "--seq", "1024", "--micro-batches", "2"]
    projections, replays = _replay(tmp_path, "llama2_7b_fsdp2.py", m, args, 2048)
    # FSDP2: each rank runs its own micro-batch of 1 x 1024 tokens.
    _check(projections, replays, m, "fsdp2", 1024, 1, 1024, 1)


def test_llama3_8b_tp_replay_shrunk(tmp_path):
    m = Llama(layers=2, hidden=1024, ffn=3584, heads=8, kv_heads=2, vocab=16000)
    args = ["--model", "llama3-8b", "--layers", "2", "--hidden", "1024", "--ffn", "3584",
            "--heads", "8", "--kv-heads", "2", "--vocab", "16000", "--seq", "1024",
            "--micro-batch", "2", "--micro-batches", "2"]
    projections, replays = _replay(tmp_path, "llama_tp.py", m, args, 4096)
    # TP over 2 ranks: the two ranks share one micro-batch of 2 x 1024 tokens.
    _check(projections, replays, m, "tp_autocast", 1024, 2, 2048, 2)


@pytest.mark.parametrize("mode", [("nosp", "unfused"), ("sp", "unfused"), ("sp", "fused")])
def test_tensor_parallel_llama_on_npu_matches_cpu(tmp_path, mode):
    # Normal (not shadow) mode: DTensor TP / sequence parallel / loss_parallel on npu over hccl,
    # the loss and every gradient against the unsharded model on the CPU. "fused" runs
    # npu_rms_norm on sequence-sharded DTensors (torch_npu/distributed/_dtensor_ops.py).
    r = torchrun(worker("tp_llama_check.py"), 2, str(tmp_path), *mode, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    out = json.loads((tmp_path / "tp.json").read_text())
    assert out["loss"] == pytest.approx(out["ref_loss"], rel=1e-5)
    assert max(out["grad_rel_err"].values()) < 1e-4
