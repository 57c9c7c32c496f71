"""Swap HF LLaMA's unfused pieces for torch_npu's fused operators, the way MindSpeed-LLM runs
LLaMA on a 910B (its `--use-fused-rmsnorm --use-fused-swiglu --use-fused-rotary-pos-emb
--use-flash-attn`).

    import mindspeed_fused
    mindspeed_fused.patch_llama()            # before the model is built
    cfg._attn_implementation = "sdpa"        # or "npu_fusion" (see below)

What changes (transformers' own modeling_llama module is patched, so any LlamaForCausalLM
built afterwards uses it):

- LlamaRMSNorm.forward  -> torch_npu.npu_rms_norm(x, weight, eps)[0]
- apply_rotary_pos_emb  -> torch_npu.npu_rotary_mul(q, cos, sin) (and k), 'half' mode, which is
                           HF's rotate_half convention
- LlamaMLP              -> one gate_up_proj Linear(h, 2 * ffn) + torch_npu.npu_swiglu + down_proj
                           (MindSpeed's linear_fc1 is the same concatenated weight)
- attention             -> "sdpa": F.scaled_dot_product_attention(is_causal=True), which on npu
                           runs the same flash-attention kernel as npu_fusion_attention;
                           "npu_fusion": torch_npu.npu_fusion_attention(layout BNSD,
                           sparse_mode 2, the compressed 2048 x 2048 causal mask) as MindSpeed
                           calls it.
"""
import torch
import torch.nn as nn
import transformers
import transformers.models.llama.modeling_llama as modeling_llama

import torch_npu


def _rms_norm_forward(self, hidden_states):
    return torch_npu.npu_rms_norm(hidden_states, self.weight, self.variance_epsilon)[0]


def _apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


class FusedSwiGLUMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size, self.intermediate_size = config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size,
                                      bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size,
                                   bias=config.mlp_bias)

    def forward(self, x):
        return self.down_proj(torch_npu.npu_swiglu(self.gate_up_proj(x), dim=-1))


_CAUSAL_MASK = {}


def npu_fusion_attention_forward(module, query, key, value, attention_mask, scaling=None,
                                 dropout=0.0, **kwargs):
    """An attention function for transformers' AttentionInterface: q/k/v [B, N, S, D]."""
    device = query.device
    if device not in _CAUSAL_MASK:
        _CAUSAL_MASK[device] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool,
                                                     device=device), 1)
    out = torch_npu.npu_fusion_attention(
        query, key, value, query.shape[1], "BNSD", atten_mask=_CAUSAL_MASK[device],
        scale=scaling if scaling is not None else query.shape[-1] ** -0.5,
        keep_prob=1.0 - dropout, sparse_mode=2)[0]
    return out.transpose(1, 2).contiguous(), None


def patch_llama() -> None:
    modeling_llama.LlamaRMSNorm.forward = _rms_norm_forward
    modeling_llama.apply_rotary_pos_emb = _apply_rotary_pos_emb
    modeling_llama.LlamaMLP = FusedSwiGLUMLP
    transformers.AttentionInterface.register("npu_fusion", npu_fusion_attention_forward)
