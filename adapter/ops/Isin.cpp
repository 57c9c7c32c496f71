// isin on the npu device. Against one test value (an end-of-sequence id), isin is eq (ne for
// invert=True) with that value as a 0-dim tensor, one npu kernel: Hugging Face's generate asks
// isin(arange(vocabulary), eos id) at every token (its min_new_tokens processor), and ATen's CPU
// kernel by the host-kernel path took 170 us a call for 32000 elements (a checked data pointer
// lookup per element; 0.3 ms a token, 4% of decode_bench at batch 1). Empty operands give the
// filled result on the device. More test values, and dtypes eq and ATen's isin may not agree
// on (bool, complex, 16-bit floats), go to ATen's CPU kernel by the host-kernel path (eq
// against each value or'ed together, or eq then any over the values, measured slower there).
#include <ATen/ops/eq.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ne.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

namespace torch_npu {
namespace {

bool comparedOnDevice(const at::Tensor& elements, const at::Tensor& test) {
  auto plain = [](at::ScalarType t) {
    return at::isIntegralType(t, /*includeBool=*/false) || t == at::kFloat || t == at::kDouble;
  };
  return plain(elements.scalar_type()) && plain(test.scalar_type()) &&
         (test.numel() <= 1 || elements.numel() == 0);
}

at::Tensor isinTensorTensor(const at::Tensor& elements, const at::Tensor& test, bool assume_unique,
                            bool invert) {
  if (!comparedOnDevice(elements, test)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("isin", "Tensor_Tensor"), elements, test,
                                      assume_unique, invert);
  }
  if (elements.numel() == 0 || test.numel() == 0) {  // nothing found (an empty result or all)
    return at::full(elements.sizes(), invert, elements.options().dtype(at::kBool));
  }
  // Compared in isin's common dtype: result_type of the operands as given (a [1] test tensor
  // widens it as a 0-dim one would not: int8 elements against [300] compare as int64, where a
  // 0-dim 300 would wrap to 44). NaN equals nothing in both.
  const at::ScalarType common = at::result_type(elements, test);
  const at::Tensor value = test.reshape({}).to(common);
  const at::Tensor lhs = elements.to(common);
  return invert ? at::ne(lhs, value) : at::eq(lhs, value);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "isin.Tensor_Tensor", isinTensorTensor);
}

}  // namespace torch_npu
