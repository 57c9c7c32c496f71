// softmax / log_softmax, layer_norm and batch_norm, with backward, on the library's
// normalization kernels. Calls the kernels do not cover (dtypes, 0-dim inputs, half_to_float on
// a non-half input, unusual parameter layouts) hand over to ATen's CPU kernel on the stream
// (ExecutionPaths.h), which also gives PyTorch's messages.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
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
  launchTask(streamOf(self), kLog ? "log_softmax" : "softmax",
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
  launchTask(streamOf(output), kLog ? "log_softmax_backward" : "softmax_backward",
             [gi = describe(grad_input), go = describe(grad_output), o = describe(output), d] {
               nk::softmax_backward(gi, go, o, d, kLog);
             });
  return grad_input;
}

// ---- layer norm -------------------------------------------------------------------------

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
  auto paramOk = [&](const std::optional<at::Tensor>& p) {
    return !p || !p->defined() ||
           (p->scalar_type() == input.scalar_type() && describable(*p) && p->numel() == n);
  };
  if (!ok || !paramOk(weight) || !paramOk(bias) || input.numel() == 0) {
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
  at::Tensor mean = at::empty(stat_shape, x.options());
  at::Tensor rstd = at::empty(stat_shape, x.options());
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
  const bool ok = describableFloating(input) && describableFloating(grad_out) &&
                  grad_out.sizes() == input.sizes() && input.numel() > 0 &&
                  mean.scalar_type() == input.scalar_type() &&
                  (!has_weight || weight->scalar_type() == input.scalar_type());
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
  if (output_mask[1] && has_weight) dgw = describe(gw = at::empty(param_shape, x.options()));
  if (output_mask[2] && bias && bias->defined()) {
    dgb = describe(gb = at::empty(param_shape, x.options()));
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

bool bnParamOk(const std::optional<at::Tensor>& p, const at::Tensor& input) {
  return !p || !p->defined() ||
         (describable(*p) && p->scalar_type() == input.scalar_type() && p->dim() == 1 &&
          p->numel() == input.size(1));
}

std::optional<nk::TensorDesc> optDesc(const std::optional<at::Tensor>& p) {
  if (!p || !p->defined()) return std::nullopt;
  return describe(*p);
}

const nk::TensorDesc* ptr(const std::optional<nk::TensorDesc>& d) { return d ? &*d : nullptr; }

bool bnOk(const at::Tensor& input, const std::optional<at::Tensor>& weight,
          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
          const std::optional<at::Tensor>& running_var, bool training) {
  if (!describableFloating(input) || input.dim() < 2 || input.numel() == 0 ||
      (input.scalar_type() != at::kFloat && input.scalar_type() != at::kDouble)) {
    return false;  // 16-bit inputs keep float statistics in ATen: its kernel does those
  }
  const bool has_stats = running_mean && running_mean->defined() && running_var &&
                         running_var->defined();
  if (!training && !has_stats) return false;
  return bnParamOk(weight, input) && bnParamOk(bias, input) && bnParamOk(running_mean, input) &&
         bnParamOk(running_var, input);
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
  // As ATen's CPU kernel: the saved statistics are empty in eval mode.
  at::Tensor save_mean = at::empty({training ? c : 0}, input.options());
  at::Tensor save_invstd = at::empty({training ? c : 0}, input.options());
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
  const bool saved_ok = !train || (save_mean && save_mean->defined() && save_invstd &&
                                   save_invstd->defined() && bnParamOk(save_mean, input) &&
                                   bnParamOk(save_invstd, input));
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
  if (output_mask[1]) dgw = describe(gw = at::empty({c}, input.options()));
  if (output_mask[2]) dgb = describe(gb = at::empty({c}, input.options()));
  launchTask(streamOf(input), "batch_norm_backward",
             [dgi, dgw, dgb, go = describe(grad_out), i = describe(input), w = optDesc(weight),
              rm = optDesc(running_mean), rv = optDesc(running_var), sm = optDesc(save_mean),
              si = optDesc(save_invstd), train, eps] {
               nk::batch_norm_backward(ptr(dgi), ptr(dgw), ptr(dgb), go, i, ptr(w), ptr(rm),
                                       ptr(rv), ptr(sm), ptr(si), train, eps);
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
}

}  // namespace torch_npu::native
