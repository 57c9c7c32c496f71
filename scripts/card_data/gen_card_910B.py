"""Regenerates torch_npu/data/card_910B.toml: which operators torch_npu runs natively on a 910B
(Atlas A2 training series), with which dtypes, and which go to AI CPU or fall back to the host CPU.

    python scripts/card_data/gen_card_910B.py --op-plugin DIR --torch-npu DIR [-o OUT]

DIR is a git checkout or bare clone of github.com/Ascend/op-plugin and github.com/Ascend/pytorch
(torch_npu); files are read with `git show COMMIT:PATH`, and the commit is written into the data.

How a row is decided (facts are read from the sources; nothing is copied):
  - registered: the aten overload appears in op-plugin's op_plugin/config/op_plugin_functions.yaml
    with acl_op / op_api / dvm for v2.13, or in torch_npu's npu_native_functions.yaml
  - composite: not registered, but PyTorch 2.13 has a CompositeImplicitAutograd or
    CompositeExplicitAutograd kernel, so the op decomposes into other (listed) ops
  - cpu_fallback: neither; torch_npu's boxed PrivateUse1 fallback runs it on the host
  - dtypes: the union of the dtype lists that torch_npu's API support pages for PyTorch 2.13
    (docs/zh/api/native_api/pytorch_2-13-0/*.md) give for the Python APIs that reach the op, or
    a CANN aclnn kernel page (CURATED below), which is exhaustive for that kernel; the page lists
    are the dtypes Huawei verified, so a dtype outside them is "unknown", not "unsupported",
    unless a kernel-level source says the list is complete
  - aicpu / host sync / HF32: from op-plugin's kernel sources (CURATED, each with its source)
Run it again after a new op-plugin / torch_npu release and review the diff.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import yaml

TORCH_VERSION = "v2.13"
DOCS = "docs/zh/api/native_api/pytorch_2-13-0"
DOC_FILES = ["torch.md", "torch-Tensor.md", "torch-nn-functional.md", "torch-nn.md",
             "torch-linalg.md", "torch-special.md", "torch-fft.md"]
DTYPE_WORDS = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64",
               "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
               "int64": "int64", "bool": "bool", "complex64": "complex64",
               "complex128": "complex128"}
ALL = "*"

# CANN operator-library pages (hiascend.com) read for kernel-level dtype lists on Atlas A2.
CANN_PAGES = {
    "cann_aclnnMm": "https://www.hiascend.com/document/detail/zh/canncommercial/800/apiref/aolapi/context/aclnnMm.md",
    "cann_aclnnBatchMatMul": "https://hiascend.com/document/detail/zh/canncommercial/80RC3/apiref/aolapi/context/aclnnBatchMatMul.md",
    "cann_aclnnAddmm": "https://hiascend.com/document/detail/zh/canncommercial/80RC3/apiref/aolapi/context/aclnnAddmm&aclnnInplaceAddmm.md",
    "cann_aclnnConvolution": "https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/80RC3alpha003/apiref/aolapi/context/aclnnConvolution.md",
    "cann_aclnnConvDepthwise2d": "https://www.hiascend.com/document/detail/zh/canncommercial/800/apiref/aolapi/context/aclnnConvDepthwise2d.md",
    "cann_aclnnAddmmWeightNz": "https://www.hiascend.com/document/detail/zh/canncommercial/850/API/aolapi/context/ops-nn/aclnnAddmmWeightNz.md",
}
# Public reports of the real message (for its shape; the values in them are theirs).
OBSERVED = {
    "observed_sglang_29011": "https://github.com/sgl-project/sglang/pull/29011",
    "observed_vllm_ascend_6636": "https://github.com/vllm-project/vllm-ascend/issues/6636",
}

FLOATS = ["float16", "bfloat16", "float32"]

# name: aten overload-packet name (or a full overload name where overloads differ).
# apis: Python APIs whose torch_npu support page describes this op's dtypes.
# Optional: dtypes (+ dtype_src) from a kernel-level source, exhaustive -> other="unsupported";
# aicpu (dtype list), sync, hf32 ("matmul"|"conv"), note, src (extra source keys).
CURATED: list[dict] = [
    # --- matmul family (cube unit; HF32 via torch.npu.matmul.allow_hf32, default False)
    dict(name="mm", apis=["torch.mm", "torch.matmul"], dtypes=FLOATS, dtype_src="cann_aclnnMm",
         aclnn="aclnnMm", hf32="matmul"),
    dict(name="bmm", apis=["torch.bmm", "torch.matmul"], dtypes=FLOATS,
         dtype_src="cann_aclnnBatchMatMul", aclnn="aclnnBatchMatMul", hf32="matmul"),
    dict(name="addmm", apis=["torch.addmm", "torch.nn.functional.linear"], dtypes=FLOATS,
         dtype_src="cann_aclnnAddmm", aclnn="aclnnAddmm", hf32="matmul"),
    dict(name="baddbmm", apis=["torch.baddbmm"], aclnn="aclnnBaddbmm", hf32="matmul"),
    dict(name="addbmm", apis=["torch.addbmm"], hf32="matmul"),
    dict(name="addmv", apis=["torch.addmv"], hf32="matmul"),
    dict(name="mv", apis=["torch.mv"], hf32="matmul"),
    dict(name="matmul", apis=["torch.matmul"], hf32="matmul"),
    dict(name="linear", apis=["torch.nn.functional.linear"], hf32="matmul"),
    dict(name="dot", apis=["torch.dot"]),
    # --- convolution (HF32 via torch.npu.conv.allow_hf32, default True)
    dict(name="convolution", apis=["torch.nn.functional.conv2d", "torch.nn.functional.conv1d",
                                   "torch.nn.functional.conv3d"],
         dtypes=FLOATS, dtype_src="cann_aclnnConvolution", aclnn="aclnnConvolution", hf32="conv",
         note="PyTorch's CompositeExplicitAutograd convolution is replaced by op-plugin's own "
              "kernel (aclnnConvolution)."),
    dict(name="convolution_backward", apis=["torch.nn.functional.conv2d"], dtypes=FLOATS,
         dtype_src="cann_aclnnConvolution", hf32="conv"),
    dict(name="_convolution", apis=["torch.nn.functional.conv2d"], dtypes=FLOATS,
         dtype_src="cann_aclnnConvolution", hf32="conv"),
    dict(name="_conv_depthwise2d", apis=["torch.nn.functional.conv2d"], dtypes=FLOATS,
         dtype_src="cann_aclnnConvDepthwise2d", hf32="conv"),
    # --- normalization
    dict(name="native_layer_norm", apis=["torch.nn.functional.layer_norm", "torch.nn.LayerNorm"]),
    dict(name="native_layer_norm_backward", apis=["torch.nn.functional.layer_norm"]),
    dict(name="native_batch_norm", apis=["torch.nn.functional.batch_norm", "torch.nn.BatchNorm2d"]),
    dict(name="native_batch_norm_backward", apis=["torch.nn.functional.batch_norm"]),
    dict(name="_native_batch_norm_legit", apis=["torch.nn.functional.batch_norm"]),
    dict(name="_native_batch_norm_legit_functional", apis=["torch.nn.functional.batch_norm"]),
    dict(name="native_group_norm", apis=["torch.nn.functional.group_norm", "torch.nn.GroupNorm"]),
    dict(name="native_group_norm_backward", apis=["torch.nn.functional.group_norm"]),
    dict(name="batch_norm_update_stats", apis=[]),
    dict(name="_fused_rms_norm", apis=["torch.nn.functional.rms_norm"]),
    # --- activations
    dict(name="relu", apis=["torch.nn.functional.relu", "torch.relu"]),
    dict(name="threshold_backward", apis=["torch.nn.functional.relu"]),
    dict(name="gelu", apis=["torch.nn.functional.gelu"]),
    dict(name="gelu_backward", apis=["torch.nn.functional.gelu"]),
    dict(name="silu", apis=["torch.nn.functional.silu"]),
    dict(name="silu_backward", apis=["torch.nn.functional.silu"]),
    dict(name="sigmoid", apis=["torch.sigmoid", "torch.nn.functional.sigmoid"]),
    dict(name="tanh", apis=["torch.tanh", "torch.nn.functional.tanh"]),
    dict(name="hardswish", apis=["torch.nn.functional.hardswish"]),
    dict(name="leaky_relu", apis=["torch.nn.functional.leaky_relu"]),
    dict(name="softplus", apis=["torch.nn.functional.softplus"]),
    dict(name="mish", apis=["torch.nn.functional.mish"]),
    dict(name="elu", apis=["torch.nn.functional.elu"]),
    # --- softmax / losses
    dict(name="_softmax", apis=["torch.nn.functional.softmax", "torch.softmax"]),
    dict(name="_softmax_backward_data", apis=["torch.nn.functional.softmax"]),
    dict(name="_log_softmax", apis=["torch.nn.functional.log_softmax"]),
    dict(name="_log_softmax_backward_data", apis=["torch.nn.functional.log_softmax"]),
    dict(name="nll_loss_forward", apis=["torch.nn.functional.nll_loss",
                                        "torch.nn.functional.cross_entropy"]),
    dict(name="nll_loss_backward", apis=["torch.nn.functional.nll_loss",
                                         "torch.nn.functional.cross_entropy"]),
    dict(name="mse_loss", apis=["torch.nn.functional.mse_loss"]),
    dict(name="binary_cross_entropy_with_logits",
         apis=["torch.nn.functional.binary_cross_entropy_with_logits"]),
    # --- attention
    dict(name="scaled_dot_product_attention",
         apis=["torch.nn.functional.scaled_dot_product_attention"],
         note="op-plugin registers aten::scaled_dot_product_attention itself (op_api, v2.5+): "
              "4-D BNSD query/key/value of float16, bfloat16 or float32 with a bool mask or none, "
              "head counts within limits and SoC 910B1 or later go to npu_fusion_attention "
              "(FlashAttentionScore); inference-only fp16/bf16 with head dim a multiple of 16 may "
              "go to npu_fused_infer_attention_score; float32 with a head dim not a multiple of 4, "
              "or other cases, run the math decomposition (_scaled_dot_product_attention_math).",
         src=["op_plugin_sdpa"]),
    dict(name="_scaled_dot_product_fused_attention_overrideable",
         apis=["torch.nn.functional.scaled_dot_product_attention"],
         equivalent="scaled_dot_product_attention",
         note="Not an op torch_npu registers: SimNPU's adapter reaches PyTorch's fused-attention "
              "overrideable op, where torch_npu intercepts aten::scaled_dot_product_attention "
              "first. This row stands for that path (see scaled_dot_product_attention).",
         src=["op_plugin_sdpa"]),
    dict(name="_scaled_dot_product_fused_attention_overrideable_backward",
         apis=["torch.nn.functional.scaled_dot_product_attention"],
         equivalent="npu_fusion_attention_grad",
         note="SimNPU's backward of the fused-attention path; on the card the backward of "
              "npu_fusion_attention (npu_fusion_attention_grad).",
         src=["op_plugin_sdpa"]),
    dict(name="_scaled_dot_product_flash_attention", apis=[]),
    # --- embedding / indexing
    dict(name="embedding", apis=["torch.nn.functional.embedding"],
         note="dtype is the weight's; indices int32/int64"),
    dict(name="embedding_dense_backward", apis=["torch.nn.functional.embedding"]),
    dict(name="index", apis=["torch.index_select"],
         note="Tensor indexing x[idx]; a bool mask index has a data-dependent output size."),
    dict(name="index_put_", apis=["Tensor.index_put_"],
         note="op-plugin's aclop path uses AI CPU for non-contiguous indices, more than 20000 "
              "indices, float64 self or broadcast indices; the op_api (aclnn) path is used on 910B "
              "when CANN provides aclnnIndexPutImpl.",
         src=["op_plugin_index_put_aclop"]),
    dict(name="index_select", apis=["torch.index_select"]),
    dict(name="gather", apis=["torch.gather"]),
    dict(name="scatter", apis=["torch.scatter"]),
    dict(name="scatter_add", apis=["torch.scatter_add"]),
    dict(name="masked_fill", apis=["Tensor.masked_fill"]),
    dict(name="masked_fill_", apis=["Tensor.masked_fill"]),
    dict(name="where", apis=["torch.where"]),
    dict(name="nonzero", apis=["torch.nonzero"], sync=True, src=["op_plugin_nonzero"]),
    dict(name="masked_select", apis=["torch.masked_select"], sync=True,
         src=["op_plugin_masked_select"]),
    dict(name="_unique2", apis=["torch.unique"], sync=True, src=["op_plugin_unique2"]),
    dict(name="unique_consecutive", apis=["torch.unique_consecutive"], sync=True,
         src=["op_plugin_unique_consecutive"]),
    dict(name="unique_dim", apis=["torch.unique"], sync=True, src=["op_plugin_unique_dim"]),
    dict(name="isin", apis=["torch.isin"]),
    # --- elementwise
    dict(name="add", apis=["torch.add"]),
    dict(name="add_", apis=["torch.add"]),
    dict(name="sub", apis=["torch.sub"]),
    dict(name="mul", apis=["torch.mul"]),
    dict(name="mul_", apis=["torch.mul"]),
    dict(name="div", apis=["torch.div"]),
    dict(name="rsub", apis=["torch.rsub"]),
    dict(name="neg", apis=["torch.neg"]),
    dict(name="pow", apis=["torch.pow"]),
    dict(name="rsqrt", apis=["torch.rsqrt"]),
    dict(name="sqrt", apis=["torch.sqrt"]),
    dict(name="reciprocal", apis=["torch.reciprocal"]),
    dict(name="exp", apis=["torch.exp"]),
    dict(name="log", apis=["torch.log"]),
    dict(name="sin", apis=["torch.sin"]),
    dict(name="cos", apis=["torch.cos"]),
    dict(name="erf", apis=["torch.erf"]),
    dict(name="abs", apis=["torch.abs"]),
    dict(name="clamp", apis=["torch.clamp"]),
    dict(name="clamp_min", apis=["torch.clamp_min", "torch.clamp"]),
    dict(name="lerp", apis=["torch.lerp"]),
    dict(name="addcmul", apis=["torch.addcmul"]),
    dict(name="addcdiv", apis=["torch.addcdiv"]),
    dict(name="eq", apis=["torch.eq"]),
    dict(name="ne", apis=["torch.ne"]),
    dict(name="lt", apis=["torch.lt"]),
    dict(name="le", apis=["torch.le"]),
    dict(name="gt", apis=["torch.gt"]),
    dict(name="ge", apis=["torch.ge"]),
    dict(name="bitwise_and", apis=["torch.bitwise_and"]),
    dict(name="bitwise_or", apis=["torch.bitwise_or"]),
    dict(name="bitwise_not", apis=["torch.bitwise_not"]),
    dict(name="logical_not", apis=["torch.logical_not"]),
    dict(name="logical_and", apis=["torch.logical_and"]),
    dict(name="sinc", apis=["torch.sinc"]),
    dict(name="nan_to_num", apis=["torch.nan_to_num"]),
    dict(name="triu", apis=["torch.triu"]),
    dict(name="tril", apis=["torch.tril"]),
    dict(name="fill_", apis=["Tensor.fill_"]),
    dict(name="zero_", apis=["Tensor.zero_"]),
    # --- reductions / sort
    dict(name="sum", apis=["torch.sum"]),
    dict(name="mean", apis=["torch.mean"]),
    dict(name="max", apis=["torch.max"]),
    dict(name="min", apis=["torch.min"]),
    dict(name="amax", apis=["torch.amax"]),
    dict(name="argmax", apis=["torch.argmax"]),
    dict(name="any", apis=["torch.any"]),
    dict(name="all", apis=["torch.all"]),
    dict(name="cumsum", apis=["torch.cumsum"],
         note="op-plugin's aclop Cumsum path notes AI CPU for dim == 0; the op_api path is used "
              "on 910B."),
    dict(name="logsumexp", apis=["torch.logsumexp"]),
    dict(name="var", apis=["torch.var"]),
    dict(name="std", apis=["torch.std"]),
    dict(name="linalg_vector_norm", apis=["torch.linalg.vector_norm", "torch.norm"]),
    dict(name="topk", apis=["torch.topk"]),
    dict(name="sort", apis=["torch.sort"], aicpu=["int32", "int64"],
         note="AI CPU for int32/int64 is inferred: op-plugin's argsort, which calls at::sort, "
              "warns that kernel ArgSort cannot take int32/int64 on AI Core and runs on AI CPU.",
         src=["op_plugin_argsort"]),
    dict(name="argsort", apis=["torch.argsort"], aicpu=["int32", "int64"],
         note="op-plugin warns once: kernel [ArgSort] can not support dtype int32 or int64 on "
              "AiCore, now running on AiCpu; cast to float32 for speed.",
         src=["op_plugin_argsort"]),
    dict(name="equal", apis=["torch.equal"], sync=True, src=["op_plugin_equal"],
         note="returns a Python bool: reads the result on the host (item())"),
    # --- pooling / resize
    dict(name="max_pool2d_with_indices", apis=["torch.nn.functional.max_pool2d"]),
    dict(name="max_pool2d_with_indices_backward", apis=["torch.nn.functional.max_pool2d"]),
    dict(name="_adaptive_avg_pool2d", apis=["torch.nn.functional.adaptive_avg_pool2d"]),
    dict(name="_adaptive_avg_pool2d_backward", apis=["torch.nn.functional.adaptive_avg_pool2d"]),
    dict(name="adaptive_avg_pool2d", apis=["torch.nn.functional.adaptive_avg_pool2d"]),
    dict(name="avg_pool2d", apis=["torch.nn.functional.avg_pool2d"],
         note="uses the cube unit with HF32 off (cube math type from a fixed false), so "
              "torch.npu.conv.allow_hf32 does not apply", src=["op_plugin_avg_pool2d"]),
    dict(name="upsample_nearest2d", apis=["torch.nn.functional.interpolate"]),
    dict(name="upsample_bilinear2d", apis=["torch.nn.functional.interpolate"]),
    dict(name="constant_pad_nd", apis=["torch.nn.functional.pad"]),
    # --- dropout / random
    dict(name="native_dropout", apis=["torch.nn.functional.dropout"]),
    dict(name="native_dropout_backward", apis=["torch.nn.functional.dropout"]),
    dict(name="bernoulli_", apis=["Tensor.bernoulli_"]),
    dict(name="uniform_", apis=["Tensor.uniform_"]),
    dict(name="normal_", apis=["Tensor.normal_"]),
    dict(name="randperm", apis=["torch.randperm"]),
    dict(name="multinomial", apis=["torch.multinomial"]),
    # --- tensor creation and movement
    dict(name="cat", apis=["torch.cat"]),
    dict(name="stack", apis=["torch.stack"]),
    dict(name="arange", apis=["torch.arange"]),
    dict(name="_to_copy", apis=["Tensor.to"],
         note="a copy to or from the host is a device-host transfer; a blocking one waits for "
              "the stream"),
    dict(name="copy_", apis=["Tensor.copy_"]),
    dict(name="clone", apis=["torch.clone"]),
    dict(name="_local_scalar_dense", apis=["Tensor.item"], sync=True, anydtype=True,
         note="Tensor.item() and every Python scalar read of an npu tensor: copies to the host and "
              "waits for the stream"),
    dict(name="repeat_interleave", apis=["torch.repeat_interleave"],
         note="with a tensor of repeats the output size depends on the data"),
    # --- view / metadata ops: no device kernel, any dtype
    *[dict(name=n, apis=[], view=True) for n in (
        "view", "_unsafe_view", "t", "transpose", "detach", "alias", "expand", "slice", "select",
        "split", "split_with_sizes", "unsqueeze", "squeeze", "permute", "as_strided",
        "_reshape_alias", "unbind", "narrow", "lift_fresh", "_has_compatible_shallow_copy_type",
        "view_as_real", "unfold")],
    # --- factories
    *[dict(name=n, apis=[], factory=True) for n in (
        "empty", "empty_strided", "empty_like", "zeros", "ones", "full", "zeros_like",
        "ones_like", "full_like", "scalar_tensor", "new_empty_strided")],
    # --- decompositions seen in training graphs
    dict(name="slice_backward", apis=[]),
    dict(name="select_backward", apis=[]),
    # --- optimizers (foreach / fused) and AMP
    *[dict(name=n, apis=["torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD"],
           note="foreach path of torch.optim (default on a device with foreach kernels)")
      for n in ("_foreach_add_", "_foreach_mul_", "_foreach_addcdiv_", "_foreach_addcmul_",
                "_foreach_div_", "_foreach_lerp_", "_foreach_sqrt", "_foreach_sub_",
                "_foreach_neg", "_foreach_zero_", "_foreach_copy_", "_foreach_norm",
                "_foreach_maximum_", "_foreach_pow", "_foreach_exp", "_foreach_clamp_min_",
                "_foreach_sign", "_foreach_add", "_foreach_mul", "_foreach_sqrt_", "_foreach_div")],
    dict(name="_fused_adamw_", apis=[]),
    dict(name="_fused_adam_", apis=[],
         note="torch.optim.Adam(fused=True) on npu: op-plugin registers _fused_adamw_ and "
              "_fused_sgd_ but not _fused_adam_, so it falls back to the host (torch_npu's "
              "NpuFusedAdam is the native route)."),
    dict(name="_fused_sgd_", apis=[]),
    dict(name="_amp_foreach_non_finite_check_and_unscale_", apis=["torch.amp.GradScaler"],
         sync=True, src=["op_plugin_amp_unscale"],
         note="conditional sync: the overflow-status path (INF_NAN mode off) reads the status "
              "with aclrtGetOverflowStatus and synchronizes the stream"),
    dict(name="_amp_update_scale_", apis=["torch.amp.GradScaler"]),
    # --- linear algebra and others without a registration (host fallback)
    dict(name="linalg_cholesky_ex", structured=True, apis=["torch.linalg.cholesky"]),
    dict(name="_linalg_eigh", structured=True, apis=["torch.linalg.eigh"]),
    dict(name="linalg_lu_factor_ex", structured=True, apis=["torch.linalg.lu_factor"]),
    dict(name="_linalg_solve_ex", structured=True, apis=["torch.linalg.solve"]),
    dict(name="linalg_inv_ex", structured=True, apis=["torch.linalg.inv"]),
    dict(name="_linalg_det", structured=True, apis=["torch.linalg.det"]),
    dict(name="geqrf", apis=["torch.geqrf"]),
    dict(name="linalg_qr", apis=["torch.linalg.qr"]),
    dict(name="_linalg_svd", apis=["torch.linalg.svd"]),
    dict(name="mode", apis=["torch.mode"]),
    dict(name="_cummax_helper", apis=["torch.cummax"]),
    dict(name="_cummin_helper", apis=["torch.cummin"]),
    dict(name="logcumsumexp", apis=["torch.logcumsumexp"]),
    dict(name="poisson", apis=["torch.poisson"]),
    dict(name="_standard_gamma", apis=[]),
    dict(name="binomial", apis=[]),
    dict(name="histc", apis=["torch.histc"]),
    dict(name="bincount", apis=["torch.bincount"]),
    dict(name="searchsorted", apis=["torch.searchsorted"]),
    dict(name="kthvalue", apis=["torch.kthvalue"]),
    dict(name="median", apis=["torch.median"]),
    dict(name="_fft_r2c", apis=["torch.fft.rfft"]),
    dict(name="_fft_c2c", apis=["torch.fft.fft"]),
]

# npu_* custom ops SimNPU implements, and ones torch_npu calls itself (npu_view_copy). dtypes
# from op-plugin's per-API pages (Atlas A2 lines). Optional: any (every dtype), aicpu (dtype
# list), hf32, note, src (extra source keys, from CODE_SOURCES).
NPU_DOC = "docs/zh/custom_APIs/torch_npu/"
CUSTOM: list[dict] = [
    dict(name="npu_rms_norm", doc="（beta）torch_npu-npu_rms_norm.md", dtypes=FLOATS,
         note="gamma float32 or the same dtype as self; rstd is float32"),
    dict(name="npu_rms_norm_backward", doc=None, dtypes=None),
    dict(name="npu_add_rms_norm", doc="torch_npu-npu_add_rms_norm.md", dtypes=FLOATS),
    dict(name="npu_rotary_mul", doc="torch_npu-npu_rotary_mul.md", dtypes=FLOATS),
    dict(name="npu_rotary_mul_backward", doc=None, dtypes=None),
    dict(name="npu_apply_rotary_pos_emb", doc="torch_npu-apply_rotary_pos_emb.md", dtypes=FLOATS,
         note="query, key, cos, sin of one dtype; head dim 64 or 128"),
    dict(name="npu_swiglu", doc="（beta）torch_npu-npu_swiglu.md", dtypes=None),
    dict(name="npu_swiglu_backward", doc=None, dtypes=None),
    dict(name="npu_fusion_attention", doc="torch_npu-npu_fusion_attention.md", dtypes=FLOATS),
    dict(name="npu_fusion_attention_grad", doc=None, dtypes=None),
    dict(name="npu_fused_infer_attention_score", doc="torch_npu-npu_fused_infer_attention_score.md",
         dtypes=["float16", "bfloat16"],
         note="query float16/bfloat16; key/value may also be int8 or int4 (int32 container) in "
              "the quantized modes"),
    dict(name="npu_format_cast", doc="（beta）torch_npu-npu_format_cast.md", dtypes=None, any=True),
    dict(name="npu_format_cast_", doc="（beta）torch_npu-npu_format_cast_.md", dtypes=None, any=True),
    dict(name="get_npu_format", doc=None, dtypes=None, any=True),
    dict(name="npu_silu", doc="（beta）torch_npu-npu_silu.md", dtypes=["float16", "float32"]),
    dict(name="npu_mish", doc="（beta）torch_npu-npu_mish.md", dtypes=["float16", "float32"]),
    dict(name="fast_gelu", doc="（beta）torch_npu-fast_gelu.md", dtypes=["float16", "float32"]),
    dict(name="npu_fast_gelu", doc="torch_npu-npu_fast_gelu.md", dtypes=FLOATS),
    dict(name="npu_transpose", doc="（beta）torch_npu-npu_transpose.md", dtypes=None),
    dict(name="npu_confusion_transpose", doc="（beta）torch_npu-npu_confusion_transpose.md",
         dtypes=["float16", "float32", "int8", "int16", "int32", "int64", "uint8"],
         note="the page also lists uint16, uint32, uint64"),
    dict(name="npu_broadcast", doc="（beta）torch_npu-npu_broadcast.md", dtypes=None),
    dict(name="npu_dtype_cast", doc="（beta）torch_npu-npu_dtype_cast.md", dtypes=None),
    dict(name="npu_layer_norm_eval", doc="（beta）torch_npu-npu_layer_norm_eval.md", dtypes=None),
    dict(name="npu_linear", doc="（beta）torch_npu-npu_linear.md",
         dtypes=["float32", "float16", "int32", "int8"], hf32="matmul"),
    dict(name="npu_bmmV2", doc="（beta）torch_npu-npu_bmmV2.md",
         dtypes=["float16", "float32", "int32"], hf32="matmul"),
    dict(name="npu_one_hot", doc="（beta）torch_npu-npu_one_hot.md", dtypes=None),
    dict(name="npu_softmax_cross_entropy_with_logits",
         doc="（beta）torch_npu-npu_softmax_cross_entropy_with_logits.md", dtypes=None,
         note="the page excludes bfloat16 only on Atlas training / inference series (not A2)"),
    dict(name="npu_sort_v2", doc="（beta）torch_npu-npu_sort_v2.md", dtypes=None,
         note="last dimension only"),
    dict(name="npu_max", doc="（beta）torch_npu-npu_max.md", dtypes=None),
    dict(name="npu_min", doc="（beta）torch_npu-npu_min.md", dtypes=None),
    dict(name="npu_slice", doc="（beta）torch_npu-npu_slice.md", dtypes=None),
    dict(name="npu_reshape", doc="（beta）torch_npu-npu_reshape.md", dtypes=None),
    dict(name="npu_bert_apply_adam", doc="（beta）torch_npu-npu_bert_apply_adam.md", dtypes=None),
    # torch_npu's general device-to-device copy (copy_d2d_last_method) for views no faster path
    # takes; the aclop ViewCopy kernel.
    dict(name="npu_view_copy", doc=None, dtypes=None, aicpu=["float64"],
         src=["op_plugin_view_copy", "torch_npu_copy_kernel"],
         note="AI CPU for float64: op-plugin's ViewCopy runs on AI Core only when its AicoreValid "
              "check passes (a base-format destination whose storage differs from its view in "
              "one dimension, the source of the same sizes, and a dtype other than double); "
              "otherwise it sets _exclude_engines=AiCore and runs on AI CPU, so a float64 copy "
              "always does. Other dtypes depend on the layouts: AI Core or AI CPU"),
]

# Kernel-source facts: (repo key, path).
CODE_SOURCES = {
    "op_plugin_sdpa": ("op_plugin", "op_plugin/ops/opapi/ScaledDotProductAttentionKernelNpuOpApi.cpp"),
    "op_plugin_index_put_aclop": ("op_plugin", "op_plugin/ops/aclops/IndexPutKernelNpu.cpp"),
    "op_plugin_nonzero": ("op_plugin", "op_plugin/ops/opapi/NonzeroKernelNpuOpApi.cpp"),
    "op_plugin_masked_select": ("op_plugin", "op_plugin/ops/opapi/MaskedSelectKernelNpuOpApi.cpp"),
    "op_plugin_unique2": ("op_plugin", "op_plugin/ops/opapi/Unique2KernelNpuOpApi.cpp"),
    "op_plugin_unique_consecutive": ("op_plugin", "op_plugin/ops/opapi/UniqueConsecutiveKernelNpuOpApi.cpp"),
    "op_plugin_unique_dim": ("op_plugin", "op_plugin/ops/opapi/UniqueDimKernelNpuOpApi.cpp"),
    "op_plugin_argsort": ("op_plugin", "op_plugin/ops/opapi/ArgSortKernelNpuOpApi.cpp"),
    "op_plugin_equal": ("op_plugin", "op_plugin/ops/opapi/EqualKernelNpuOpApi.cpp"),
    "op_plugin_avg_pool2d": ("op_plugin", "op_plugin/ops/opapi/AvgPool2dKernelNpuOpApi.cpp"),
    "op_plugin_amp_unscale": ("op_plugin", "op_plugin/ops/opapi/AmpForeachNonFiniteCheckAndUnscaleKernelNpuOpApi.cpp"),
    "op_plugin_mm": ("op_plugin", "op_plugin/ops/opapi/MmKernelNpuOpApi.cpp"),
    "op_plugin_exec_macros": ("op_plugin", "op_plugin/utils/op_api_common.h"),
    "op_plugin_hf32_matmul": ("op_plugin", "op_plugin/utils/OpUtils.cpp"),
    "op_plugin_hf32_conv": ("op_plugin", "op_plugin/ops/opapi/ConvolutionKernelNpuOpApi.cpp"),
    "torch_npu_cpu_fallback": ("torch_npu", "torch_npu/csrc/aten/VariableFallbackKernel.cpp"),
    "torch_npu_fallback_disabled": ("torch_npu", "torch_npu/csrc/framework/utils/CpuFallbackUtils.h"),
    "torch_npu_npu_exception": ("torch_npu", "torch_npu/csrc/core/npu/NPUException.h"),
    "torch_npu_error_code": ("torch_npu", "torch_npu/csrc/core/npu/NPUException.cpp"),
    "torch_npu_hf32_defaults": ("torch_npu", "torch_npu/csrc/framework/LazyInitAclops.cpp"),
    "op_plugin_view_copy": ("op_plugin", "op_plugin/ops/aclops/ViewcopyKernelNpu.cpp"),
    "torch_npu_copy_kernel": ("torch_npu", "torch_npu/csrc/aten/common/CopyKernel.cpp"),
}


def git_show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def head(repo: str) -> str:
    return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def registered_ops(text: str) -> dict[str, list[str]]:
    """op_plugin_functions.yaml -> {overload name: backends} for TORCH_VERSION."""
    data = yaml.safe_load(text)
    versions = data["all_version"]

    def covers(spec) -> bool:
        if spec is None:
            return False
        if spec == "all_version":
            return True
        if isinstance(spec, list):
            lo, hi = spec
            hi = versions[-1] if hi == "newest" else hi
            return versions.index(lo) <= versions.index(TORCH_VERSION) <= versions.index(hi)
        return TORCH_VERSION in [s.strip() for s in str(spec).split(",")]

    ops: dict[str, set] = {}
    for section, entries in data.items():
        if not isinstance(entries, list) or section == "all_version":
            continue
        for e in entries:
            name = e["func"].split("(")[0]
            backends = {k for k in ("acl_op", "op_api", "dvm") if covers(e.get(k))}
            if backends:
                ops.setdefault(name, set()).update(backends)
    return {k: sorted(v) for k, v in ops.items()}


def native_functions(text: str) -> set[str]:
    data = yaml.safe_load(text)
    names = set()
    for section in ("supported", "autograd", "custom", "symint"):
        for e in data.get(section) or []:
            f = e if isinstance(e, str) else e["func"]
            names.add(f.split("(")[0])
    return names


def api_pages(repo: str, commit: str) -> dict[str, dict]:
    """torch_npu's support pages -> {API: {file, a2, dtypes, fallback, limits}}."""
    out = {}
    for f in DOC_FILES:
        text = git_show(repo, commit, f"{DOCS}/{f}")
        parts = re.split(r"\*\*原生文档\*\*：\[([^\]]+)\]", text)
        for i in range(1, len(parts), 2):
            name, body = parts[i], parts[i + 1]
            body = re.split(r"\n#{2,4} ", body)[0]
            a2 = re.search(r"Atlas A2 训练系列产品</term>\s*\|\s*(\S+)\s*\|", body)
            limits = body.split("**限制与说明**", 1)[1] if "**限制与说明**" in body else ""
            first = re.search(r"仅支持([^\n|<]*)", limits)
            dtypes = None
            if first:
                words = re.split(r"[，,、和\s]+", first.group(1))
                got = [DTYPE_WORDS[w] for w in words if w in DTYPE_WORDS]
                dtypes = got or None
            name = name if name.startswith(("torch.", "Tensor.")) else name
            out[name] = {"file": f"{DOCS}/{f}",
                         "a2": None if not a2 else ("✘" not in a2.group(1)),
                         "dtypes": dtypes,
                         "fallback": "回退至CPU" in limits}
    return out


def torch_composite(name: str) -> bool:
    import torch
    try:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k)
                   for k in ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
                             "CompositeExplicitAutogradNonFunctional"))
    except RuntimeError:
        return False


def torch_overloads(packet: str) -> list[str]:
    import torch
    op = getattr(torch.ops.aten, packet, None)
    if op is None:
        return []
    return [packet if o == "default" else f"{packet}.{o}" for o in op.overloads()]


def build(op_plugin: str, torch_npu: str) -> dict:
    opp_commit, tn_commit = head(op_plugin), head(torch_npu)
    reg = registered_ops(git_show(op_plugin, opp_commit,
                                  "op_plugin/config/op_plugin_functions.yaml"))
    nat = native_functions(git_show(torch_npu, tn_commit,
                                    "torch_npu/csrc/aten/npu_native_functions.yaml"))
    pages = api_pages(torch_npu, tn_commit)

    sources = {
        "op_plugin_functions": dict(repo="Ascend/op-plugin", commit=opp_commit,
                                    path="op_plugin/config/op_plugin_functions.yaml"),
        "torch_npu_native_functions": dict(repo="Ascend/pytorch", commit=tn_commit,
                                           path="torch_npu/csrc/aten/npu_native_functions.yaml"),
        "pytorch_2_13_dispatch": dict(repo="pytorch/pytorch", commit="v2.13.0",
                                      path="aten/src/ATen/native/native_functions.yaml",
                                      note="read through the installed torch 2.13.0 dispatcher "
                                           "(CompositeImplicit/ExplicitAutograd kernels)"),
    }
    for key, (which, path) in CODE_SOURCES.items():
        repo, commit = (("Ascend/op-plugin", opp_commit) if which == "op_plugin"
                        else ("Ascend/pytorch", tn_commit))
        sources[key] = dict(repo=repo, commit=commit, path=path)
    for key, url in {**CANN_PAGES, **OBSERVED}.items():
        sources[key] = dict(url=url)
    page_keys = {}

    def page_source(file_path: str) -> str:
        key = "torch_npu_api_" + re.sub(r"\W", "_", file_path.rsplit("/", 1)[1][:-3]).lower()
        page_keys[key] = dict(repo="Ascend/pytorch", commit=tn_commit, path=file_path)
        return key

    rows = []
    for c in CURATED:
        name = c["name"]
        overloads = [o for o in torch_overloads(name) if o in reg or o in nat] or []
        registered = name in reg or name in nat or bool(overloads)
        registered = registered or any(k.split(".")[0] == name for k in list(reg) + list(nat))
        src = []
        if any(k.split(".")[0] == name for k in reg):
            src.append("op_plugin_functions")
        if any(k.split(".")[0] == name for k in nat):
            src.append("torch_npu_native_functions")
        row = dict(name=name)
        op_name = f"aten::{name}" if "." in name else f"aten::{_first_overload(name)}"
        composite = not registered and not c.get("structured") and torch_composite(op_name)
        if c.get("anydtype"):
            kind = "native"
            row["dtypes"], row["other_dtypes"] = [ALL], "unknown"
            row["note"] = ("torch_npu's own kernel (npu_native_functions.yaml): a device-to-host "
                           "copy, no operator kernel, so any dtype (its API page lists only the "
                           "verified float32)")
        elif c.get("view") or c.get("factory"):
            kind = "native"
            row["dtypes"] = [ALL]
            row["other_dtypes"] = "unknown"
            if not registered:
                src.append("pytorch_2_13_dispatch")
            row["note"] = ("view / metadata op: no device kernel, any dtype" if c.get("view") else
                           "factory: allocation plus a fill on the device, any dtype")
        elif registered or c.get("equivalent"):
            kind = "native"
        elif composite:
            kind = "native"
            src.append("pytorch_2_13_dispatch")
            row["composite"] = True
        else:
            kind = "cpu_fallback"
            src += ["op_plugin_functions", "torch_npu_native_functions", "torch_npu_cpu_fallback"]
            if c.get("structured"):
                src.append("pytorch_2_13_dispatch")
                row["note"] = ("structured op: its functional form calls the out= overload, which "
                               "has no NPU kernel either")
        row["kind"] = kind
        if "dtypes" not in row:
            if composite and kind == "native":
                row["dtypes"] = [ALL]
                row["other_dtypes"] = "unknown"
                row["note"] = ("PyTorch decomposes it (CompositeExplicit/ImplicitAutograd); its "
                               "parts are separate rows")
            elif kind == "cpu_fallback":
                row["dtypes"] = [ALL]
                row["other_dtypes"] = "unknown"
            elif c.get("dtypes"):
                row["dtypes"] = list(c["dtypes"])
                row["other_dtypes"] = "unsupported"
                src.append(c["dtype_src"])
            elif name.startswith("_foreach_") and foreach_checks(op_plugin, opp_commit, name):
                got, files = foreach_checks(op_plugin, opp_commit, name)
                row["dtypes"] = got
                row["other_dtypes"] = "unknown"
                for f in files:
                    key = "op_plugin_" + f.rsplit("/", 1)[1][:-4]
                    sources[key] = dict(repo="Ascend/op-plugin", commit=opp_commit, path=f)
                    src.append(key)
                row["note"] = ("dtypes from the TORCH_CHECK ('input must be ...') of op-plugin's "
                               "fast route; when the fast route does not apply (mixed devices or "
                               "dtypes, some scalars) it runs PyTorch's per-tensor slow path")
            else:
                got: list[str] = []
                for api in c["apis"]:
                    p = pages.get(api)
                    if p and p["dtypes"] and p["a2"] is not False:
                        got += [d for d in p["dtypes"] if d not in got]
                        src.append(page_source(p["file"]))
                row["dtypes"] = got or ["unknown"]
                row["other_dtypes"] = "unknown"
        if c.get("aicpu"):
            row["dtype_kinds"] = {d: "aicpu" for d in c["aicpu"]}
        for key in ("hf32", "equivalent", "aclnn"):
            if c.get(key):
                row[key] = c[key]
        if c.get("hf32"):
            src.append("op_plugin_hf32_matmul" if c["hf32"] == "matmul" else "op_plugin_hf32_conv")
        if c.get("sync"):
            row["sync"] = True
        if registered:
            row["backends"] = sorted({b for k, v in reg.items() if k.split(".")[0] == name
                                      for b in v} | ({"torch_npu"} if any(
                                          k.split(".")[0] == name for k in nat) else set()))
        if c.get("note"):
            row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + c["note"]
        fb = [api for api in c["apis"] if pages.get(api, {}).get("fallback")]
        if fb:
            row["note"] = ((row.get("note") + "; ") if row.get("note") else "") + (
                f"torch_npu's page for {fb[0]} says it may fall back to the CPU")
        src += c.get("src", [])
        row["sources"] = list(dict.fromkeys(src))
        rows.append(row)

    for c in CUSTOM:
        row = dict(name=c["name"], kind="native")
        src = (["op_plugin_functions"]
               if any(k.split(".")[0] == c["name"] for k in reg) else [])
        if c["name"] in nat or any(k.split(".")[0] == c["name"] for k in nat):
            src.append("torch_npu_native_functions")
        if not src:
            raise SystemExit(f"{c['name']}: not registered by op-plugin or torch_npu")
        if c.get("any"):
            row["dtypes"], row["other_dtypes"] = [ALL], "unknown"
        elif c.get("dtypes"):
            row["dtypes"], row["other_dtypes"] = list(c["dtypes"]), "unknown"
        else:
            row["dtypes"], row["other_dtypes"] = ["unknown"], "unknown"
        if c.get("doc"):
            key = "op_plugin_doc_" + c["name"]
            sources[key] = dict(repo="Ascend/op-plugin", commit=opp_commit, path=NPU_DOC + c["doc"])
            src.append(key)
        if c.get("aicpu"):
            row["dtype_kinds"] = {d: "aicpu" for d in c["aicpu"]}
        if c.get("hf32"):
            row["hf32"] = c["hf32"]
        if c.get("note"):
            row["note"] = c["note"]
        row["sources"] = src + c.get("src", [])
        rows.append(row)
    sources.update(page_keys)
    return dict(opp_commit=opp_commit, tn_commit=tn_commit, sources=sources,
                rows=sorted(rows, key=lambda r: r["name"]))


CHECK_WORDS = {"half": "float16", "float": "float32", "bfloat16": "bfloat16", "int32": "int32",
               "int": "int32", "short": "int16"}
_FOREACH_FILES: list[str] = []


def foreach_checks(repo: str, commit: str, name: str):
    """dtype words of the 'input must be ...' checks in op-plugin's Foreach<Name>* files."""
    if not _FOREACH_FILES:
        _FOREACH_FILES.extend(subprocess.run(
            ["git", "-C", repo, "ls-tree", "--name-only", commit, "op_plugin/ops/opapi/"],
            check=True, capture_output=True, text=True).stdout.split())
    camel = "".join(w.capitalize() for w in name.strip("_").split("_")[1:])
    files = [f for f in _FOREACH_FILES
             if re.match(rf"op_plugin/ops/opapi/Foreach{camel}(Scalar|List|Tensor|Inplace)*"
                         rf"(Kernel)", f)]
    got: list[str] = []
    for f in files:
        for m in re.findall(r'"input must be ([^"]*)"', git_show(repo, commit, f)):
            for w in re.split(r"[ ,]+", m):
                d = CHECK_WORDS.get(w.strip())
                if d and d not in got:
                    got.append(d)
    return (got, files) if got else None


def _first_overload(packet: str) -> str:
    ovs = torch_overloads(packet)
    return ovs[0] if ovs else packet


MESSAGES = {
    "cpu_fallback_warning": dict(
        text="CAUTION: The operator '{op}' is not currently supported on the NPU backend and will "
             "fall back to run on the CPU. This may have performance implications.",
        when="once per op, the first time torch_npu's boxed PrivateUse1 fallback runs it",
        sources=["torch_npu_cpu_fallback"]),
    "cpu_fallback_disabled": dict(
        text="The operator '{op}' would execute its main computation on CPU through dispatcher "
             "backend fallback because no kernel is registered for the NPU PrivateUse1 backend, "
             "but CPU fallback is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1.{err}",
        when="TORCH_NPU_FALLBACK_CPU_DISABLE=1 and an op without an NPU kernel; {err} is the "
             "error-code suffix (OPS, code 7 feature not supported)",
        sources=["torch_npu_fallback_disabled"]),
    "aclnn_dtype_unsupported": dict(
        text="{func}:{file}:{line} NPU function error: call {aclnn} failed, error code is 161002\n"
             "[ERROR] {timestamp} (PID:{pid}, Device:{device}, RankID:{rank}) ERR00100 PTA call "
             "acl api failed.\n"
             "[PID: {pid}] {timestamp_ms} AclNN_Parameter_Error(EZ1001): Tensor {arg} not "
             "implemented for {acl_dtype}, should be in dtype support list [{acl_dtypes},].",
        when="an aclnn kernel rejects an input dtype (e.g. float64 mm on 910B: func 'mm', file "
             "op_plugin/ops/opapi/MmKernelNpuOpApi.cpp, aclnn 'aclnnMm', arg 'self', acl_dtype "
             "'DT_DOUBLE'); raised as RuntimeError at the op call (GetWorkspaceSize runs on the "
             "host, before launch)",
        caveats="the first two lines are assembled by torch_npu (NPU_CHECK_ERROR: 'NPU function "
                "error: ', 'call <api> failed', ', error code is ', then the PTA/ACL error-code "
                "line, '.' when the code has no entry in torch_npu's table); the third line is "
                "CANN's own text (aclGetRecentErrMsg), taken from public reports; 161002 is the "
                "code those reports show for an aclnn parameter error; the order of names in "
                "CANN's support list is not known for aclnnMm",
        sources=["op_plugin_exec_macros", "op_plugin_mm", "torch_npu_npu_exception",
                 "torch_npu_error_code", "observed_sglang_29011", "observed_vllm_ascend_6636"]),
    "aicpu_argsort": dict(
        text="Warning: kernel [ArgSort] can not support dtype int32 or int64 on AiCore, Now this "
             "kernel is running on AiCpu.If you are more concerned about high-performance "
             "execution,please cast dtype to float32.",
        when="once, argsort of an int32/int64 tensor",
        sources=["op_plugin_argsort"]),
}

ACL_DTYPES = {"float16": "DT_FLOAT16", "float32": "DT_FLOAT", "bfloat16": "DT_BFLOAT16",
              "float64": "DT_DOUBLE", "int8": "DT_INT8", "uint8": "DT_UINT8",
              "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64", "bool": "DT_BOOL",
              "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128"}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def emit(data: dict) -> str:
    out = [
        "# What a real 910B (Atlas A2 training series) does with each operator under torch_npu.",
        "# GENERATED by scripts/card_data/gen_card_910B.py from the sources listed below; edit the",
        "# script's tables, not this file. Schema: docs/card_support.md.",
        "",
        "schema = 1",
        'target = "910B"',
        'product = "Atlas A2 training series (Ascend 910B)"',
        'torch = "2.13"',
        'kinds = ["native", "aicpu", "cpu_fallback", "unsupported"]',
        "",
        "[hf32]",
        "# float32 ops on the cube unit may compute in HF32 (float32 exponent, 10 mantissa bits)",
        'matmul = { flag = "torch.npu.matmul.allow_hf32", default = false, '
        'sources = ["torch_npu_hf32_defaults", "op_plugin_hf32_matmul", "cann_aclnnAddmmWeightNz"] }',
        'conv = { flag = "torch.npu.conv.allow_hf32", default = true, '
        'sources = ["torch_npu_hf32_defaults", "op_plugin_hf32_conv"] }',
        "",
        "[acl_dtypes]",
    ]
    out += [f"{k} = {toml_value(v)}" for k, v in ACL_DTYPES.items()]
    for key, m in MESSAGES.items():
        out += ["", f"[messages.{key}]"] + [f"{k} = {toml_value(v)}" for k, v in m.items()]
    for key, s in sorted(data["sources"].items()):
        out += ["", f"[sources.{key}]"] + [f"{k} = {toml_value(v)}" for k, v in s.items()]
    order = ["name", "kind", "dtypes", "other_dtypes", "dtype_kinds", "composite", "sync", "hf32",
             "equivalent", "aclnn", "backends", "note", "sources"]
    for r in data["rows"]:
        out += ["", "[[op]]"] + [f"{k} = {toml_value(r[k])}" for k in order if k in r]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op-plugin", required=True)
    ap.add_argument("--torch-npu", required=True)
    ap.add_argument("-o", "--output", default="torch_npu/data/card_910B.toml")
    ns = ap.parse_args(argv)
    text = emit(build(ns.op_plugin, ns.torch_npu))
    with open(ns.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {ns.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
