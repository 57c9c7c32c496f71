"""T1 of docs/projection_measurements.md: LLaMA-2-7B, sequence 4096, 8 x 910B, bf16, no
recomputation; MindSpeed-LLM published 4672 tokens/s per card (TP1 PP2 DP4, 64 micro-batches of
1 per step, flash attention, fused RMSNorm / SwiGLU / RoPE, distributed optimizer).

Here as a user would write it with plain PyTorch: HF LlamaForCausalLM, FSDP2 over the 8 ranks
(fully_shard per decoder layer; bf16 compute, float32 master weights and gradient reduction),
AdamW, gradient accumulation, MindSpeed's fused operators swapped in (mindspeed_fused.py;
--unfused keeps HF's modules).

    NPU_SIM_SHADOW=1 torchrun --nproc_per_node 8 -m torch_npu.utils.projection --json \\
        --tokens-per-step 8192 -- examples/projection/llama2_7b_fsdp2.py --out DIR

The published step is 256 sequences over 8 ranks: 32 micro-batches of 1 per rank
(--published-micro-batches); a replay runs --micro-batches per step and scales
(replay_clock.py).
"""
import argparse
import os

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import torch_npu  # noqa: F401
import mindspeed_fused
from replay_clock import ReplayClock, write_report

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=32)
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--ffn", type=int, default=11008)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--micro-batch", type=int, default=1)
ap.add_argument("--micro-batches", type=int, default=2, help="micro-batches per replayed step")
ap.add_argument("--published-micro-batches", type=int, default=32,
                help="micro-batches per rank in the published step (256 / 8)")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--unfused", action="store_true", help="HF's own RMSNorm / RoPE / MLP")
ap.add_argument("--attention", default="sdpa", choices=["sdpa", "npu_fusion", "eager"])
ap.add_argument("--out", default=None, help="directory for rank<R>.json")
args = ap.parse_args()

rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(local)
dist.init_process_group("hccl")
mesh = init_device_mesh("npu", (world,))

if not args.unfused:
    mindspeed_fused.patch_llama()
cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                               intermediate_size=args.ffn, num_hidden_layers=args.layers,
                               num_attention_heads=args.heads, num_key_value_heads=args.heads,
                               max_position_embeddings=args.seq)
cfg._attn_implementation = args.attention
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(cfg)
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh, mp_policy=policy)
fully_shard(model, mesh=mesh, mp_policy=policy)
model.to_empty(device="npu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device="npu")

clock = ReplayClock()
for _ in range(args.steps):
    clock.step_begin()
    for _ in range(args.micro_batches):
        loss = model(input_ids=ids, labels=ids).loss / args.micro_batches
        loss.backward()
        clock.micro_end()
    opt.step()
    opt.zero_grad()
    clock.step_end()

report = write_report(args.out, clock, args.published_micro_batches, {
    "params": sum(p.numel() for p in model.parameters()),
    "tokens_per_micro_batch": args.micro_batch * args.seq})
if rank == 0:
    s = report["step_seconds_scaled"]
    print(f"[replay] micro-batch {report['t_micro_ns'] / 1e6:.1f} ms, optimizer "
          f"{report['t_opt_ns'] / 1e6:.1f} ms, step of {args.published_micro_batches} micro-batches "
          f"{s:.2f} s = {args.published_micro_batches * args.micro_batch * args.seq / s:.0f} "
          f"tokens/s per card; host {max(report['host_step_seconds']):.1f} s/step, "
          f"RSS {report['rss_mb']} MB", flush=True)
dist.destroy_process_group()
