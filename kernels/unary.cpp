// Unary entry points: the op table (elementwise.h) mapped onto the functors of unary_ops.h.
#include "elementwise_dispatch.h"
#include "npu/kernels/elementwise.h"
#include "unary_ops.h"

namespace npu::kernels {

const char* op_name(UnaryOp op) {
#define NPU_NAME(name, str) \
  case UnaryOp::name: return str;
  switch (op) { NPU_KERNELS_UNARY_OPS(NPU_NAME) }
#undef NPU_NAME
  return "?";
}

bool unary_supports(UnaryOp op, DType compute) {
#define NPU_SUPPORTS(name, str) \
  case UnaryOp::name: return detail::op_supports<detail::ops::name>(compute);
  switch (op) { NPU_KERNELS_UNARY_OPS(NPU_SUPPORTS) }
#undef NPU_SUPPORTS
  return false;
}

void unary(UnaryOp op, const TensorDesc& out, const TensorDesc& in, DType compute, Scalar p0,
           Scalar p1) {
  const TensorDesc* ops[2] = {&out, &in};
#define NPU_RUN(name, str) \
  case UnaryOp::name: return detail::run_op<detail::ops::name, 1>(str, ops, compute, p0, p1);
  switch (op) { NPU_KERNELS_UNARY_OPS(NPU_RUN) }
#undef NPU_RUN
  NPU_KERNEL_ASSERT(false, "unknown unary op");
}

}  // namespace npu::kernels
