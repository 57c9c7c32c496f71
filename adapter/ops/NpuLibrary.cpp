// The schemas of torch_npu's own operators (torch.ops.npu.*), with torch_npu's names, defaults
// and output tuples (op_plugin_functions.yaml). The kernels are registered for PrivateUse1 in
// FusedOps.cpp / Attention.cpp; autograd is attached in Python (torch_npu/_fused_ops.py).
// A fragment, not TORCH_LIBRARY: other files may add npu ops of their own.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)");
  m.def("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> "
        "(Tensor, Tensor)");
  m.def("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor");
  m.def("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, "
        "str rotary_mode='half') -> (Tensor, Tensor, Tensor)");
  m.def("npu_apply_rotary_pos_emb(Tensor(a!) query, Tensor(b!) key, Tensor cos, Tensor sin, "
        "str layout='BSND', str rotary_mode='half') -> (Tensor(a!), Tensor(b!))");
  m.def("npu_swiglu(Tensor self, int dim=-1) -> Tensor");
  m.def("npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor");
  m.def("npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, "
        "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, float scale=1., float keep_prob=1., "
        "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
        "int[]? prefix=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, "
        "int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False) -> "
        "(Tensor, Tensor, Tensor, Tensor, int, int, int)");
  m.def("npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, "
        "int head_num, str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? softmax_max=None, Tensor? softmax_sum=None, "
        "Tensor? softmax_in=None, Tensor? attention_in=None, float scale_value=1., "
        "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
        "int inner_precise=0, int seed=0, int offset=0, int numels=0, int[]? prefix=None, "
        "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
        "bool gen_mask_parallel=True, bool sync=False) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, "
        "Tensor? pse_shift=None, Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, "
        "SymInt[]? actual_seq_lengths_kv=None, Tensor? dequant_scale1=None, "
        "Tensor? quant_scale1=None, Tensor? dequant_scale2=None, Tensor? quant_scale2=None, "
        "Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, "
        "Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
        "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, "
        "Tensor? key_shared_prefix=None, Tensor? value_shared_prefix=None, "
        "Tensor? actual_shared_prefix_len=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, "
        "float scale=1.0, int pre_tokens=2147483647, int next_tokens=2147483647, "
        "str input_layout=\"BSH\", int num_key_value_heads=0, int sparse_mode=0, "
        "int inner_precise=0, int block_size=0, int antiquant_mode=0, "
        "bool softmax_lse_flag=False, int key_antiquant_mode=0, int value_antiquant_mode=0) "
        "-> (Tensor, Tensor)");
  m.def("npu_format_cast(Tensor self, int acl_format) -> Tensor");
  m.def("npu_format_cast_(Tensor(a!) self, int acl_format) -> Tensor(a!)");
  m.def("get_npu_format(Tensor self) -> int");

  // torch_npu's general-purpose operators: composites of PyTorch ops, implemented in Python for
  // every backend (CompositeImplicitAutograd, torch_npu/_utility_ops.py), so torch.ops.npu.X and
  // torch_npu.X both work and autograd runs through the parts.
  m.def("npu_silu(Tensor self) -> Tensor");
  m.def("npu_mish(Tensor self) -> Tensor");
  m.def("fast_gelu(Tensor self) -> Tensor");
  m.def("npu_transpose(Tensor self, int[] perm, bool require_contiguous=True) -> Tensor");
  m.def("npu_confusion_transpose(Tensor self, int[] perm, int[] shape, bool transpose_first) "
        "-> Tensor");
  m.def("npu_broadcast(Tensor self, int[] size) -> Tensor");
  m.def("npu_slice(Tensor self, int[] offsets, int[] size) -> Tensor");
  m.def("npu_max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("npu_min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("npu_dtype_cast(Tensor self, ScalarType dtype) -> Tensor");
  m.def("npu_one_hot(Tensor self, int num_classes=-1, int depth=1, Scalar on_value=1, "
        "Scalar off_value=0) -> Tensor");
  m.def("one_(Tensor(a!) self) -> Tensor(a!)");
  m.def("copy_memory_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)");
  m.def("npu_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def("npu_bmmV2(Tensor self, Tensor mat2, int[] output_sizes=[]) -> Tensor");
  m.def("npu_layer_norm_eval(Tensor input, int[] normalized_shape, Tensor? weight=None, "
        "Tensor? bias=None, float eps=1e-05) -> Tensor");
  m.def("npu_reshape(Tensor self, int[] shape, bool can_refresh=False) -> Tensor");
  m.def("npu_sort_v2(Tensor self, int dim=-1, bool descending=False) -> Tensor");
  m.def("npu_softmax_cross_entropy_with_logits(Tensor self, Tensor labels) -> Tensor");
  m.def("empty_with_format(int[] size, *, ScalarType? dtype=None, Layout? layout=None, "
        "Device? device=None, bool? pin_memory=None, int acl_format=2, "
        "int? base_addr_aligned_kb=None) -> Tensor");
  m.def("empty_with_swapped_memory(int[] size, *, ScalarType? dtype=None, Device? device=None) "
        "-> Tensor");
}
