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
}
