"""LLaMA-2-7B (HF LlamaForCausalLM.from_config) trained with FSDP2 (fully_shard per decoder
layer, bf16 parameters in compute, float32 master weights, AdamW, sequence 4096) under torchrun:
meant for shadow execution, where it runs at its real size. Each rank writes
OUT_DIR/rank<R>.json with its peak HBM (allocated and reserved), the host seconds of each step
and its peak host RSS.

    NPU_SIM_SHADOW=1 torchrun --nproc_per_node 8 shadow_llama_fsdp2.py OUT_DIR [LAYERS] [STEPS]
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import torch_npu  # noqa: F401
from torch_npu.testing import peak_rss_mb

OUT_DIR = sys.argv[1]
LAYERS = int(sys.argv[2]) if len(sys.argv) > 2 else 32
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
RANK, WORLD, LOCAL = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(LOCAL)
dist.init_process_group("hccl")
mesh = init_device_mesh("npu", (WORLD,))

cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                               num_hidden_layers=LAYERS, num_attention_heads=32,
                               num_key_value_heads=32, max_position_embeddings=4096)
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(cfg)
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh, mp_policy=policy)
fully_shard(model, mesh=mesh, mp_policy=policy)
model.to_empty(device="npu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (1, 4096), device="npu")
seconds = []
for _ in range(STEPS):
    began = time.time()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch.npu.synchronize()
    seconds.append(time.time() - began)
stats = torch.npu.memory_stats()
with open(os.path.join(OUT_DIR, f"rank{RANK}.json"), "w") as f:
    json.dump({"rank": RANK, "world": WORLD, "shadow": torch_npu.npu.shadow_mode(),
               "params": sum(p.numel() for p in model.parameters()),
               "peak_allocated": stats["allocated_bytes.all.peak"],
               "peak_reserved": stats["reserved_bytes.all.peak"],
               "capacity": torch.npu.get_device_properties(LOCAL).total_memory,
               "step_seconds": seconds,
               "rss_mb": peak_rss_mb()}, f)
dist.destroy_process_group()
