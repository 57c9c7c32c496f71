// aten::convolution sends every backend other than CPU/CUDA/MKLDNN to the *_overrideable hooks.
// The npu device runs ATen's CPU convolution (oneDNN / im2col + BLAS) as its device kernel, on
// the stream (HostKernel.h), reported as an ATen host kernel by the op report.
#include "HostKernel.h"
#include "NPUNativeFunctions.h"

namespace torch_npu::native {
namespace {

std::vector<int64_t> vec(at::IntArrayRef a) { return a.vec(); }

}  // namespace

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation,
                                    bool transposed, at::IntArrayRef output_padding,
                                    int64_t groups) {
  return callHostKernel<at::Tensor>(NPU_ATEN_OP("convolution", ""), input, weight, bias,
                                    vec(stride), vec(padding), vec(dilation), transposed,
                                    vec(output_padding), groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  std::optional<std::vector<int64_t>> bias_sizes;
  if (output_mask[2]) {
    bias_sizes = std::vector<int64_t>{transposed ? weight.size(1) * groups : weight.size(0)};
  }
  torch::jit::Stack stack;
  torch::jit::push(stack, grad_output, input, weight, bias_sizes, vec(stride), vec(padding),
                   vec(dilation), transposed, vec(output_padding), groups, output_mask);
  runOnHost(NPU_ATEN_OP("convolution_backward", ""), &stack);
  return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
}

}  // namespace torch_npu::native
