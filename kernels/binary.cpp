// Binary entry points: the op table (elementwise.h) mapped onto the functors of binary_ops.h.
#include "binary_ops.h"
#include "elementwise_dispatch.h"
#include "npu/kernels/elementwise.h"

namespace npu::kernels {

const char* op_name(BinaryOp op) {
#define NPU_NAME(name, str) \
  case BinaryOp::name: return str;
  switch (op) { NPU_KERNELS_BINARY_OPS(NPU_NAME) }
#undef NPU_NAME
  return "?";
}

bool binary_supports(BinaryOp op, DType compute) {
#define NPU_SUPPORTS(name, str) \
  case BinaryOp::name: return detail::op_supports<detail::ops::name>(compute);
  switch (op) { NPU_KERNELS_BINARY_OPS(NPU_SUPPORTS) }
#undef NPU_SUPPORTS
  return false;
}

void binary(BinaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
            DType compute, Scalar p0) {
  const TensorDesc* ops[3] = {&out, &a, &b};
#define NPU_RUN(name, str) \
  case BinaryOp::name: return detail::run_op<detail::ops::name, 2>(str, ops, compute, p0, {});
  switch (op) { NPU_KERNELS_BINARY_OPS(NPU_RUN) }
#undef NPU_RUN
  NPU_KERNEL_ASSERT(false, "unknown binary op");
}

}  // namespace npu::kernels
