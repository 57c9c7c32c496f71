#include "TaskTensor.h"

#include <ATen/ops/from_blob.h>

namespace torch_npu {

TaskTensor::TaskTensor(const at::Tensor& tensor)
    : data(tensor.numel() > 0 ? tensor.data_ptr() : nullptr),
      sizes(tensor.sizes().begin(), tensor.sizes().end()),
      strides(tensor.strides().begin(), tensor.strides().end()),
      dtype(tensor.scalar_type()),
      conj(tensor.is_conj()),
      neg(tensor.is_neg()) {}

at::Tensor TaskTensor::cpu() const {
  at::Tensor t = at::from_blob(data, sizes, strides, at::TensorOptions().dtype(dtype));
  if (conj) t._set_conj(true);
  if (neg) t._set_neg(true);
  return t;
}

void keepAliveUntilDone(const NPUStream& stream, c10::Storage storage) {
  // The body owns the storage and the runtime releases the body after its last run: at once
  // for eager work, when the graph is destroyed for a captured launch (each replay reads the
  // buffer again).
  launchHostTask(stream, "release_host_buffer", [held = std::move(storage)]() {});
}

bool sameDenseLayout(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() ||
      a.is_conj() != b.is_conj() || a.is_neg() != b.is_neg()) {
    return false;
  }
  if (!a.is_non_overlapping_and_dense()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

}  // namespace torch_npu
