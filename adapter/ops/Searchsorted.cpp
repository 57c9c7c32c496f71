// searchsorted on the npu device: ATen's CPU kernel by the host-kernel path, after ATen's own
// argument checks run at the call (torch_npu checks before launching, as CUDA does). Left to the
// queued CPU kernel they raised later, as a launch failure of a stream task, and its
// non-contiguous warnings were given on the stream's thread, where Python never sees them.
// The sorter's range check reads its values (as on CUDA), so a call with a sorter waits for the
// stream.
#include <ATen/native/BucketizationUtils.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string_view>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

namespace torch_npu {
namespace {

using Side = std::optional<c10::string_view>;

// The checks and warnings of ATen's kernel; returns the contiguous (and type-promoted) inputs the
// kernel would compute from.
struct Checked {
  at::Tensor boundaries, input, sorter;
};

Checked checkSearchsorted(const at::Tensor& boundaries, const at::Tensor& input, bool out_int32,
                          bool right, Side side, const std::optional<at::Tensor>& sorter_opt,
                          at::ScalarType output_dtype) {
  const at::Tensor sorter = sorter_opt.value_or(at::Tensor());
  // Only the output's dtype is read.
  const at::Tensor output = at::empty({0}, boundaries.options().dtype(output_dtype).device(c10::kMeta));
  at::native::searchsorted_pre_check(boundaries, input, output, out_int32, right, side, sorter);
  Checked trimmed;
  at::native::searchsorted_maybe_trim_input_tensors(trimmed.input, trimmed.boundaries,
                                                    trimmed.sorter, input, boundaries, sorter);
  if (!trimmed.input.defined()) trimmed.input = input;
  if (!trimmed.boundaries.defined()) trimmed.boundaries = boundaries;
  if (!trimmed.sorter.defined()) trimmed.sorter = sorter;
  return trimmed;
}

std::optional<at::Tensor> optionalSorter(const at::Tensor& sorter) {
  return sorter.defined() ? std::optional<at::Tensor>(sorter) : std::nullopt;
}

at::ScalarType indexType(bool out_int32) { return out_int32 ? at::kInt : at::kLong; }

at::Tensor searchsortedTensor(const at::Tensor& boundaries, const at::Tensor& self,
                              bool out_int32, bool right, Side side,
                              const std::optional<at::Tensor>& sorter) {
  const Checked c =
      checkSearchsorted(boundaries, self, out_int32, right, side, sorter, indexType(out_int32));
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("searchsorted", "Tensor"), c.boundaries, c.input,
                                    out_int32, right, side, optionalSorter(c.sorter));
}

at::Tensor& searchsortedTensorOut(const at::Tensor& boundaries, const at::Tensor& self,
                                  bool out_int32, bool right, Side side,
                                  const std::optional<at::Tensor>& sorter, at::Tensor& out) {
  const Checked c =
      checkSearchsorted(boundaries, self, out_int32, right, side, sorter, out.scalar_type());
  callHostKernel<at::Tensor>(NPU_ATEN_OP("searchsorted", "Tensor_out"), c.boundaries, c.input,
                             out_int32, right, side, optionalSorter(c.sorter), out);
  return out;
}

at::Tensor searchsortedScalar(const at::Tensor& boundaries, const at::Scalar& self,
                              bool out_int32, bool right, Side side,
                              const std::optional<at::Tensor>& sorter) {
  const at::Tensor input = at::native::searchsorted_scalar_tensor(self, boundaries.device());
  const Checked c =
      checkSearchsorted(boundaries, input, out_int32, right, side, sorter, indexType(out_int32));
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("searchsorted", "Scalar"), c.boundaries, self,
                                    out_int32, right, side, optionalSorter(c.sorter));
}

at::Tensor& searchsortedScalarOut(const at::Tensor& boundaries, const at::Scalar& self,
                                  bool out_int32, bool right, Side side,
                                  const std::optional<at::Tensor>& sorter, at::Tensor& out) {
  const at::Tensor input = at::native::searchsorted_scalar_tensor(self, boundaries.device());
  const Checked c =
      checkSearchsorted(boundaries, input, out_int32, right, side, sorter, out.scalar_type());
  callHostKernel<at::Tensor>(NPU_ATEN_OP("searchsorted", "Scalar_out"), c.boundaries, self,
                             out_int32, right, side, optionalSorter(c.sorter), out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "searchsorted.Tensor", searchsortedTensor);
  NPU_IMPL(m, "searchsorted.Tensor_out", searchsortedTensorOut);
  NPU_IMPL(m, "searchsorted.Scalar", searchsortedScalar);
  NPU_IMPL(m, "searchsorted.Scalar_out", searchsortedScalarOut);
}

}  // namespace torch_npu
