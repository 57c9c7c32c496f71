"""torch_npu's fused LLM operators: ``torch_npu.npu_rms_norm`` and friends.

The operators are defined in C++ (``torch.ops.npu.*``, adapter/ops/NpuLibrary.cpp) and run the
library's kernels on the npu stream. Here their autograd formulas are attached with
``torch.library.register_autograd``, so ``torch.ops.npu.X`` and ``torch_npu.X`` (the same
callable) both differentiate, and every backward is one of our kernels too.

Reference formulas (what the kernels compute):
  npu_rms_norm(x, gamma, eps)       y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps) (float32)
  npu_add_rms_norm(x1, x2, gamma)   x = x1 + x2; (y, rstd) = npu_rms_norm(x); returns (y, rstd, x)
  npu_rotary_mul(x, r1, r2, mode)   x * r1 + rotate(x) * r2; 'half': rotate = cat(-x2, x1),
                                    'interleave': pairs (x0, x1) -> (-x1, x0)
  npu_apply_rotary_pos_emb(q, k, cos, sin)   q, k = rotary_mul(q, cos, sin), ... in place
  npu_swiglu(x, dim)                a, b = x.chunk(2, dim); silu(a) * b
  npu_fusion_attention(...)         Dropout(softmax(mask(scale * (Q K^T + pse)))) V, flash attention
"""

import torch

_npu = torch.ops.npu


def _rms_norm_setup(ctx, inputs, output):
    x, gamma, _eps = inputs
    ctx.save_for_backward(x, gamma, output[1])


def _rms_norm_backward(ctx, dy, _drstd):
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = _npu.npu_rms_norm_backward(dy.contiguous(), x, gamma, rstd)
    return dx, dgamma, None


def _add_rms_norm_setup(ctx, inputs, output):
    _x1, _x2, gamma, _eps = inputs
    ctx.save_for_backward(output[2], gamma, output[1])


def _add_rms_norm_backward(ctx, dy, _drstd, dx_sum):
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = _npu.npu_rms_norm_backward(dy.contiguous(), x, gamma, rstd)
    dx = dx + dx_sum
    return dx, dx, dgamma, None


def _rotary_setup(ctx, inputs, output):
    x, r1, r2, mode = inputs
    ctx.mode = mode
    ctx.save_for_backward(x, r1, r2)


def _rotary_backward(ctx, grad):
    x, r1, r2 = ctx.saved_tensors
    dx, dr1, dr2 = _npu.npu_rotary_mul_backward(grad.contiguous(), x, r1, r2, ctx.mode)
    return dx, dr1, dr2, None


def _swiglu_setup(ctx, inputs, output):
    x, dim = inputs
    ctx.dim = dim
    ctx.save_for_backward(x)


def _swiglu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return _npu.npu_swiglu_backward(grad.contiguous(), x, ctx.dim), None


# npu_fusion_attention's arguments after (query, key, value), in schema order.
_FA_ARGS = ("head_num", "input_layout", "pse", "padding_mask", "atten_mask", "scale",
            "keep_prob", "pre_tockens", "next_tockens", "inner_precise", "prefix",
            "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync")


def _fusion_attention_setup(ctx, inputs, output):
    q, k, v = inputs[:3]
    ctx.args = dict(zip(_FA_ARGS, inputs[3:]))
    out, smax, ssum, _softmax_out, seed, offset, numels = output
    ctx.seed, ctx.offset, ctx.numels = seed, offset, numels
    ctx.save_for_backward(q, k, v, out, smax, ssum, ctx.args["atten_mask"])


def _fusion_attention_backward(ctx, dout, *_unused):
    q, k, v, out, smax, ssum, mask = ctx.saved_tensors
    a = ctx.args
    dq, dk, dv, dpse = _npu.npu_fusion_attention_grad(
        q, k, v, dout.contiguous(), a["head_num"], a["input_layout"], pse=a["pse"],
        padding_mask=a["padding_mask"], atten_mask=mask, softmax_max=smax, softmax_sum=ssum,
        attention_in=out, scale_value=a["scale"], keep_prob=a["keep_prob"],
        pre_tockens=a["pre_tockens"], next_tockens=a["next_tockens"],
        inner_precise=a["inner_precise"], seed=ctx.seed, offset=ctx.offset, numels=ctx.numels,
        prefix=a["prefix"], actual_seq_qlen=a["actual_seq_qlen"],
        actual_seq_kvlen=a["actual_seq_kvlen"], sparse_mode=a["sparse_mode"])
    # pse (the position bias) gets its gradient, scale * dScores summed to pse's shape.
    grads = [None] * len(_FA_ARGS)
    if a["pse"] is not None and ctx.needs_input_grad[3 + _FA_ARGS.index("pse")]:
        grads[_FA_ARGS.index("pse")] = dpse
    return (dq, dk, dv, *grads)


# ---- fake (meta) kernels: shapes only, for FakeTensor / torch.compile tracing -----------------

def _bnsd_shape(t, layout, heads):
    """(B, N, S, D) of a tensor in `layout`."""
    if layout == "BNSD":
        return tuple(t.shape)
    if layout == "BSND":
        return (t.shape[0], t.shape[2], t.shape[1], t.shape[3])
    if layout == "TND":
        return (1, t.shape[1], t.shape[0], t.shape[2])
    s, b = (t.shape[1], t.shape[0]) if layout == "BSH" else (t.shape[0], t.shape[1])
    return (b, heads, s, t.shape[2] // heads)


def _register_fakes() -> None:
    fake = torch.library.register_fake

    @fake("npu::npu_rms_norm")
    def _rms_norm(x, gamma, epsilon=1e-6):
        k = gamma.dim()
        return x.new_empty(x.shape), x.new_empty(tuple(x.shape[:-k]) + (1,) * k,
                                                 dtype=torch.float32)

    @fake("npu::npu_rms_norm_backward")
    def _rms_norm_backward(dy, x, gamma, rstd):
        return x.new_empty(x.shape), gamma.new_empty(gamma.shape)

    @fake("npu::npu_add_rms_norm")
    def _add_rms_norm(x1, x2, gamma, epsilon=1e-6):
        y, rstd = _rms_norm(x1, gamma)
        return y, rstd, x1.new_empty(x1.shape)

    @fake("npu::npu_rotary_mul")
    def _rotary_mul(x, r1, r2, rotary_mode="half"):
        return x.new_empty(x.shape)

    @fake("npu::npu_rotary_mul_backward")
    def _rotary_mul_backward(grad, x, r1, r2, rotary_mode="half"):
        return x.new_empty(x.shape), r1.new_empty(r1.shape), r2.new_empty(r2.shape)

    @fake("npu::npu_swiglu")
    def _swiglu(x, dim=-1):
        shape = list(x.shape)
        shape[dim] //= 2
        return x.new_empty(shape)

    @fake("npu::npu_swiglu_backward")
    def _swiglu_backward(grad, x, dim=-1):
        return x.new_empty(x.shape)

    @fake("npu::npu_fusion_attention")
    def _fusion_attention(query, key, value, head_num, input_layout, *args, **kwargs):
        B, N, S, _ = _bnsd_shape(query, input_layout, head_num)
        kv_heads = head_num
        if input_layout in ("BSH", "SBH"):
            kv_heads = key.shape[2] // (query.shape[2] // head_num)
        dv = _bnsd_shape(value, input_layout, kv_heads)[3]
        if input_layout == "BSH":
            out = query.new_empty((B, S, N * dv))
        elif input_layout == "SBH":
            out = query.new_empty((S, B, N * dv))
        elif input_layout == "BSND":
            out = query.new_empty((B, S, N, dv))
        elif input_layout == "TND":
            out = query.new_empty((S, N, dv))
        else:
            out = query.new_empty((B, N, S, dv))
        stats = (S, N, 8) if input_layout == "TND" else (B, N, S, 8)
        f32 = torch.float32
        return (out, query.new_empty(stats, dtype=f32), query.new_empty(stats, dtype=f32),
                query.new_empty((0,)), 0, 0, 0)

    @fake("npu::npu_fusion_attention_grad")
    def _fusion_attention_grad(query, key, value, dy, head_num, input_layout, **kwargs):
        pse = kwargs.get("pse")
        return (query.new_empty(query.shape), key.new_empty(key.shape),
                value.new_empty(value.shape),
                query.new_empty((0,)) if pse is None else pse.new_empty(pse.shape))


def _register_autograd() -> None:
    reg = torch.library.register_autograd
    reg("npu::npu_rms_norm", _rms_norm_backward, setup_context=_rms_norm_setup)
    reg("npu::npu_add_rms_norm", _add_rms_norm_backward, setup_context=_add_rms_norm_setup)
    reg("npu::npu_rotary_mul", _rotary_backward, setup_context=_rotary_setup)
    reg("npu::npu_swiglu", _swiglu_backward, setup_context=_swiglu_setup)
    reg("npu::npu_fusion_attention", _fusion_attention_backward,
        setup_context=_fusion_attention_setup)


_register_fakes()
_register_autograd()

npu_rms_norm = _npu.npu_rms_norm
npu_rms_norm_backward = _npu.npu_rms_norm_backward
npu_add_rms_norm = _npu.npu_add_rms_norm
npu_rotary_mul = _npu.npu_rotary_mul
npu_rotary_mul_backward = _npu.npu_rotary_mul_backward
npu_apply_rotary_pos_emb = _npu.npu_apply_rotary_pos_emb
npu_swiglu = _npu.npu_swiglu
npu_swiglu_backward = _npu.npu_swiglu_backward
npu_fusion_attention = _npu.npu_fusion_attention
npu_fusion_attention_grad = _npu.npu_fusion_attention_grad
npu_fused_infer_attention_score = _npu.npu_fused_infer_attention_score
npu_format_cast = _npu.npu_format_cast
npu_format_cast_ = _npu.npu_format_cast_
get_npu_format = _npu.get_npu_format

__all__ = [
    "npu_rms_norm", "npu_rms_norm_backward", "npu_add_rms_norm", "npu_rotary_mul",
    "npu_rotary_mul_backward", "npu_apply_rotary_pos_emb", "npu_swiglu", "npu_swiglu_backward",
    "npu_fusion_attention", "npu_fusion_attention_grad", "npu_fused_infer_attention_score",
    "npu_format_cast", "npu_format_cast_", "get_npu_format",
]
