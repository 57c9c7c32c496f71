// isin on the npu device. With few test elements (ATen's own rule for its default CPU kernel:
// fewer than 10 * numel(elements)^0.145), each element is compared with every test value and
// the comparisons are or-ed, as npu kernels (eq, then any over the test values): Hugging Face's
// generate asks isin(arange(vocabulary), eos ids) at every token (its min_new_tokens
// processor), and ATen's CPU kernel by the host-kernel path took 0.3 ms a token for that (a
// checked data pointer lookup per element). Other calls, dtypes eq and ATen's isin may not
// agree on (bool, complex, 16-bit floats) and the out= form go to ATen's CPU kernel by the
// host-kernel path.
#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/full.h>
#include <ATen/ops/logical_not.h>
#include <torch/library.h>

#include <cmath>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

namespace torch_npu {
namespace {

// The comparison matrix of the npu path holds numel(elements) x numel(test) bools: at most this.
constexpr int64_t kIsinMaxComparisons = int64_t{1} << 22;

bool comparedOnDevice(const at::Tensor& elements, const at::Tensor& test) {
  auto plain = [](at::ScalarType t) {
    return (at::isIntegralType(t, /*includeBool=*/false) || t == at::kFloat || t == at::kDouble);
  };
  const int64_t n = elements.numel(), t = test.numel();
  if (!plain(elements.scalar_type()) || !plain(test.scalar_type())) return false;
  return n == 0 || t == 0 ||  // nothing to compare: an empty or an all-false (all-true) result
         (static_cast<double>(t) < 10.0 * std::pow(static_cast<double>(n), 0.145) &&
          n * t <= kIsinMaxComparisons);
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
  // eq promotes both to their common dtype, as isin does; NaN equals nothing in both.
  const at::Tensor found = at::eq(elements.unsqueeze(-1), test.reshape({-1})).any(-1);
  return invert ? at::logical_not(found) : found;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "isin.Tensor_Tensor", isinTensorTensor);
}

}  // namespace torch_npu
