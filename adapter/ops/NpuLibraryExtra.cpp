// The schemas of more of torch_npu's own operators (torch.ops.npu.*), with torch_npu's names,
// defaults and output tuples: the general-purpose ones outside the LLM set of NpuLibrary.cpp.
// Their kernels are CompositeImplicitAutograd functions in torch_npu/_utility_ops.py (short
// formulas of PyTorch ops that run as our npu kernels, so autograd runs through the parts),
// except the bit packing ops, whose loops are C++ (SignBits.cpp).
// A fragment, not TORCH_LIBRARY: NpuLibrary.cpp defines the rest of the namespace.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_format_cast.Tensor(Tensor self, Tensor dst) -> Tensor");

  m.def("npu_fast_gelu(Tensor self) -> Tensor");
  m.def("npu_silu_(Tensor(a!) self) -> Tensor(a!)");
  m.def("npu_renorm_backward(Tensor grad, Tensor self, float p, int dim, float maxnorm) "
        "-> Tensor");
  m.def("npu_indexing(Tensor self, int[] begin, int[] end, int[] strides, int begin_mask=0, "
        "int end_mask=0, int ellipsis_mask=0, int new_axis_mask=0, int shrink_axis_mask=0) "
        "-> Tensor");
  m.def("npu_pad(Tensor input, int[] paddings) -> Tensor");
  m.def("npu_stride_add(Tensor self, Tensor other, Scalar offset1, Scalar offset2, "
        "Scalar c1_len) -> Tensor");
  m.def("npu_masked_fill_range(Tensor self, Tensor start, Tensor end, Tensor value, "
        "int axis=-1) -> Tensor");
  m.def("npu_alloc_float_status(Tensor self) -> Tensor");
  m.def("npu_ifmr(Tensor data, Tensor data_min, Tensor data_max, Tensor cumsum, "
        "float min_percentile, float max_percentile, float search_start, float search_end, "
        "float search_step, bool with_offset) -> (Tensor, Tensor)");
  m.def("npu_apply_adam.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar beta1, "
        "Scalar beta2, Scalar epsilon, Tensor grad, bool? use_locking, bool? use_nesterov, *, "
        "Tensor(a!) var, Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
  m.def("npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, "
        "Scalar weight_decay, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
        "Tensor? max_grad_norm, bool? amsgrad, bool? maximize, *, Tensor(a!) var, "
        "Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
  m.def("npu_dropout_with_add_softmax(Tensor self, Tensor x1, Scalar alpha, float prob, "
        "int dim) -> (Tensor, Tensor, Tensor)");
  m.def("_npu_dropout(Tensor self, float p) -> (Tensor, Tensor)");
  m.def("npu_dropout_do_mask(Tensor self, Tensor mask, float p) -> (Tensor, Tensor)");
  m.def("npu_multi_head_attention(Tensor query, Tensor key, Tensor value, Tensor query_weight, "
        "Tensor key_weight, Tensor value_weight, Tensor attn_mask, Tensor out_proj_weight, "
        "Tensor? query_bias, Tensor? key_bias, Tensor? value_bias, Tensor? out_proj_bias, "
        "Tensor? dropout_mask, int attn_head_num, int attn_dim_per_head, int src_len, "
        "int tgt_len, float dropout_prob, bool softmax_use_float) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("dropout_with_byte_mask(Tensor self, float p=0.5, bool train=True) -> Tensor");
  m.def("_npu_quant_rms_norm(Tensor x, Tensor gamma, Tensor beta, Tensor scale, "
        "Tensor offset, Tensor(a!) y, float eps=1e-06) -> Tensor(a!)");

  // Vocabulary-parallel cross entropy (Megatron's, fused): the linear layer's local max and
  // sum of exponentials, the loss from the reduced ones, and the backward.
  m.def("npu_fused_linear_online_max_sum(Tensor input, Tensor weight, Tensor target, "
        "int vocab_start_index, int vocab_end_index, bool return_logits=False) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor?)");
  m.def("npu_fused_cross_entropy_loss_with_max_sum(Tensor logits_max, Tensor sum_exp_logits, "
        "Tensor predicted_logits, float label_smoothing=0.0, Tensor? input=None, "
        "Tensor? weight=None, Tensor? vocab_parallel_logits=None) -> (Tensor, Tensor?)");
  m.def("npu_fused_linear_cross_entropy_loss_with_max_sum_backward(Tensor grad, Tensor input, "
        "Tensor weight, Tensor target_mask, Tensor masked_target, float label_smoothing=0.0, "
        "Tensor? logits_max=None, Tensor? sum_exp_logits=None, Tensor? softmax=None) -> "
        "(Tensor, Tensor)");

  // The superseded inference attention entry points, on npu_fused_infer_attention_score.
  m.def("npu_prompt_flash_attention(Tensor query, Tensor key, Tensor value, *, "
        "Tensor? padding_mask=None, Tensor? atten_mask=None, Tensor? pse_shift=None, "
        "SymInt[]? actual_seq_lengths=None, Tensor? deq_scale1=None, Tensor? quant_scale1=None, "
        "Tensor? deq_scale2=None, Tensor? quant_scale2=None, Tensor? quant_offset2=None, "
        "int num_heads=1, float scale_value=1.0, int pre_tokens=2147473647, "
        "int next_tokens=0, str input_layout=\"BSH\", int num_key_value_heads=0, "
        "SymInt[]? actual_seq_lengths_kv=None, int sparse_mode=0) -> Tensor");
  m.def("npu_incre_flash_attention(Tensor query, Tensor key, Tensor value, *, "
        "Tensor? padding_mask=None, Tensor? pse_shift=None, Tensor? atten_mask=None, "
        "SymInt[]? actual_seq_lengths=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? kv_padding_size=None, "
        "int num_heads=1, float scale_value=1.0, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int block_size=0, int inner_precise=1) -> Tensor");

  m.def("npu_sign_bits_pack(Tensor self, int size) -> Tensor");
  m.def("npu_sign_bits_unpack(Tensor input, int size, ScalarType dtype) -> Tensor");
}
