// Autocast on npu: torch.autocast("npu", dtype=torch.float16 | torch.bfloat16), and
// torch.npu.amp.autocast() (float16 by default, as torch_npu).
//
// How it works:
//  - Inside an autocast region PyTorch adds the AutocastPrivateUse1 key to the thread's dispatch
//    keys. Every op falls through it (the fallthrough below) except the ops listed here, whose
//    kernel casts the floating-point npu arguments and redispatches below the autocast key.
//  - The policies are the ones CUDA uses, from PyTorch's own op lists (ATen/autocast_mode.h), so
//    a script behaves the same on both devices: matmul-like ops (mm, bmm, addmm, baddbmm, linear,
//    matmul, conv*, scaled_dot_product_attention, ...) run in the autocast dtype; ops that need
//    range or precision (exp, log, pow, softmax, log_softmax, layer_norm, norms, losses, sum,
//    cumsum, ...) run in float32; ops mixing inputs (addcmul, index_put, scatter_add, ...) run in
//    the widest input type.
//  - The autocast dtype, the weight-cast cache (a float32 leaf parameter is cast once per
//    region) and nesting are PyTorch's generic machinery, keyed by device type PrivateUse1.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_npu {
namespace {

// As on CUDA: binary_cross_entropy on float16 inputs is numerically unsafe (log of a probability
// rounded to 0 or 1), so autocast refuses it and names the safe replacement.
at::Tensor binaryCrossEntropyBanned(const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast on npu.\nMany models use a sigmoid layer right before the binary cross "
              "entropy layer. In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
              "which are safe to autocast. If you are sure your model is safe, disable autocast "
              "around this loss (torch.autocast('npu', enabled=False)) and pass float32 inputs.");
}

}  // namespace

// PyTorch's op lists name the redispatch signatures with at:: types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define NPU_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(NPU_AUTOCAST_LOWER_PRECISION)
  AT_FORALL_FP32(NPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NPU_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(NPU_AUTOCAST_PROMOTE)
#undef NPU_AUTOCAST_LOWER_PRECISION
#undef NPU_AUTOCAST_FP32
#undef NPU_AUTOCAST_FP32_SET_OPT_DTYPE
#undef NPU_AUTOCAST_PROMOTE
  m.impl("binary_cross_entropy", TORCH_FN(binaryCrossEntropyBanned));
}

}  // namespace torch_npu
