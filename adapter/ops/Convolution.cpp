// Convolution on the library's conv2d kernels.
//
// aten::convolution sends every backend other than CPU/CUDA/MKLDNN to the *_overrideable hooks
// registered here. conv1d and conv2d run our conv2d kernel (conv1d with a height of 1);
// transposed convolutions, 3-D convolutions, unusual dtypes and invalid parameters hand the call
// to ATen's CPU kernel on the stream (ExecutionPaths.h), which also gives PyTorch's messages.
// float32 convolutions read their operands as HF32 while torch.npu.conv.allow_hf32 is set (the
// default, as on the card; KernelBridge.h), in the forward and the backward: our kernel rounds
// them itself; for the calls handed to ATen's CPU kernel (transposed and 3-D convolutions), the
// float32 operands are rounded to HF32 on the stream first (hf32Operand), so both paths compute
// the same model (HF32 inputs, float32 accumulation).
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

// The conv2d view of a conv1d / conv2d call; nullopt when the kernels do not cover it.
struct Conv2d {
  nk::Conv2dParams p;
  bool one_d = false;
};

std::optional<Conv2d> planConv(const at::Tensor& input, const at::Tensor& weight,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool transposed, int64_t groups) {
  const int64_t spatial = input.dim() - 2;
  if (transposed || (spatial != 1 && spatial != 2) || weight.dim() != input.dim()) return {};
  if (!describable(input) || !describable(weight)) return {};
  if (!nk::conv2d_supports(*toKernelDType(input.scalar_type()),
                           *toKernelDType(weight.scalar_type()),
                           *toKernelDType(input.scalar_type()))) {
    return {};
  }
  if (input.scalar_type() != weight.scalar_type() || groups <= 0) return {};
  if (static_cast<int64_t>(stride.size()) != spatial ||
      static_cast<int64_t>(padding.size()) != spatial ||
      static_cast<int64_t>(dilation.size()) != spatial) {
    return {};
  }
  if (input.size(1) != weight.size(1) * groups || weight.size(0) % groups != 0) return {};
  Conv2d c;
  c.one_d = spatial == 1;
  c.p.groups = groups;
  c.p.math = cubeMath(CubeFamily::kConv, input.scalar_type());  // torch.npu.conv.allow_hf32
  for (int64_t i = 0; i < spatial; ++i) {
    const int d = c.one_d ? 1 : static_cast<int>(i);
    if (stride[i] <= 0 || padding[i] < 0 || dilation[i] <= 0) return {};
    c.p.stride[d] = stride[i];
    c.p.padding[d] = padding[i];
    c.p.dilation[d] = dilation[i];
  }
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = input.size(2 + i) + 2 * padding[i];
    if (in < dilation[i] * (weight.size(2 + i) - 1) + 1) return {};  // kernel larger than input
  }
  return c;
}

at::Tensor as4d(const at::Tensor& t, bool one_d) { return one_d ? t.unsqueeze(2) : t; }

// True when a call handed to ATen's CPU kernel must have its operands rounded to HF32 first: all
// of them float32 (mixed dtypes keep the CPU kernel's own error) and torch.npu.conv.allow_hf32 on.
bool hostConvNeedsHF32(std::initializer_list<const at::Tensor*> operands) {
  for (const at::Tensor* t : operands) {
    if (!t->defined() || t->scalar_type() != c10::kFloat || !describable(*t)) return false;
  }
  return cubeMath(CubeFamily::kConv, c10::kFloat) == nk::CubeMath::HF32;
}

// A contiguous float32 copy of `t` with every element rounded to HF32 (nk::round_to_hf32),
// made on t's stream: what the cube unit reads of a float32 operand under HF32.
at::Tensor hf32Operand(const at::Tensor& t) {
  at::Tensor out = at::empty(t.sizes(), t.options().memory_format(c10::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  launchTask(streamOf(t), "round_to_hf32", [o = describe(out), i = describe(t)] {
    nk::copy(o, i);
    auto* p = static_cast<float*>(o.data);
    const int64_t n = o.numel();
    for (int64_t k = 0; k < n; ++k) p[k] = nk::round_to_hf32(p[k]);
  });
  return out;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation,
                                    bool transposed, at::IntArrayRef output_padding,
                                    int64_t groups) {
  const std::optional<Conv2d> plan =
      planConv(input, weight, stride, padding, dilation, transposed, groups);
  const bool bias_ok = !bias || !bias->defined() ||
                       (describable(*bias) && bias->scalar_type() == input.scalar_type());
  if (!plan || !bias_ok) {
    if (hostConvNeedsHF32({&input, &weight})) {  // the bias is added, not multiplied: kept
      const c10::DeviceGuard guard(input.device());
      return callHostKernel<at::Tensor>(NPU_ATEN_OP("convolution", ""), hf32Operand(input),
                                        hf32Operand(weight), bias, vec(stride), vec(padding),
                                        vec(dilation), transposed, vec(output_padding), groups);
    }
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("convolution", ""), input, weight, bias,
                                      vec(stride), vec(padding), vec(dilation), transposed,
                                      vec(output_padding), groups);
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = as4d(input, plan->one_d), w = as4d(weight, plan->one_d);
  const int64_t oh = nk::conv_output_size(x.size(2), w.size(2), plan->p.padding[0],
                                          plan->p.stride[0], plan->p.dilation[0]);
  const int64_t ow = nk::conv_output_size(x.size(3), w.size(3), plan->p.padding[1],
                                          plan->p.stride[1], plan->p.dilation[1]);
  at::Tensor out = at::empty({x.size(0), w.size(0), oh, ow}, x.options());
  if (out.numel() > 0) {
    std::optional<nk::TensorDesc> b;
    if (bias && bias->defined()) b = describe(*bias);
    launchTask(streamOf(x), "conv2d",
               [o = describe(out), i = describe(x), k = describe(w), b, p = plan->p] {
                 nk::conv2d(o, i, k, b ? &*b : nullptr, p);
               });
  }
  return plan->one_d ? out.squeeze(2) : out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const std::optional<Conv2d> plan =
      planConv(input, weight, stride, padding, dilation, transposed, groups);
  if (!plan || !describable(grad_output) || grad_output.scalar_type() != input.scalar_type()) {
    std::optional<std::vector<int64_t>> bias_sizes;
    if (output_mask[2]) {
      bias_sizes = std::vector<int64_t>{transposed ? weight.size(1) * groups : weight.size(0)};
    }
    // Under HF32 the backward's products read grad_output, input and weight as HF32, as our
    // kernel's backward does.
    // The bias gradient is a sum of grad_output, not a cube product: it reads grad_output as
    // it is (as our kernel's backward does).
    const bool hf32 = hostConvNeedsHF32({&grad_output, &input, &weight});
    const c10::DeviceGuard guard(input.device());
    torch::jit::Stack stack;
    if (hf32) {
      torch::jit::push(stack, hf32Operand(grad_output), hf32Operand(input), hf32Operand(weight),
                       std::optional<std::vector<int64_t>>(), vec(stride), vec(padding),
                       vec(dilation), transposed, vec(output_padding), groups,
                       std::array<bool, 3>{output_mask[0], output_mask[1], false});
    } else {
      torch::jit::push(stack, grad_output, input, weight, bias_sizes, vec(stride), vec(padding),
                       vec(dilation), transposed, vec(output_padding), groups, output_mask);
    }
    runOnHost(NPU_ATEN_OP("convolution_backward", ""), &stack);
    at::Tensor grad_bias = stack[2].toTensor();
    if (hf32 && output_mask[2]) {
      std::vector<int64_t> dims{0};
      for (int64_t d = 2; d < grad_output.dim(); ++d) dims.push_back(d);
      grad_bias = grad_output.sum(dims);
    }
    return {stack[0].toTensor(), stack[1].toTensor(), grad_bias};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = as4d(input, plan->one_d), w = as4d(weight, plan->one_d);
  const at::Tensor g = as4d(grad_output, plan->one_d);
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb;
  if (output_mask[0]) dgi = describe(gi = at::empty(x.sizes(), x.options()));
  if (output_mask[1]) dgw = describe(gw = at::empty(w.sizes(), w.options()));
  if (output_mask[2]) dgb = describe(gb = at::empty({w.size(0)}, w.options()));
  if (g.numel() == 0 || x.numel() == 0) {  // nothing flows: zero gradients
    if (gi.defined()) gi.zero_();
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
  } else {
    launchTask(streamOf(x), "conv2d_backward",
               [dgi, dgw, dgb, go = describe(g), i = describe(x), k = describe(w), p = plan->p] {
                 nk::conv2d_backward(dgi ? &*dgi : nullptr, dgw ? &*dgw : nullptr,
                                     dgb ? &*dgb : nullptr, go, i, k, p);
               });
  }
  if (plan->one_d) {
    if (gi.defined()) gi = gi.squeeze(2);
    if (gw.defined()) gw = gw.squeeze(2);
  }
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "convolution_overrideable", convolution_overrideable);
  NPU_IMPL(m, "convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_npu::native
