// softmax / log_softmax, layer_norm, batch_norm and group_norm, with backward, on the library's
// normalization kernels. Calls the kernels do not cover (dtypes, 0-dim inputs,
// half_to_float on a non-half input, unusual parameter layouts) hand over to ATen's CPU kernel
// on the stream (ExecutionPaths.h), which also gives PyTorch's messages.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addcmul.h>
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

// ---- softmax ----------------------------------------------------------------------------

template <bool kLog>
at::Tensor& softmaxInto(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  if (self.numel() == 0) return out;
  launchKernelTask(streamOf(self), kLog ? "log_softmax" : "softmax", self.numel(),
                   [o = describe(out), i = describe(self), d] { nk::softmax(o, i, d, kLog); });
  return out;
}

template <bool kLog>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!describableFloating(self) || self.dim() == 0 ||
      (half_to_float && self.scalar_type() != at::kHalf)) {
    return callHostKernel<at::Tensor>(
        kLog ? NPU_ATEN_OP("_log_softmax", "") : NPU_ATEN_OP("_softmax", ""), self, dim,
        half_to_float);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(half_to_float ? at::kFloat
                                                                              : self.scalar_type()));
  return softmaxInto<kLog>(self, dim, out);
}

template <bool kLog>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                        at::Tensor& out) {
  if (!describableFloating(self) || self.dim() == 0 || !describableFloating(out) ||
      (half_to_float && self.scalar_type() != at::kHalf)) {
    callHostKernel<at::Tensor>(
        kLog ? NPU_ATEN_OP("_log_softmax", "out") : NPU_ATEN_OP("_softmax", "out"), self, dim,
        half_to_float, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  at::native::resize_output(out, self.sizes());
  // An out whose elements alias each other: ATen's CPU kernel writes past its memory there.
  at::assert_no_internal_overlap(out);
  if (!out.is_same(self) && at::get_overlap_status(out, self) != at::MemOverlapStatus::No) {
    // out overlaps self in part: the kernel would read rows it already wrote. Through a
    // temporary (ATen's CPU kernel's result depends on its loop order).
    out.copy_(softmax<kLog>(self, dim, half_to_float));
    return out;
  }
  return softmaxInto<kLog>(self, dim, out);
}

template <bool kLog>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  if (!describableFloating(grad_output) || !describableFloating(output) || output.dim() == 0 ||
      grad_output.sizes() != output.sizes()) {
    return callHostKernel<at::Tensor>(kLog ? NPU_ATEN_OP("_log_softmax_backward_data", "")
                                           : NPU_ATEN_OP("_softmax_backward_data", ""),
                                      grad_output, output, dim, input_dtype);
  }
  const c10::DeviceGuard guard(output.device());
  at::Tensor grad_input = at::empty(output.sizes(), output.options().dtype(input_dtype));
  if (output.numel() == 0) return grad_input;
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, output.dim()));
  launchKernelTask(streamOf(output), kLog ? "log_softmax_backward" : "softmax_backward",
                   output.numel(),
                   [gi = describe(grad_input), go = describe(grad_output), o = describe(output),
                    d] { nk::softmax_backward(gi, go, o, d, kLog); });
  return grad_input;
}

// ---- layer norm -------------------------------------------------------------------------

// The parameters' dtype of a layer norm: the input's, or float32 beside a float16 / bfloat16
// input (ATen's mixed mode: a float32 LayerNorm module fed 16-bit activations), where the saved
// statistics and the parameters' gradients are float32 too. nullopt: another mix (ATen decides).
std::optional<at::ScalarType> layerNormParamType(const at::Tensor& input,
                                                 const std::optional<at::Tensor>& weight,
                                                 const std::optional<at::Tensor>& bias) {
  std::optional<at::ScalarType> type;
  for (const std::optional<at::Tensor>* p : {&weight, &bias}) {
    if (!*p || !(*p)->defined()) continue;
    if (type && *type != (*p)->scalar_type()) return std::nullopt;
    type = (*p)->scalar_type();
  }
  if (!type || *type == input.scalar_type()) return input.scalar_type();
  const bool half = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  if (half && *type == at::kFloat) return at::kFloat;
  return std::nullopt;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  const int64_t axis = input.dim() - nd;
  bool ok = describableFloating(input) && nd > 0 && axis >= 0;
  for (int64_t i = 0; ok && i < nd; ++i) {
    ok = normalized_shape[i] == input.size(axis + i);
  }
  int64_t n = 1;
  for (int64_t i = 0; ok && i < nd; ++i) n *= input.size(axis + i);
  const std::optional<at::ScalarType> param_type = layerNormParamType(input, weight, bias);
  auto paramOk = [&](const std::optional<at::Tensor>& p) {
    return !p || !p->defined() || (describable(*p) && p->numel() == n);
  };
  if (!ok || !param_type || !paramOk(weight) || !paramOk(bias) || input.numel() == 0) {
    torch::jit::Stack stack;
    torch::jit::push(stack, input, C10_AS_INTARRAYREF_SLOW(normalized_shape).vec(), weight, bias,
                     eps);
    runOnHost(NPU_ATEN_OP("native_layer_norm", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().begin() + axis);
  stat_shape.resize(x.dim(), 1);
  at::Tensor mean = at::empty(stat_shape, x.options().dtype(*param_type));
  at::Tensor rstd = at::empty(stat_shape, x.options().dtype(*param_type));
  std::optional<nk::TensorDesc> w, b;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  if (bias && bias->defined()) b = describe(bias->contiguous());
  launchTask(streamOf(x), "layer_norm",
             [o = describe(out), m = describe(mean), r = describe(rstd), i = describe(x), w, b,
              nd = static_cast<int>(nd), eps] {
               nk::layer_norm(o, m, r, i, w ? &*w : nullptr, b ? &*b : nullptr, nd, eps);
             });
  return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  const bool has_weight = weight && weight->defined();
  const std::optional<at::ScalarType> param_type = layerNormParamType(input, weight, bias);
  const bool ok = describableFloating(input) && describableFloating(grad_out) &&
                  grad_out.sizes() == input.sizes() && input.numel() > 0 && param_type &&
                  grad_out.scalar_type() == input.scalar_type() &&
                  mean.scalar_type() == *param_type && rstd.scalar_type() == *param_type;
  if (!ok) {
    torch::jit::Stack stack;
    torch::jit::push(stack, grad_out, input, C10_AS_INTARRAYREF_SLOW(normalized_shape).vec(), mean,
                     rstd, weight, bias, output_mask);
    runOnHost(NPU_ATEN_OP("native_layer_norm_backward", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor g = grad_out.contiguous();
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb, w;
  if (output_mask[0]) dgi = describe(gi = at::empty(x.sizes(), x.options()));
  const std::vector<int64_t> param_shape(x.sizes().end() - nd, x.sizes().end());
  const at::TensorOptions param_options = x.options().dtype(*param_type);
  if (output_mask[1] && has_weight) dgw = describe(gw = at::empty(param_shape, param_options));
  if (output_mask[2] && bias && bias->defined()) {
    dgb = describe(gb = at::empty(param_shape, param_options));
  }
  const at::Tensor wc = has_weight ? weight->contiguous() : at::Tensor();
  if (has_weight) w = describe(wc);
  launchTask(streamOf(x), "layer_norm_backward",
             [dgi, dgw, dgb, go = describe(g), i = describe(x), m = describe(mean.contiguous()),
              r = describe(rstd.contiguous()), w, nd = static_cast<int>(nd)] {
               nk::layer_norm_backward(dgi ? &*dgi : nullptr, dgw ? &*dgw : nullptr,
                                       dgb ? &*dgb : nullptr, go, i, m, r, w ? &*w : nullptr, nd);
             });
  return {gi, gw, gb};
}

// ---- batch norm -------------------------------------------------------------------------

// Per-channel tensors (weight, bias, running and saved statistics): 1-D, C elements of `dtype`.
bool bnParamOk(const std::optional<at::Tensor>& p, const at::Tensor& input, at::ScalarType dtype) {
  return !p || !p->defined() ||
         (describable(*p) && p->scalar_type() == dtype && p->dim() == 1 &&
          p->numel() == input.size(1));
}

std::optional<nk::TensorDesc> optDesc(const std::optional<at::Tensor>& p) {
  if (!p || !p->defined()) return std::nullopt;
  return describe(*p);
}

const nk::TensorDesc* ptr(const std::optional<nk::TensorDesc>& d) { return d ? &*d : nullptr; }

bool isHalfInput(const at::Tensor& input) {
  return input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
}

// The dtype of the parameters (weight, bias, running stats) the kernel accepts with `input`, or
// nullopt: ATen's CPU rule, every defined parameter in the input's dtype or, for a float16 /
// bfloat16 input, every one in float32 (its mixed mode; autocast and apex O2 produce it). Other
// mixes go to ATen's kernel, which raises PyTorch's message.
std::optional<at::ScalarType> bnParamDType(const at::Tensor& input,
                                           std::initializer_list<const std::optional<at::Tensor>*>
                                               params) {
  std::optional<at::ScalarType> dtype;
  for (const std::optional<at::Tensor>* p : params) {
    if (*p && (*p)->defined()) {
      dtype = (*p)->scalar_type();
      break;
    }
  }
  if (!dtype) return input.scalar_type();
  if (*dtype != input.scalar_type() && !(isHalfInput(input) && *dtype == at::kFloat)) {
    return std::nullopt;
  }
  for (const std::optional<at::Tensor>* p : params) {
    if (!bnParamOk(*p, input, *dtype)) return std::nullopt;
  }
  return dtype;
}

// The kernel computes in float32 for float16 / bfloat16 inputs (float64 for float64), reading
// and writing each tensor in its own dtype, so a 16-bit input's output is rounded once.
bool bnInputOk(const at::Tensor& input) {
  return describableFloating(input) && input.dim() >= 2 && input.numel() > 0 &&
         nk::batch_norm_supports(*toKernelDType(input.scalar_type()));
}

// The dtype of save_mean / save_invstd: float32 for a 16-bit input, as CUDA's kernel and
// PyTorch's decomposition for non-CPU devices (the CPU kernel rounds them to the input's dtype,
// which the backward then reads).
at::ScalarType bnStatDType(const at::Tensor& input) {
  return isHalfInput(input) ? at::kFloat : input.scalar_type();
}

bool bnOk(const at::Tensor& input, const std::optional<at::Tensor>& weight,
          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
          const std::optional<at::Tensor>& running_var, bool training) {
  if (!bnInputOk(input)) return false;
  const bool has_stats = running_mean && running_mean->defined() && running_var &&
                         running_var->defined();
  if (!training && !has_stats) return false;
  return bnParamDType(input, {&weight, &bias, &running_mean, &running_var}).has_value();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  if (!bnOk(input, weight, bias, running_mean, running_var, training)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, input, weight, bias, running_mean, running_var, training, momentum,
                     eps);
    runOnHost(NPU_ATEN_OP("native_batch_norm", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const int64_t c = input.size(1);
  at::Tensor out = at::empty(input.sizes(), input.options());
  // In eval mode the saved statistics are unused; torch_npu returns them with C elements, as
  // the meta kernel (and CUDA) size them, where ATen's CPU kernel returns them empty. Zeros.
  const auto stat_options = input.options().dtype(bnStatDType(input));
  at::Tensor save_mean = training ? at::empty({c}, stat_options) : at::zeros({c}, stat_options);
  at::Tensor save_invstd = training ? at::empty({c}, stat_options) : at::zeros({c}, stat_options);
  std::optional<nk::TensorDesc> sm, si;
  if (training) {
    sm = describe(save_mean);
    si = describe(save_invstd);
  }
  launchTask(streamOf(input), "batch_norm",
             [o = describe(out), sm, si, i = describe(input), w = optDesc(weight),
              b = optDesc(bias), rm = optDesc(running_mean), rv = optDesc(running_var), training,
              momentum, eps] {
               nk::batch_norm(o, ptr(sm), ptr(si), i, ptr(w), ptr(b), ptr(rm), ptr(rv), training,
                              momentum, eps);
             });
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  // The saved statistics come from our forward (float32 for a 16-bit input) or from ATen's
  // kernel (the input's dtype): either is read in its own dtype.
  auto savedOk = [&](const std::optional<at::Tensor>& p) {
    return p && p->defined() &&
           (bnParamOk(p, input, bnStatDType(input)) || bnParamOk(p, input, input.scalar_type()));
  };
  const bool saved_ok = !train || (savedOk(save_mean) && savedOk(save_invstd));
  if (!bnOk(input, weight, std::nullopt, running_mean, running_var, train) || !saved_ok ||
      !describable(grad_out) || grad_out.sizes() != input.sizes() ||
      grad_out.scalar_type() != input.scalar_type()) {
    torch::jit::Stack stack;
    torch::jit::push(stack, grad_out, input, weight, running_mean, running_var, save_mean,
                     save_invstd, train, eps, output_mask);
    runOnHost(NPU_ATEN_OP("native_batch_norm_backward", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const int64_t c = input.size(1);
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb;
  if (output_mask[0]) dgi = describe(gi = at::empty(input.sizes(), input.options()));
  // grad_weight / grad_bias in the parameters' dtype (float32 in the mixed mode).
  const auto param_options =
      input.options().dtype(*bnParamDType(input, {&weight, &running_mean, &running_var}));
  if (output_mask[1]) dgw = describe(gw = at::empty({c}, param_options));
  if (output_mask[2]) dgb = describe(gb = at::empty({c}, param_options));
  launchTask(streamOf(input), "batch_norm_backward",
             [dgi, dgw, dgb, go = describe(grad_out), i = describe(input), w = optDesc(weight),
              rm = optDesc(running_mean), rv = optDesc(running_var), sm = optDesc(save_mean),
              si = optDesc(save_invstd), train, eps] {
               nk::batch_norm_backward(ptr(dgi), ptr(dgw), ptr(dgb), go, i, ptr(w), ptr(rm),
                                       ptr(rv), ptr(sm), ptr(si), train, eps);
             });
  return {gi, gw, gb};
}


// ---- group norm -------------------------------------------------------------------------

// Group norm is batch norm's kernel over the [1, N * group, D * HxW] view (each (n, g) a
// channel, training statistics, no affine), written in the compute dtype (float32 for float16 /
// bfloat16), then the per-channel affine in that dtype and one rounding to the input's dtype:
// ATen's composite would round the normalised values and the affine's product to half.
// mean / rstd are [N, group] in ATen's CPU dtypes (the input's, float32 for a 16-bit input with
// float32 weight / bias), so that a backward handed to ATen's CPU kernel reads them as it
// expects; ours reads any floating dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt sym_n, c10::SymInt sym_c,
    c10::SymInt sym_hxw, int64_t group, double eps) {
  const int64_t N = sym_n.guard_int(__FILE__, __LINE__), C = sym_c.guard_int(__FILE__, __LINE__),
                HxW = sym_hxw.guard_int(__FILE__, __LINE__);
  const std::optional<at::ScalarType> param_dtype = bnParamDType(input, {&weight, &bias});
  auto affineOk = [&](const std::optional<at::Tensor>& p) {
    return !p || !p->defined() || (describable(*p) && p->numel() == C);
  };
  const bool ok = describableFloating(input) && input.dim() >= 2 && input.numel() > 0 &&
                  group > 0 && C % group == 0 && input.size(1) == C &&
                  input.numel() == N * C * HxW && param_dtype && affineOk(weight) &&
                  affineOk(bias) && nk::batch_norm_supports(*toKernelDType(input.scalar_type()));
  if (!ok) {
    torch::jit::Stack stack;
    torch::jit::push(stack, input, weight, bias, N, C, HxW, group, eps);
    runOnHost(NPU_ATEN_OP("native_group_norm", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = input.contiguous().view({1, N * group, (C / group) * HxW});
  const at::ScalarType compute = bnStatDType(input);
  const bool has_w = weight && weight->defined(), has_b = bias && bias->defined();
  // Without affine and rounding, the kernel writes the result itself.
  at::Tensor y = at::empty(x.sizes(), input.options().dtype(
                                          has_w || has_b ? compute : input.scalar_type()));
  at::Tensor mean = at::empty({N, group}, input.options().dtype(*param_dtype));
  at::Tensor rstd = at::empty({N, group}, input.options().dtype(*param_dtype));
  launchTask(streamOf(input), "group_norm",
             [o = describe(y), m = describe(mean), r = describe(rstd), i = describe(x), eps] {
               nk::batch_norm(o, &m, &r, i, nullptr, nullptr, nullptr, nullptr,
                              /*training=*/true, /*momentum=*/0.0, eps);
             });
  y = y.view({N, C, HxW});
  if (has_w || has_b) {
    const auto perChannel = [&](const std::optional<at::Tensor>& p) {
      return p->to(compute).view({1, C, 1});
    };
    if (has_w && has_b) {
      y = at::addcmul(perChannel(bias), y, perChannel(weight));
    } else {
      y = has_w ? y * perChannel(weight) : y + perChannel(bias);
    }
    y = y.to(input.scalar_type());
  }
  return {y.view(input.sizes()), mean, rstd};
}

// grad_input in the input's dtype, grad_weight / grad_bias in the weight's (ATen's CPU
// contract); the kernel computes in float32 (float64 for float64) with per-plane sums in double.
// Calls it does not cover (grad_weight / grad_bias asked without a weight, mismatched dtypes,
// empty inputs) go to ATen's kernel, which also gives PyTorch's messages.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, c10::SymInt sym_n,
    c10::SymInt sym_c, c10::SymInt sym_hxw, int64_t group, std::array<bool, 3> output_mask) {
  const int64_t N = sym_n.guard_int(__FILE__, __LINE__), C = sym_c.guard_int(__FILE__, __LINE__),
                HxW = sym_hxw.guard_int(__FILE__, __LINE__);
  const bool has_w = weight && weight->defined();
  auto statOk = [&](const at::Tensor& t) {
    return describableFloating(t) && t.numel() == N * group;
  };
  const bool ok =
      describableFloating(input) && input.dim() >= 2 && input.numel() > 0 && group > 0 &&
      C % group == 0 && input.size(1) == C && input.numel() == N * C * HxW &&
      describable(grad_out) && grad_out.sizes() == input.sizes() &&
      grad_out.scalar_type() == input.scalar_type() && statOk(mean) && statOk(rstd) &&
      nk::batch_norm_supports(*toKernelDType(input.scalar_type())) &&
      (has_w ? bnParamDType(input, {&weight}).has_value() && weight->numel() == C
             : !output_mask[1] && !output_mask[2]);
  if (!ok) {
    torch::jit::Stack stack;
    torch::jit::push(stack, grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask);
    runOnHost(NPU_ATEN_OP("native_group_norm_backward", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  // [N, C, HxW] views (strided where the layout allows, e.g. channels-last; the kernel reads
  // any strides).
  const at::Tensor x = input.reshape({N, C, HxW}), dy = grad_out.reshape({N, C, HxW});
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb;
  if (output_mask[0]) {
    gi = at::empty(input.sizes(), input.options());
    dgi = describe(gi.view({N, C, HxW}));
  }
  if (output_mask[1]) dgw = describe(gw = at::empty({C}, weight->options()));
  if (output_mask[2]) dgb = describe(gb = at::empty({C}, weight->options()));
  launchTask(streamOf(input), "group_norm_backward",
             [dgi, dgw, dgb, go = describe(dy), i = describe(x), m = describe(mean),
              r = describe(rstd), w = optDesc(weight), group] {
               nk::group_norm_backward(ptr(dgi), ptr(dgw), ptr(dgb), go, i, m, r, ptr(w), group);
             });
  return {gi, gw, gb};
}

// The functional forms torch.compile / decompositions call: the same kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  return native::native_batch_norm(input, weight, bias, running_mean, running_var, training,
                                   momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  return native::native_batch_norm(input, weight, bias, std::nullopt, std::nullopt, training,
                                   momentum, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_softmax", softmax<false>);
  NPU_IMPL(m, "_softmax.out", softmax_out<false>);
  NPU_IMPL(m, "_log_softmax", softmax<true>);
  NPU_IMPL(m, "_log_softmax.out", softmax_out<true>);
  NPU_IMPL(m, "_softmax_backward_data", softmax_backward<false>);
  NPU_IMPL(m, "_log_softmax_backward_data", softmax_backward<true>);
  NPU_IMPL(m, "native_layer_norm", native_layer_norm);
  NPU_IMPL(m, "native_layer_norm_backward", native_layer_norm_backward);
  NPU_IMPL(m, "native_batch_norm", native_batch_norm);
  NPU_IMPL(m, "native_batch_norm_backward", native_batch_norm_backward);
  NPU_IMPL(m, "_native_batch_norm_legit", native_batch_norm_legit);
  NPU_IMPL(m, "_native_batch_norm_legit.no_stats", native_batch_norm_legit_no_stats);
  NPU_IMPL(m, "native_group_norm", native_group_norm);
  NPU_IMPL(m, "native_group_norm_backward", native_group_norm_backward);
}

}  // namespace torch_npu::native
