"""Megatron-style tensor parallelism for HF LlamaForCausalLM with torch.distributed.tensor.parallel:
the plan torchtitan uses for LLaMA, written for transformers' module names.

- attention: q/k/v_proj column-parallel (each rank its heads), o_proj row-parallel;
- MLP: gate/up_proj (or mindspeed_fused's gate_up_proj) column-parallel, down_proj row-parallel;
- sequence parallel (Korthikanti et al. 2022): between the blocks the activations are sharded
  along the sequence (Shard(1)); RMSNorm runs on the sequence shard; the all-gather before a
  column-parallel linear and the reduce-scatter after a row-parallel one replace TP's two
  all-reduces;
- embedding row-parallel (vocab-sharded), lm_head column-parallel with the logits left sharded
  along the vocabulary, for loss_parallel's cross-entropy (no full-vocab logits on a rank).

A fused gate_up_proj sharded column-wise as one Linear would split [gate; up] wrongly (rank 0
would get all of gate); mindspeed_fused.FusedSwiGLUMLP is sharded per rank as [gate_r; up_r],
which is what Megatron's linear_fc1 holds: see `shard_gate_up`.
"""
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)


def parallelize_llama(model, mesh, sequence_parallel: bool = True, loss_parallel: bool = True):
    act = Shard(1) if sequence_parallel else Replicate()
    top = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=act),
        "lm_head": ColwiseParallel(input_layouts=act,
                                   output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                   use_local_output=not loss_parallel),
    }
    if sequence_parallel:
        top["model.norm"] = SequenceParallel()
    parallelize_module(model, mesh, top)
    for layer in model.model.layers:
        plan = {
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": act},
                                            desired_input_kwarg_layouts={
                                                "hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=act),
            "mlp": PrepareModuleInput(input_layouts=(act,), desired_input_layouts=(Replicate(),)),
            "mlp.down_proj": RowwiseParallel(output_layouts=act),
        }
        if hasattr(layer.mlp, "gate_up_proj"):
            plan["mlp.gate_up_proj"] = ColwiseParallel()
        else:
            plan["mlp.gate_proj"] = ColwiseParallel()
            plan["mlp.up_proj"] = ColwiseParallel()
        if sequence_parallel:
            plan["input_layernorm"] = SequenceParallel()
            plan["post_attention_layernorm"] = SequenceParallel()
        parallelize_module(layer, mesh, plan)
    return model


def shard_gate_up(weight: torch.Tensor, tp: int) -> torch.Tensor:
    """Reorder a full [gate; up] weight so that a contiguous column shard per rank is
    [gate_r; up_r] (Megatron's layout for a fused SwiGLU's fc1)."""
    gate, up = weight.chunk(2, dim=0)
    return torch.cat([torch.cat([g, u]) for g, u in zip(gate.chunk(tp), up.chunk(tp))])
