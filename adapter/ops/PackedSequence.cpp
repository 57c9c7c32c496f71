// pack_padded_sequence on npu: ATen's algorithm (composite of npu kernels) with torch_npu's
// argument check of `lengths`, which must be a CPU tensor.
//
// Known difference, kept on purpose: torch_npu's packed data keeps the padding of the longest
// sequence ([B * T0, *] rows, the batch_sizes as ATen's) and its pad_packed_sequence reshapes
// that back, a layout its own LSTM kernel reads. SimNPU's LSTM is ATen's, which reads the
// packed rows that batch_sizes describe, so packing here stays ATen's (pack -> LSTM -> pad
// gives the right result); op-plugin's shape tests of the two ops see the difference.
#include <ATen/ops/_pack_padded_sequence_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"

namespace torch_npu::native {
namespace {

std::tuple<at::Tensor, at::Tensor> pack_padded_sequence(const at::Tensor& input,
                                                        const at::Tensor& lengths,
                                                        bool batch_first) {
  TORCH_CHECK(lengths.device().is_cpu(), "'lengths' argument should be a CPU tensor, but got ",
              lengths.device().str(), " tensor; pass lengths.cpu() (pack_padded_sequence reads "
              "the lengths on the host)");
  const c10::DeviceGuard guard(input.device());
  return at::native::_pack_padded_sequence(input, lengths, batch_first);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_pack_padded_sequence", pack_padded_sequence);
}

}  // namespace torch_npu::native
