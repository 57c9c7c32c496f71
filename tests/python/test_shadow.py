"""Shadow execution (NPU_SIM_SHADOW=1, docs/shadow.md): a program runs at its real size with npu
tensors that carry no data.

Checked against the same program in a normal run: in one process the caching allocator's
statistics and the sequence of aten ops are identical; for DDP and FSDP2 on 2 ranks under
torchrun the op sequence and the allocation count are identical, and the peaks agree within the
spread of the normal run itself (frees behind the comm stream depend on timing in either mode). Host-visible values are
the documented placeholders, data-dependent shapes are refused naming the op, and a
LLaMA-2-7B training step on one 64 GB device ends in torch_npu's out-of-memory message without
costing the host its memory."""
import json
import os

import pytest
from dist_launch import torchrun, worker

SHADOW = {"NPU_SIM_SHADOW": "1"}


def run_ok(python, code, env=None, timeout=120):
    r = python(code, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def train_records(python, tmp_path, kind, shadow):
    out = tmp_path / ("shadow" if shadow else "normal")
    out.mkdir()
    r = python(f"import runpy, sys; sys.argv = ['w', {str(out)!r}, {kind!r}]; "
               f"runpy.run_path({worker('shadow_train.py')!r}, run_name='__main__')",
               env=SHADOW if shadow else {"NPU_SIM_SHADOW": "0"})
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads((out / "rank0.json").read_text())


@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt"])
def test_allocator_statistics_and_op_sequence_equal_the_normal_run(python, tmp_path, kind):
    normal = train_records(python, tmp_path, kind, shadow=False)
    shadow = train_records(python, tmp_path, kind, shadow=True)
    assert (normal["shadow"], shadow["shadow"]) == (False, True)
    for key in ("peak_allocated", "peak_reserved", "segments", "allocations"):
        assert shadow[key] == normal[key], key
    assert len(normal["ops"]) > 100
    assert shadow["ops"] == normal["ops"]
    # The normal run computed; the shadow run's losses are the placeholder.
    assert all(loss > 0 for loss in normal["losses"])
    assert shadow["losses"] == [0.0] * len(normal["losses"])


def distributed_records(tmp_path, parallel, shadow):
    out = tmp_path / f"{parallel}-{'shadow' if shadow else 'normal'}"
    out.mkdir()
    r = torchrun(worker("shadow_train.py"), 2, str(out), "gpt", parallel,
                 env={"NPU_SIM_SHADOW": "1" if shadow else "0"}, timeout=240)
    assert r.returncode == 0, r.stdout[-4000:]
    return [json.loads((out / f"rank{k}.json").read_text()) for k in range(2)]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_two_ranks_under_torchrun_follow_the_normal_run(tmp_path, parallel):
    normal = distributed_records(tmp_path, parallel, shadow=False)
    shadow = distributed_records(tmp_path, parallel, shadow=True)
    for n, s in zip(normal, shadow):
        assert s["shadow"] and not n["shadow"]
        assert len(n["ops"]) > 1000
        assert s["ops"] == n["ops"]
        assert s["allocations"] == n["allocations"]
        assert s["segments"] in (n["segments"] - 1, n["segments"], n["segments"] + 1)
        # Under torchrun the peak depends on timing in both modes: a block freed while the comm
        # stream still uses it is released when the stream's event completes, and autograd's
        # device thread interleaves with the main thread. Repeated normal FSDP2 runs of this job
        # peaked anywhere from 935,936 to 1,214,976 bytes (30% apart), even with
        # ASCEND_LAUNCH_BLOCKING=1, so the peaks agree within that spread, not exactly (the
        # single-process runs above are exact).
        assert abs(s["peak_allocated"] - n["peak_allocated"]) <= 0.35 * n["peak_allocated"]


def test_placeholders_metadata_and_refusals(python):
    r = run_ok(python, """
        import warnings, torch, torch_npu
        assert torch_npu.npu.shadow_mode()
        x = torch.randn(64, 64, device="npu")
        y = (x @ x).relu()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            computed = (y.sum().item(), y[0, :4].cpu().tolist(), torch.equal(y, y.clone()))
            again = y.max().item()
        placeholder_warnings = [w for w in caught if "placeholders" in str(w.message)]
        # Small copies carry their bytes: values that came from the host come back.
        meta = torch.tensor([3, 1, 4, 1, 5], device="npu")
        print("computed", computed, again)
        print("roundtrip", meta.tolist(), torch.zeros(3, device="npu").tolist())
        print("warnings", len(placeholder_warnings))
        for name, fn in [("nonzero", lambda: torch.nonzero(x)),
                         ("masked_select", lambda: torch.masked_select(x, x > 0)),
                         ("mask index", lambda: x[x > 0]),
                         ("unique", lambda: torch.unique(meta))]:
            try:
                fn()
                print("refused", name, "no")
            except RuntimeError as e:
                print("refused", name, "shadow execution (NPU_SIM_SHADOW=1)" in str(e),
                      str(e).split(": ")[0])
        # Shapes that follow from shapes alone run: integer indexing, nonzero_static, masks
        # written through (index_put_ with a mask keeps self's shape).
        x[x > 0] = 1.0
        print("shapes", tuple(x[torch.tensor([0, 2], device="npu")].shape),
              tuple(torch.nonzero_static(x, size=5).shape))
    """, env=SHADOW)
    out = r.stdout
    assert "computed (0.0, [0.0, 0.0, 0.0, 0.0], True) 0.0" in out
    assert "roundtrip [3, 1, 4, 1, 5] [0.0, 0.0, 0.0]" in out
    assert "warnings 1" in out                       # once per process
    assert "shadow execution (NPU_SIM_SHADOW=1)" in r.stderr.split("\n")[0] or \
        "NPU_SIM_SHADOW=1: shadow execution" in r.stderr
    for name in ("nonzero", "masked_select", "mask index", "unique"):
        assert f"refused {name} True aten::" in out, out
    assert "shapes (2, 64) (5, 2)" in out


def test_a_normal_run_is_not_shadowed(python):
    r = run_ok(python, """
        import torch, torch_npu
        x = torch.tensor([1.5, 2.5], device="npu")
        print(torch_npu.npu.shadow_mode(), (x * 2).sum().item(), torch.nonzero(x).shape[0])
    """)
    assert r.stdout.split() == ["False", "8.0", "2"]


def test_llama2_7b_on_one_device_runs_out_of_memory_as_on_a_card(python):
    # LLaMA-2-7B (HF LlamaForCausalLM.from_config, float32 parameters under bf16 autocast,
    # sequence 4096, AdamW): 27 GB of parameters, as much of gradients and 54 GB of AdamW state
    # cannot fit in 64 GB.
    r = python("""
        import time, torch, torch_npu, transformers
        from torch_npu.testing import peak_rss_mb
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
            num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
            max_position_embeddings=4096)
        began = time.time()
        with torch.device("npu"):
            model = transformers.LlamaForCausalLM(cfg)
        print("params", sum(p.numel() for p in model.parameters()))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, 32000, (1, 4096), device="npu")
        try:
            for step in range(3):
                with torch.autocast("npu", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
            print("no OOM")
        except torch.OutOfMemoryError as e:
            print("OOM", str(e).splitlines()[0])
        print("peak", torch.npu.max_memory_allocated())
        print("seconds", time.time() - began)
        print("rss_mb", peak_rss_mb())
    """, env=SHADOW, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["params"] == "6738415616"
    assert "OOM" in lines, r.stdout
    assert lines["OOM"].startswith("NPU out of memory. Tried to allocate")
    assert "(NPU 0; 64.00 GiB total capacity;" in lines["OOM"]
    assert int(lines["peak"]) > 54 * 2**30               # parameters and gradients at least
    assert float(lines["seconds"]) < 60
    assert int(lines["rss_mb"]) < 2048


def test_a_model_built_on_the_meta_device_moves_to_npu_without_host_memory(python):
    r = run_ok(python, """
        import torch, torch_npu
        from torch_npu.testing import peak_rss_mb
        with torch.device("meta"):
            model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(16)])
        model.to_empty(device="npu")
        x = torch.randn(4, 8192, device="npu")
        model(x).sum().backward()
        print(torch.npu.memory_allocated() >= 16 * 8192 * 8192 * 4 * 2,
              peak_rss_mb())
    """, env=SHADOW)
    fits, rss_mb = r.stdout.split()
    assert fits == "True"                             # 8.6 GB of weights and gradients
    assert int(rss_mb) < 1024


def test_a_bad_value_is_refused_naming_the_variable(python):
    r = python("import torch, torch_npu; torch.zeros(1, device='npu')",
               env={"NPU_SIM_SHADOW": "on"})
    assert r.returncode != 0
    assert "NPU_SIM_SHADOW='on' is invalid" in r.stderr



def test_llama2_7b_fsdp2_on_eight_ranks_fits_and_reports_its_memory(tmp_path):
    # The project's 8-rank job: LLaMA-2-7B with FSDP2 (bf16 compute, float32 master weights,
    # AdamW, sequence 4096) over hccl under torchrun, at its real size.
    r = torchrun(worker("shadow_llama_fsdp2.py"), 8, str(tmp_path), "32", "2", env=SHADOW,
                 timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(8)]
    # Each rank's share of the float32 master weights, gradients and AdamW's two moments:
    # 16 bytes per parameter over 8 ranks; activations of the full sequence come on top.
    sharded_state = 16 * ranks[0]["params"] / 8
    for rank in ranks:
        assert rank["shadow"] and rank["params"] == 6738415616
        assert sharded_state < rank["peak_allocated"] <= rank["peak_reserved"] < rank["capacity"]
        assert max(rank["step_seconds"]) < 60
        assert rank["rss_mb"] < 2048
    peaks = [rank["peak_allocated"] for rank in ranks]
    assert max(peaks) < 1.1 * min(peaks)           # the shards are even


# ---- the simulated clock: the 910B cost model (torch_npu/data/profile_910B2.toml) -------------

def test_op_costs_are_the_profiles_roofline(python):
    r = run_ok(python, """
        import json, torch, torch_npu
        from torch_npu import _C
        def meta(*shape, dtype=torch.float32):
            return torch.empty(*shape, dtype=dtype, device="meta")
        bf = torch.bfloat16
        cases = {
            "mm": _C._npu_modelOp("aten::mm", [meta(4096, 4096, dtype=bf)] * 2,
                                  [meta(4096, 4096, dtype=bf)]),
            "conv": _C._npu_modelOp("aten::convolution",
                                    [meta(8, 64, 56, 56), meta(128, 64, 3, 3), meta(128)],
                                    [meta(8, 128, 56, 56)]),
            "add": _C._npu_modelOp("aten::add", [meta(2**20)] * 2, [meta(2**20)]),
            # Attention: SDPA [B, N, S, D] full and causal, npu_fusion_attention's layouts.
            "sdpa": _C._npu_modelOp("aten::_scaled_dot_product_fused_attention_overrideable",
                                    [meta(2, 8, 1024, 64, dtype=bf)] * 3, []),
            "sdpa_causal": _C._npu_modelOp(
                "aten::_scaled_dot_product_fused_attention_overrideable",
                [meta(2, 8, 1024, 64, dtype=bf)] * 3, [], causal=True),
            "sdpa_causal_bwd": _C._npu_modelOp(
                "aten::_scaled_dot_product_fused_attention_overrideable_backward",
                [meta(2, 8, 1024, 64, dtype=bf)] * 4, [], causal=True),
            "fa_bsh_bottom_right": _C._npu_modelOp(
                "npu::npu_fusion_attention", [meta(2, 512, 512, dtype=bf),
                                              meta(2, 1024, 512, dtype=bf)] * 1, [],
                layout="BSH", causal=True, bottom_right=True),
            "fa_sbh": _C._npu_modelOp("npu::npu_fusion_attention",
                                      [meta(1024, 2, 512, dtype=bf)] * 2, [], layout="SBH"),
            "fa_tnd_grad": _C._npu_modelOp(
                "npu::npu_fusion_attention_grad", [meta(300, 8, 64, dtype=bf)] * 4, [],
                layout="TND", causal=True, seq_q=[100, 300], seq_k=[100, 300]),
        }
        print(json.dumps({"cases": cases, "model": torch_npu.npu.shadow.installed_profile()["model"]}))
    """, env=SHADOW)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    m, cases = got["model"], got["cases"]
    overhead = m["launch_overhead_us"] * 1e3

    def roofline(flops, bytes_, tflops, efficiency):  # ns: max(compute, memory) + launch
        return int(max(flops / (tflops * 1e3 * efficiency),
                       bytes_ / (m["hbm_gbps"] * m["hbm_efficiency"])) + overhead)

    flops, bytes_ = 2 * 4096 ** 3, 3 * 4096 * 4096 * 2           # bf16 GEMM: compute-bound
    assert cases["mm"] == [flops, bytes_, True,
                           roofline(flops, bytes_, m["cube_tflops_bf16"], m["cube_efficiency"])]
    assert cases["mm"][3] > 400_000                               # ~0.43 ms on 910B2
    flops = 2 * (8 * 128 * 56 * 56) * (64 * 3 * 3)                # float32 conv: fp32 cube rate
    bytes_ = 4 * (8 * 64 * 56 * 56 + 128 * 64 * 9 + 128 + 8 * 128 * 56 * 56)
    assert cases["conv"] == [flops, bytes_, True,
                             roofline(flops, bytes_, m["cube_tflops_fp32"], m["cube_efficiency"])]
    flops, bytes_ = 2 ** 20, 3 * 4 * 2 ** 20                      # add: HBM-bound
    assert cases["add"] == [flops, bytes_, False,
                            roofline(flops, bytes_, m["vector_tflops"], m["vector_efficiency"])]
    # Attention: 4 x (query-key pairs) x heads x head dim; a causal mask keeps the pairs on and
    # below the diagonal (row i of 1024 sees i + 1 keys); the backward is 2.5 x.
    width = 2 * 8 * 64
    assert cases["sdpa"][0] == 4 * width * 1024 * 1024
    assert cases["sdpa_causal"][0] == 4 * width * (1024 * 1025 // 2)
    assert cases["sdpa_causal_bwd"][0] == 2.5 * 4 * width * (1024 * 1025 // 2)
    assert cases["sdpa_causal"][2] and cases["sdpa"][3] > cases["sdpa_causal"][3]
    # BSH, 512 queries against 1024 keys, the diagonal ending at the last key: row i sees
    # i + 513 keys. SBH [S, B, H]: all pairs.
    assert cases["fa_bsh_bottom_right"][0] == 4 * 2 * 512 * sum(i + 513 for i in range(512))
    assert cases["fa_sbh"][0] == 4 * 2 * 512 * 1024 * 1024
    # TND: two sequences of 100 and 200 tokens, causal each: 100 x 101 / 2 + 200 x 201 / 2.
    assert cases["fa_tnd_grad"][0] == 2.5 * 4 * 8 * 64 * (5050 + 20100)


def test_causal_attention_is_charged_for_the_pairs_under_its_mask(python):
    # SDPA's is_causal and npu_fusion_attention's sparse_mode=2 reach the cost model from the
    # ops' own arguments (the latter through its register_autograd wrapper), forward and backward.
    r = run_ok(python, """
        import json, torch, torch_npu
        import torch.nn.functional as F
        from torch_npu import _C
        bf = torch.bfloat16
        got = {}
        q = torch.empty(2, 8, 1024, 64, device="npu", dtype=bf, requires_grad=True)
        x = torch.empty(2, 1024, 512, device="npu", dtype=bf, requires_grad=True)
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="npu"), 1)
        torch.npu.synchronize()
        _C._npu_resetCostTotals()
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        torch_npu.npu_fusion_attention(x, x, x, 8, "BSH", atten_mask=mask, sparse_mode=2,
                                       scale=0.125)[0].sum().backward()
        torch.npu.synchronize()
        got = {n: f for n, c, ns, f in _C._npu_costTotals() if "attention" in n}
        meta = torch.empty(2, 8, 1024, 64, device="meta", dtype=bf)
        want = _C._npu_modelOp("aten::_scaled_dot_product_fused_attention_overrideable",
                               [meta] * 3, [], causal=True)[0]
        print(json.dumps({"got": got, "want": want}))
    """, env=SHADOW)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    got, want = out["got"], out["want"]
    assert want == 4 * (2 * 8 * 64) * (1024 * 1025 // 2)
    assert got == {"aten::_scaled_dot_product_fused_attention_overrideable": want,
                   "aten::_scaled_dot_product_fused_attention_overrideable_backward": 2.5 * want,
                   "npu::npu_fusion_attention": want,
                   "npu::npu_fusion_attention_grad": 2.5 * want}


def test_events_measure_simulated_time_and_streams_share_the_compute_units(python):
    r = run_ok(python, """
        import torch, torch_npu
        from torch_npu import _C
        a = torch.empty(2048, 2048, device="npu", dtype=torch.bfloat16)
        meta = torch.empty(2048, 2048, device="meta", dtype=torch.bfloat16)
        mm_ns = _C._npu_modelOp("aten::mm", [meta, meta], [meta])[3]
        ev = [torch.npu.Event(enable_timing=True) for _ in range(4)]
        ev[0].record()
        for _ in range(6):
            b = a @ a
        ev[1].record()
        # Two streams, three matmuls each: they share the cube, so no faster than one stream.
        side = torch.npu.Stream()
        side.wait_stream(torch.npu.current_stream())
        ev[2].record()
        with torch.npu.stream(side):
            for _ in range(3):
                c = a @ a
        for _ in range(3):
            b = a @ a
        torch.npu.current_stream().wait_stream(side)
        ev[3].record()
        torch.npu.synchronize()
        dispatch_ns = torch_npu.npu.shadow.installed_profile()["model"]["host_dispatch_us"] * 1e3
        print(mm_ns, ev[0].elapsed_time(ev[1]), ev[2].elapsed_time(ev[3]), dispatch_ns)
    """, env=SHADOW)
    mm_ns, one_stream_ms, two_streams_ms, dispatch_ns = map(float, r.stdout.split())
    # The first matmul starts once the host has issued it; the device is the bound after that.
    assert one_stream_ms == pytest.approx((dispatch_ns + 6 * mm_ns) / 1e6, rel=1e-6)
    assert two_streams_ms == pytest.approx(6 * mm_ns / 1e6, rel=1e-6)


def test_many_small_ops_are_host_bound_and_a_graph_replay_is_not(python):
    r = run_ok(python, """
        import torch, torch_npu
        from torch_npu import _C
        x = torch.zeros(16, device="npu")
        meta = torch.empty(16, device="meta")
        add_ns = _C._npu_modelOp("aten::add", [meta], [meta])[3]
        dispatch_ns = torch_npu.npu.shadow.installed_profile()["model"]["host_dispatch_us"] * 1e3
        torch.npu.synchronize()
        ev = [torch.npu.Event(enable_timing=True) for _ in range(4)]
        ev[0].record()
        for _ in range(200):
            x.add_(1)
        ev[1].record()
        g = torch.npu.NPUGraph()
        s = torch.npu.Stream()
        s.wait_stream(torch.npu.current_stream())
        with torch.npu.stream(s):
            with torch.npu.graph(g):
                for _ in range(200):
                    x.add_(1)
        torch.npu.current_stream().wait_stream(s)
        torch.npu.synchronize()
        ev[2].record()
        g.replay()
        ev[3].record()
        torch.npu.synchronize()
        print(add_ns, dispatch_ns, ev[0].elapsed_time(ev[1]), ev[2].elapsed_time(ev[3]))
    """, env=SHADOW)
    add_ns, dispatch_ns, eager_ms, replay_ms = map(float, r.stdout.split())
    assert dispatch_ns > add_ns  # the profile's figures make a 16-element add host-bound
    # Eager: the device waits for the host to issue each op (the last one ends add_ns after it).
    assert eager_ms == pytest.approx((200 * dispatch_ns + add_ns) / 1e6, rel=1e-6)
    # A replay issues the whole graph at once: the device's own time, op after op.
    assert replay_ms == pytest.approx(200 * add_ns / 1e6, rel=1e-6)


def test_the_profiler_records_the_projected_device_timeline(python, tmp_path):
    r = run_ok(python, f"""
        import csv, glob, torch, torch_npu
        from torch_npu import _C
        a = torch.empty(2048, 2048, device="npu", dtype=torch.bfloat16)
        meta = torch.empty(2048, 2048, device="meta", dtype=torch.bfloat16)
        mm_ns = _C._npu_modelOp("aten::mm", [meta, meta], [meta])[3]
        torch.npu.synchronize()
        prof = torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU,
                        torch_npu.profiler.ProfilerActivity.NPU],
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler("{tmp_path}"))
        with prof:
            for _ in range(5):
                b = a @ a
            torch.npu.synchronize()
        [path] = glob.glob("{tmp_path}/**/kernel_details.csv", recursive=True)
        rows = [row for row in csv.DictReader(open(path)) if row["Name"] == "aten::mm"]
        durations = [float(row["Duration(us)"]) for row in rows]
        from decimal import Decimal  # epoch microseconds: more digits than a float holds
        starts = [Decimal(row["Start Time(us)"]) for row in rows]
        print(mm_ns, len(rows), min(durations), max(durations),
              float(min(b - a for a, b in zip(starts, starts[1:]))))
    """, env=SHADOW)
    mm_ns, rows, shortest, longest, gap = map(float, r.stdout.split())
    assert rows == 5
    # Each matmul's device time is its modeled time, and they follow each other on the stream.
    assert shortest == pytest.approx(mm_ns / 1e3, abs=2e-3)
    assert longest == pytest.approx(mm_ns / 1e3, abs=2e-3)
    assert gap == pytest.approx(mm_ns / 1e3, abs=2e-3)


def test_collectives_meet_the_slowest_rank_and_take_their_modeled_time(tmp_path):
    extra = 8
    r = torchrun(worker("shadow_clock.py"), 2, str(tmp_path), str(extra), env=SHADOW)
    assert r.returncode == 0, r.stdout[-4000:]
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(2)]
    m = ranks[0]["model"]
    n, size = 2, 64 * 2 ** 20
    # Ring all-reduce on HCCS: 2(n-1) steps of latency, 2(n-1)/n of the bytes over the link.
    allreduce_ns = 2 * (n - 1) * m["intra_latency_us"] * 1e3 + 2 * (n - 1) / n * size / m["intra_gbps"]
    # Rank 0's first matmul starts once its host has issued it (the clocks met at the sync).
    compute_ns = m["host_dispatch_us"] * 1e3 + extra * ranks[0]["mm_ns"]
    for rank in ranks:
        # Rank 1 computed nothing, but its collective could only end after rank 0 arrived.
        assert rank["elapsed_ms"] == pytest.approx((compute_ns + allreduce_ns) / 1e6, rel=1e-3)


def test_projection_reports_memory_step_time_and_throughput(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch_npu\n"
        "from torch_npu.testing.models import GPT, batches, loss_fn\n"
        "torch.manual_seed(0)\n"
        "model = GPT().npu()\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "for x, y in batches('gpt', 4, batch=8, seed=1):\n"
        "    loss = loss_fn('gpt', model(x.npu()), y.npu())\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    env = dict(os.environ)
    env.pop("NPU_SIM_SHADOW", None)  # the tool turns it on itself
    r = subprocess.run([sys.executable, "-m", "torch_npu.utils.projection", "--json", "--top",
                        "1000", "--tokens-per-step", "1024", "--", str(script)],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["profile"] == "Ascend910B2" and report["steps"] == 4
    steps = report["step_seconds"]
    assert all(t > 0 for t in steps)
    later = sorted(steps[1:])
    assert report["projected_step_seconds"] == pytest.approx(later[1])      # their median
    assert report["tokens_per_second"] == pytest.approx(1024 / later[1])
    assert 0 < report["peak_allocated_bytes"] <= report["peak_reserved_bytes"]
    # One stream: the device's time is the ops' modeled times plus the copies and memsets
    # (batches, AdamW's zeroed state), which the runtime times by their bytes; this small
    # model's ops are shorter than the host's dispatch, so the device also waits for the host.
    ops = sum(op["seconds"] for op in report["top_ops"])
    calls = sum(op["calls"] for op in report["top_ops"])
    dispatch_s = torch_npu_profile()["figures"]["host_dispatch_overhead_us"] * 1e-6
    assert max(ops, calls * dispatch_s) <= sum(steps) <= 1.5 * ops + calls * dispatch_s
    assert {"aten::addmm", "aten::mm"} & {op["op"] for op in report["top_ops"]}


def torch_npu_profile():
    import tomllib
    from pathlib import Path
    data = Path(__file__).resolve().parents[2] / "torch_npu" / "data" / "profile_910B2.toml"
    return tomllib.loads(data.read_text())


def test_importing_under_shadow_fixes_nothing_before_the_first_device_call(python):
    # torch_npu's import installs the cost model; that must not freeze the device configuration
    # (ASCEND_RT_VISIBLE_DEVICES may still change until the first device call).
    r = run_ok(python, """
        import os, torch, torch_npu
        print(torch_npu.npu.shadow_mode(), torch.npu.is_initialized(), torch.npu.device_count())
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "1,3"
        print(torch.npu.device_count())
        x = torch.ones(1024, 1024, device="npu:1") @ torch.ones(1024, 1024, device="npu:1")
        torch.npu.synchronize(1)
        print(torch.npu.device_count(), torch_npu.npu.shadow.simulated_time_ns(1) > 0)
    """, env={**SHADOW, "NPU_SIM_DEVICE_COUNT": "4"})
    assert r.stdout.split() == ["True", "False", "4", "2", "2", "True"]
