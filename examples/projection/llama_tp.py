"""T2 and T4 of docs/projection_measurements.md: LLaMA with 8-way tensor parallelism and
sequence parallelism on one 8 x 910B node, as MindSpeed-LLM ran them (DP 1, no recomputation,
flash attention, fused RMSNorm / SwiGLU / RoPE):

    T2  --model llama2-13b  seq 4096, micro-batch 4, global 512 (128 micro-batches), 2016 tok/s/p
    T4  --model llama3-8b   seq 8192, micro-batch 2, global 64  (32 micro-batches),  2400 tok/s/p

Written as a user would with plain PyTorch: HF LlamaForCausalLM, torch.distributed.tensor.parallel
over init_device_mesh("npu", (8,)) (llama_tp_plan.py: column/row-parallel linears, sequence
parallel norms, vocab-parallel embedding and loss), float32 parameters under bf16 autocast,
AdamW, gradient accumulation, MindSpeed's fused operators (mindspeed_fused.py; --unfused keeps
HF's modules). A replay runs --micro-batches per step and scales to the published number
(replay_clock.py).

    NPU_SIM_SHADOW=1 torchrun --nproc_per_node 8 -m torch_npu.utils.projection --json \\
        -- examples/projection/llama_tp.py --model llama2-13b --out DIR
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss_parallel

import torch_npu  # noqa: F401
import mindspeed_fused
from llama_tp_plan import parallelize_llama
from replay_clock import ReplayClock, write_report

MODELS = {  # layers, hidden, ffn, heads, kv heads, vocab, rope theta, seq, micro, global batch
    "llama2-13b": dict(layers=40, hidden=5120, ffn=13824, heads=40, kv_heads=40, vocab=32000,
                       rope_theta=10000.0, seq=4096, micro_batch=4, global_batch=512),
    "llama3-8b": dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256,
                      rope_theta=500000.0, seq=8192, micro_batch=2, global_batch=64),
}

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="llama2-13b", choices=sorted(MODELS))
for key in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq", "micro_batch",
            "global_batch"):
    ap.add_argument("--" + key.replace("_", "-"), type=int, default=None)
ap.add_argument("--micro-batches", type=int, default=2, help="micro-batches per replayed step")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--no-sequence-parallel", action="store_true")
ap.add_argument("--unfused", action="store_true", help="HF's own RMSNorm / RoPE / MLP")
ap.add_argument("--out", default=None, help="directory for rank<R>.json")
args = ap.parse_args()
m = dict(MODELS[args.model])
m.update({k: v for k, v in vars(args).items() if k in m and v is not None})

rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(local)
dist.init_process_group("hccl")
mesh = init_device_mesh("npu", (world,))

if not args.unfused:
    mindspeed_fused.patch_llama()
cfg = transformers.LlamaConfig(vocab_size=m["vocab"], hidden_size=m["hidden"],
                               intermediate_size=m["ffn"], num_hidden_layers=m["layers"],
                               num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
                               max_position_embeddings=m["seq"], rope_theta=m["rope_theta"])
cfg._attn_implementation = "sdpa"
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(cfg)
parallelize_llama(model, mesh, sequence_parallel=not args.no_sequence_parallel)
model.to_empty(device="npu")  # (a real run would load or initialize the weights here)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

b, s = m["micro_batch"], m["seq"]
ids = torch.randint(0, m["vocab"], (b, s), device="npu")
labels = torch.randint(0, m["vocab"], (b * s,), device="npu")
pos = torch.arange(s, device="npu").unsqueeze(0)
n_published = m["global_batch"] // m["micro_batch"]  # DP 1: every rank runs every micro-batch

clock = ReplayClock()
for _ in range(args.steps):
    clock.step_begin()
    for _ in range(args.micro_batches):
        with torch.autocast("npu", dtype=torch.bfloat16):
            logits = model(input_ids=ids, position_ids=pos).logits
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels) / args.micro_batches
            loss.backward()
        clock.micro_end()
    opt.step()
    opt.zero_grad()
    clock.step_end()

report = write_report(args.out, clock, n_published, {
    "model": args.model, "config": m,
    "params_local": sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                        for p in model.parameters()),
    "tokens_per_micro_batch": b * s})
if rank == 0:
    sec = report["step_seconds_scaled"]
    print(f"[replay] {args.model}: micro-batch {report['t_micro_ns'] / 1e6:.1f} ms, optimizer "
          f"{report['t_opt_ns'] / 1e6:.1f} ms, step of {n_published} micro-batches {sec:.2f} s = "
          f"{m['global_batch'] * s / world / sec:.0f} tokens/s per card; host "
          f"{max(report['host_step_seconds']):.1f} s/step, RSS {report['rss_mb']} MB", flush=True)
dist.destroy_process_group()
