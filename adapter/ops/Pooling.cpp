// Max, average and adaptive-average 2-D pooling, with backward, on the library's pooling
// kernels. Window parameters the kernels do not cover, unusual dtypes and invalid arguments hand
// the call to ATen's CPU kernel on the stream (ExecutionPaths.h), which gives PyTorch's messages.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

std::vector<int64_t> vec(at::IntArrayRef a) { return a.vec(); }

// ---- pooling ----------------------------------------------------------------------------

// Window parameters as PyTorch's frontends give them ([k] or [kh, kw]; an empty stride is the
// kernel); nullopt for anything the CPU kernel should check and report instead.
std::optional<nk::Pool2dParams> poolParams(const at::Tensor& self, at::IntArrayRef kernel,
                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                           at::IntArrayRef dilation, bool ceil_mode) {
  if ((self.dim() != 3 && self.dim() != 4) || !describable(self) ||
      !nk::pooling_supports(*toKernelDType(self.scalar_type()))) {
    return {};
  }
  auto pick = [](at::IntArrayRef a, int i, int64_t dflt) -> std::optional<int64_t> {
    if (a.empty()) return dflt;
    if (a.size() == 1) return a[0];
    if (a.size() == 2) return a[i];
    return std::nullopt;
  };
  nk::Pool2dParams p;
  p.ceil_mode = ceil_mode;
  for (int i = 0; i < 2; ++i) {
    const auto k = pick(kernel, i, -1);
    if (!k || *k <= 0) return {};
    const auto s = pick(stride, i, *k);
    const auto pad = pick(padding, i, 0);
    const auto d = pick(dilation, i, 1);
    if (!s || !pad || !d || *s <= 0 || *pad < 0 || *d <= 0 || *pad > *k / 2) return {};
    p.kernel[i] = *k;
    p.stride[i] = *s;
    p.padding[i] = *pad;
    p.dilation[i] = *d;
  }
  return p;
}

std::vector<int64_t> pooledShape(const at::Tensor& self, const nk::Pool2dParams& p) {
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 2);
  for (int i = 0; i < 2; ++i) {
    shape.push_back(nk::pool_output_size(self.size(self.dim() - 2 + i), p.kernel[i],
                                         p.padding[i], p.stride[i], p.dilation[i], p.ceil_mode));
  }
  return shape;
}

bool positive(const std::vector<int64_t>& shape) {
  return shape[shape.size() - 1] > 0 && shape[shape.size() - 2] > 0;
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self,
                                                           at::IntArrayRef kernel,
                                                           at::IntArrayRef stride,
                                                           at::IntArrayRef padding,
                                                           at::IntArrayRef dilation,
                                                           bool ceil_mode) {
  const auto p = poolParams(self, kernel, stride, padding, dilation, ceil_mode);
  std::vector<int64_t> shape;
  if (p) shape = pooledShape(self, *p);
  if (!p || !positive(shape) || self.numel() == 0) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, vec(kernel), vec(stride), vec(padding), vec(dilation),
                     ceil_mode);
    runOnHost(NPU_ATEN_OP("max_pool2d_with_indices", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor()};
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  launchTask(streamOf(self), "max_pool2d",
             [o = describe(out), x = describe(indices), i = describe(self), p = *p] {
               nk::max_pool2d(o, x, i, p);
             });
  return {out, indices};
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation,
                                            bool ceil_mode, const at::Tensor& indices) {
  const auto p = poolParams(self, kernel, stride, padding, dilation, ceil_mode);
  if (!p || !describable(grad_output) || grad_output.scalar_type() != self.scalar_type() ||
      indices.scalar_type() != at::kLong || grad_output.sizes() != indices.sizes()) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("max_pool2d_with_indices_backward", ""),
                                      grad_output, self, vec(kernel), vec(stride), vec(padding),
                                      vec(dilation), ceil_mode, indices);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (grad_input.numel() == 0) return grad_input;
  launchTask(streamOf(self), "max_pool2d_backward",
             [gi = describe(grad_input), go = describe(grad_output), x = describe(indices)] {
               nk::max_pool2d_backward(gi, go, x);
             });
  return grad_input;
}

at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                      at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
  const auto p = poolParams(self, kernel, stride, padding, {}, ceil_mode);
  std::vector<int64_t> shape;
  if (p) shape = pooledShape(self, *p);
  if (!p || !positive(shape) || self.numel() == 0 ||
      (divisor_override && *divisor_override <= 0)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("avg_pool2d", ""), self, vec(kernel),
                                      vec(stride), vec(padding), ceil_mode, count_include_pad,
                                      divisor_override);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(shape, self.options());
  launchTask(streamOf(self), "avg_pool2d",
             [o = describe(out), i = describe(self), p = *p, count_include_pad,
              d = divisor_override.value_or(0)] {
               nk::avg_pool2d(o, i, p, count_include_pad, d);
             });
  return out;
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override) {
  const auto p = poolParams(self, kernel, stride, padding, {}, ceil_mode);
  if (!p || !describable(grad_output) || grad_output.scalar_type() != self.scalar_type() ||
      grad_output.sizes() != at::IntArrayRef(pooledShape(self, *p)) ||
      (divisor_override && *divisor_override <= 0)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("avg_pool2d_backward", ""), grad_output, self,
                                      vec(kernel), vec(stride), vec(padding), ceil_mode,
                                      count_include_pad, divisor_override);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (grad_input.numel() == 0) return grad_input;
  launchTask(streamOf(self), "avg_pool2d_backward",
             [gi = describe(grad_input), go = describe(grad_output), p = *p, count_include_pad,
              d = divisor_override.value_or(0)] {
               nk::avg_pool2d_backward(gi, go, p, count_include_pad, d);
             });
  return grad_input;
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  const std::vector<int64_t> size = C10_AS_INTARRAYREF_SLOW(output_size).vec();
  const bool ok = (self.dim() == 3 || self.dim() == 4) && describable(self) &&
                  nk::pooling_supports(*toKernelDType(self.scalar_type())) && size.size() == 2 &&
                  size[0] > 0 && size[1] > 0 && self.numel() > 0;
  if (!ok) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("_adaptive_avg_pool2d", ""), self, size);
  }
  const c10::DeviceGuard guard(self.device());
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 2);
  shape.insert(shape.end(), size.begin(), size.end());
  at::Tensor out = at::empty(shape, self.options());
  launchTask(streamOf(self), "adaptive_avg_pool2d", [o = describe(out), i = describe(self)] {
    nk::adaptive_avg_pool2d(o, i);
  });
  return out;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  if (!describable(grad_output) || !describable(self) || self.dim() != grad_output.dim() ||
      grad_output.scalar_type() != self.scalar_type() ||
      !nk::pooling_supports(*toKernelDType(self.scalar_type()))) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("_adaptive_avg_pool2d_backward", ""),
                                      grad_output, self);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (grad_input.numel() == 0) return grad_input;
  launchTask(streamOf(self), "adaptive_avg_pool2d_backward",
             [gi = describe(grad_input), go = describe(grad_output)] {
               nk::adaptive_avg_pool2d_backward(gi, go);
             });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "max_pool2d_with_indices", max_pool2d_with_indices);
  NPU_IMPL(m, "max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  NPU_IMPL(m, "avg_pool2d", avg_pool2d);
  NPU_IMPL(m, "avg_pool2d_backward", avg_pool2d_backward);
  NPU_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg_pool2d);
  NPU_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
}

}  // namespace torch_npu::native
