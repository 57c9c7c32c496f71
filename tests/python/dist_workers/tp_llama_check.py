"""DTensor tensor parallelism on npu against a CPU reference: a tiny HF LLaMA parallelized with
examples/projection/llama_tp_plan.py (TP, optionally sequence parallel, loss_parallel) over
init_device_mesh("npu", (WORLD,)); every rank also runs the unsharded model on the CPU with the
same weights and batch, and compares the loss and every parameter's gradient (full_tensor()).
Rank 0 writes OUT_DIR/tp.json.

    torchrun --nproc_per_node 2 tp_llama_check.py OUT_DIR [sp|nosp] [fused|unfused]
"""
import copy
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

import torch_npu  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "projection"))
from llama_tp_plan import parallelize_llama, shard_gate_up  # noqa: E402

OUT_DIR = sys.argv[1]
SP = (sys.argv[2] if len(sys.argv) > 2 else "sp") == "sp"
FUSED = (sys.argv[3] if len(sys.argv) > 3 else "unfused") == "fused"
rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
torch.npu.set_device(local)
dist.init_process_group("hccl")
mesh = init_device_mesh("npu", (world,))

torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=32)
cfg._attn_implementation = "sdpa"
ref = transformers.LlamaForCausalLM(cfg).float()
state = copy.deepcopy(ref.state_dict())
ids = torch.randint(0, cfg.vocab_size, (2, 16))
pos = torch.arange(16).unsqueeze(0)
labels = torch.randint(0, cfg.vocab_size, (2, 16))


def loss_of(m, dev, parallel):
    logits = m(input_ids=ids.to(dev), position_ids=pos.to(dev)).logits
    if parallel:
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.to(dev).flatten())
            loss.backward()
    else:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
    return loss


ref_loss = loss_of(ref, "cpu", False)  # before mindspeed_fused patches transformers' classes
if FUSED:
    import mindspeed_fused
    mindspeed_fused.patch_llama()
model = transformers.LlamaForCausalLM(cfg)
if FUSED:  # the fused gate_up weight, laid out per rank as [gate_r; up_r]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}.mlp."
        state[p + "gate_up_proj.weight"] = shard_gate_up(
            torch.cat([state.pop(p + "gate_proj.weight"), state.pop(p + "up_proj.weight")]), world)
model.load_state_dict(state)
model = model.npu()
parallelize_llama(model, mesh, sequence_parallel=SP, loss_parallel=True)
loss = loss_of(model, "npu", True)
loss_value = (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()
worst = {}
ref_grads = dict(ref.named_parameters())
for name, p in model.named_parameters():
    g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
    g = g.cpu()
    if name.endswith("gate_up_proj.weight"):
        base = name.removesuffix("gate_up_proj.weight")
        full = torch.cat([ref_grads[base + "gate_proj.weight"].grad,
                          ref_grads[base + "up_proj.weight"].grad])
        r = shard_gate_up(full, world)
    else:
        r = ref_grads[name].grad
    worst[name] = float((g - r).abs().max() / (r.abs().max() + 1e-12))
if rank == 0:
    with open(os.path.join(OUT_DIR, "tp.json"), "w") as f:
        json.dump({"loss": loss_value, "ref_loss": ref_loss.item(), "grad_rel_err": worst}, f)
dist.destroy_process_group()
