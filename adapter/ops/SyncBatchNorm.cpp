// SyncBatchNorm's pieces on the library's batch-norm kernels (npu/kernels/batch_norm.h): the aten
// ops ATen has only CUDA kernels for (batch_norm_stats, batch_norm_elemt, batch_norm_gather_stats
// / _with_counts, batch_norm_backward_reduce, batch_norm_backward_elemt), with CUDA's contracts,
// and torch_npu's batch_norm_reduce / batch_norm_gather_stats_update (torch.ops.npu.*, schemas
// below). With them torch.nn.SyncBatchNorm trains on npu over hccl.
//
// dtypes, as CUDA's kernels: the input is float32/64, float16 or bfloat16; per-channel statistics
// come out in float32 for a 16-bit input (batch_norm_stats), in the dtype of `mean` (the gathers,
// the backward reduce's sums) or of `weight` (grad_weight / grad_bias); per-channel inputs may be
// of any floating dtype. There is no CPU kernel to hand a call to, so the argument checks here
// are the only ones: each names the argument and what it must be.
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <string>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

bool isHalf(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The input of every op here: [N, C, *] of a floating dtype the kernels take.
void checkInput(const char* op, const at::Tensor& input, const char* name = "input") {
  TORCH_CHECK(input.dim() >= 2, op, ": ", name, " must be [N, C, *] with at least 2 dims, got a ",
              input.dim(), "-dim input tensor of shape ", input.sizes());
  TORCH_CHECK(describableFloating(input) &&
                  nk::batch_norm_supports(*toKernelDType(input.scalar_type())),
              op, ": ", name, " must be float32, float64, float16 or bfloat16, got ",
              input.scalar_type());
}

// A per-channel tensor: C elements of a floating dtype.
void checkChannel(const char* op, const char* name, const at::Tensor& t, int64_t C) {
  TORCH_CHECK(t.defined(), op, ": ", name, " must be a tensor of ", C, " elements");
  TORCH_CHECK(describableFloating(t), op, ": ", name, " must be a floating tensor, got ",
              t.scalar_type());
  TORCH_CHECK(t.numel() == C, op, ": ", name, " must have one element per channel (", C,
              ", the input's size(1)), got shape ", t.sizes());
}

void checkOptChannel(const char* op, const char* name, const std::optional<at::Tensor>& t,
                     int64_t C) {
  if (t && t->defined()) checkChannel(op, name, *t, C);
}

void checkSameShape(const char* op, const char* name, const at::Tensor& t,
                    const at::Tensor& input) {
  TORCH_CHECK(t.sizes() == input.sizes(), op, ": ", name, " must have the input's shape ",
              input.sizes(), ", got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), op, ": ", name,
              " must have the input's dtype ", input.scalar_type(), ", got ", t.scalar_type());
}

std::optional<nk::TensorDesc> optDesc(const std::optional<at::Tensor>& p) {
  if (!p || !p->defined()) return std::nullopt;
  return describe(*p);
}
std::optional<nk::TensorDesc> optDesc(const at::Tensor& t) {
  if (!t.defined()) return std::nullopt;
  return describe(t);
}
const nk::TensorDesc* ptr(const std::optional<nk::TensorDesc>& d) { return d ? &*d : nullptr; }

// ---- forward ------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps) {
  checkInput("batch_norm_stats", input);
  const c10::DeviceGuard guard(input.device());
  const int64_t C = input.size(1);
  const auto options = input.options().dtype(isHalf(input) ? at::kFloat : input.scalar_type());
  at::Tensor mean = at::empty({C}, options), invstd = at::empty({C}, options);
  launchTask(streamOf(input), "batch_norm_stats",
             [m = describe(mean), s = describe(invstd), i = describe(input), eps] {
               nk::batch_norm_stats(m, s, i, eps);
             });
  return {mean, invstd};
}

// torch_npu.batch_norm_reduce(input, eps) -> (sum, square_sum): float32 per-channel sums (eps is
// unused, as in torch_npu).
std::tuple<at::Tensor, at::Tensor> batch_norm_reduce(const at::Tensor& input, double /*eps*/) {
  checkInput("batch_norm_reduce", input);
  const c10::DeviceGuard guard(input.device());
  const int64_t C = input.size(1);
  const auto options = input.options().dtype(at::kFloat);
  at::Tensor sum = at::empty({C}, options), square_sum = at::empty({C}, options);
  launchTask(streamOf(input), "batch_norm_reduce",
             [s = describe(sum), q = describe(square_sum), i = describe(input)] {
               nk::batch_norm_sums(s, q, i);
             });
  return {sum, square_sum};
}

at::Tensor& batch_norm_elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                                 const at::Tensor& invstd, double /*eps*/, at::Tensor& out) {
  const char* op = "batch_norm_elemt";
  checkInput(op, input);
  const int64_t C = input.size(1);
  checkOptChannel(op, "weight", weight, C);
  checkOptChannel(op, "bias", bias, C);
  checkChannel(op, "mean", mean, C);
  checkChannel(op, "invstd", invstd, C);
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), op, ": out must have the input's dtype ",
              input.scalar_type(), ", got ", out.scalar_type());
  const c10::DeviceGuard guard(input.device());
  at::native::resize_output(out, input.sizes());
  if (input.numel() == 0) return out;
  launchTask(streamOf(input), "batch_norm_elemt",
             [o = describe(out), i = describe(input), w = optDesc(weight), b = optDesc(bias),
              m = describe(mean), s = describe(invstd)] {
               nk::batch_norm_elemt(o, i, ptr(w), ptr(b), m, s);
             });
  return out;
}

at::Tensor batch_norm_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                            const at::Tensor& invstd, double eps) {
  checkInput("batch_norm_elemt", input);
  const c10::DeviceGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options());
  return native::batch_norm_elemt_out(input, weight, bias, mean, invstd, eps, out);
}

// ---- gathering the ranks' statistics ------------------------------------------------------

void checkGather(const char* op, const at::Tensor& input, const at::Tensor& mean,
                 const char* mean_name, const at::Tensor& invstd, const char* invstd_name,
                 const std::optional<at::Tensor>& running_mean,
                 const std::optional<at::Tensor>& running_var) {
  checkInput(op, input);
  const int64_t C = input.size(1);
  TORCH_CHECK(mean.dim() == 2 && mean.size(1) == C, op, ": ", mean_name,
              " must be [world_size, C] (one row per rank, C = ", C, "), got shape ",
              mean.sizes());
  TORCH_CHECK(invstd.sizes() == mean.sizes(), op, ": ", invstd_name, " must have ", mean_name,
              "'s shape ", mean.sizes(), ", got ", invstd.sizes());
  TORCH_CHECK(describableFloating(mean) && describableFloating(invstd), op, ": ", mean_name,
              " and ", invstd_name, " must be floating tensors, got ", mean.scalar_type(),
              " and ", invstd.scalar_type());
  checkOptChannel(op, "running_mean", running_mean, C);
  checkOptChannel(op, "running_var", running_var, C);
}

void checkCounts(const char* op, const at::Tensor& counts, const at::Tensor& mean) {
  TORCH_CHECK(describable(counts) && counts.numel() == mean.size(0), op,
              ": counts must hold one element count per rank (", mean.size(0),
              ", the rows of the statistics), got shape ", counts.sizes());
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts) {
  const char* op = "batch_norm_gather_stats_with_counts";
  checkGather(op, input, mean, "mean", invstd, "invstd", running_mean, running_var);
  checkCounts(op, counts, mean);
  const c10::DeviceGuard guard(input.device());
  const int64_t C = input.size(1);
  at::Tensor mean_out = at::empty({C}, mean.options()),
             invstd_out = at::empty({C}, mean.options());
  launchTask(streamOf(input), "batch_norm_gather_stats",
             [mo = describe(mean_out), io = describe(invstd_out), m = describe(mean),
              s = describe(invstd), rm = optDesc(running_mean), rv = optDesc(running_var),
              momentum, eps, n = describe(counts)] {
               nk::batch_norm_gather_stats(mo, io, m, s, ptr(rm), ptr(rv), momentum, eps, n);
             });
  return {mean_out, invstd_out};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, int64_t count) {
  checkGather("batch_norm_gather_stats", input, mean, "mean", invstd, "invstd", running_mean,
              running_var);
  const c10::DeviceGuard guard(input.device());
  // Every rank counted `count` elements.
  at::Tensor counts = at::full({mean.size(0)}, static_cast<double>(count),
                               mean.options().dtype(at::kDouble));
  return native::batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var,
                                             momentum, eps, counts);
}

// torch_npu.batch_norm_gather_stats_update(input, sum, square_sum, running_mean, running_var,
// momentum, eps, counts) -> (mean, invstd), from the ranks' batch_norm_reduce sums.
std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_update(
    const at::Tensor& input, const at::Tensor& sum, const at::Tensor& square_sum,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts) {
  const char* op = "batch_norm_gather_stats_update";
  checkGather(op, input, sum, "sum", square_sum, "square_sum", running_mean, running_var);
  checkCounts(op, counts, sum);
  const c10::DeviceGuard guard(input.device());
  const int64_t C = input.size(1);
  at::Tensor mean_out = at::empty({C}, sum.options()), invstd_out = at::empty({C}, sum.options());
  launchTask(streamOf(input), "batch_norm_gather_stats_update",
             [mo = describe(mean_out), io = describe(invstd_out), s = describe(sum),
              q = describe(square_sum), rm = optDesc(running_mean), rv = optDesc(running_var),
              momentum, eps, n = describe(counts)] {
               nk::batch_norm_gather_stats_update(mo, io, s, q, ptr(rm), ptr(rv), momentum, eps,
                                                  n);
             });
  return {mean_out, invstd_out};
}

// ---- backward -----------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight, bool input_g,
    bool weight_g, bool bias_g) {
  const char* op = "batch_norm_backward_reduce";
  checkInput(op, input);
  checkSameShape(op, "grad_out", grad_out, input);
  const int64_t C = input.size(1);
  checkChannel(op, "mean", mean, C);
  checkChannel(op, "invstd", invstd, C);
  checkOptChannel(op, "weight", weight, C);
  const c10::DeviceGuard guard(input.device());
  const bool has_weight = weight && weight->defined();
  // As CUDA's: the sums in mean's dtype, grad_weight / grad_bias in weight's (only with a weight).
  at::Tensor sum_dy, sum_dy_xmu, grad_weight, grad_bias;
  if (input_g) {
    sum_dy = at::empty({C}, mean.options());
    sum_dy_xmu = at::empty({C}, mean.options());
  }
  if (weight_g && has_weight) grad_weight = at::empty({C}, weight->options());
  if (bias_g && has_weight) grad_bias = at::empty({C}, weight->options());
  if (!sum_dy.defined() && !grad_weight.defined() && !grad_bias.defined()) {
    return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
  }
  launchTask(streamOf(input), "batch_norm_backward_reduce",
             [sdy = optDesc(sum_dy), sdx = optDesc(sum_dy_xmu), gw = optDesc(grad_weight),
              gb = optDesc(grad_bias), go = describe(grad_out), i = describe(input),
              m = describe(mean), s = describe(invstd)] {
               nk::batch_norm_backward_reduce(ptr(sdy), ptr(sdx), ptr(gw), ptr(gb), go, i, m, s);
             });
  return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
}

at::Tensor batch_norm_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input,
                                     const at::Tensor& mean, const at::Tensor& invstd,
                                     const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
                                     const at::Tensor& count) {
  const char* op = "batch_norm_backward_elemt";
  checkInput(op, input);
  checkSameShape(op, "grad_out", grad_out, input);
  const int64_t C = input.size(1);
  checkChannel(op, "mean", mean, C);
  checkChannel(op, "invstd", invstd, C);
  checkOptChannel(op, "weight", weight, C);
  checkChannel(op, "sum_dy", sum_dy, C);
  checkChannel(op, "sum_dy_xmu", sum_dy_xmu, C);
  TORCH_CHECK(describable(count) && count.numel() > 0, op,
              ": count must hold the element count of each rank (its sum is the batch's size), "
              "got shape ", count.sizes());
  const c10::DeviceGuard guard(input.device());
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  if (input.numel() == 0) return grad_input;
  launchTask(streamOf(input), "batch_norm_backward_elemt",
             [gi = describe(grad_input), go = describe(grad_out), i = describe(input),
              m = describe(mean), s = describe(invstd), w = optDesc(weight),
              sdy = describe(sum_dy), sdx = describe(sum_dy_xmu), n = describe(count)] {
               nk::batch_norm_backward_elemt(gi, go, i, m, s, ptr(w), sdy, sdx, n);
             });
  return grad_input;
}

// ---- out= forms: the functional kernel, then its results copied into the outs (resized as
// ATen's out= rule) ------------------------------------------------------------------------

void intoOut(at::Tensor& out, const at::Tensor& result) {
  if (!result.defined()) return;
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
}

std::tuple<at::Tensor&, at::Tensor&> batch_norm_stats_out(const at::Tensor& input, double eps,
                                                          at::Tensor& out0, at::Tensor& out1) {
  auto [mean, invstd] = native::batch_norm_stats(input, eps);
  intoOut(out0, mean);
  intoOut(out1, invstd);
  return {out0, out1};
}

std::tuple<at::Tensor&, at::Tensor&> batch_norm_gather_stats_with_counts_out(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts, at::Tensor& out0, at::Tensor& out1) {
  auto [m, s] = native::batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean,
                                                            running_var, momentum, eps, counts);
  intoOut(out0, m);
  intoOut(out1, s);
  return {out0, out1};
}

std::tuple<at::Tensor&, at::Tensor&> batch_norm_gather_stats_out(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, int64_t count, at::Tensor& out0, at::Tensor& out1) {
  auto [m, s] = native::batch_norm_gather_stats(input, mean, invstd, running_mean, running_var,
                                                momentum, eps, count);
  intoOut(out0, m);
  intoOut(out1, s);
  return {out0, out1};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_backward_reduce_out(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight, bool input_g,
    bool weight_g, bool bias_g, at::Tensor& out0, at::Tensor& out1, at::Tensor& out2,
    at::Tensor& out3) {
  auto [sdy, sdx, gw, gb] = native::batch_norm_backward_reduce(grad_out, input, mean, invstd,
                                                               weight, input_g, weight_g, bias_g);
  intoOut(out0, sdy);
  intoOut(out1, sdx);
  intoOut(out2, gw);
  intoOut(out3, gb);
  return {out0, out1, out2, out3};
}

at::Tensor& batch_norm_backward_elemt_out(const at::Tensor& grad_out, const at::Tensor& input,
                                          const at::Tensor& mean, const at::Tensor& invstd,
                                          const std::optional<at::Tensor>& weight,
                                          const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
                                          const at::Tensor& count, at::Tensor& out) {
  intoOut(out, native::batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy,
                                                 sum_dy_xmu, count));
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("batch_norm_reduce(Tensor input, float eps) -> (Tensor, Tensor)");
  m.def("batch_norm_gather_stats_update(Tensor input, Tensor sum, Tensor square_sum, "
        "Tensor(a!)? running_mean, Tensor(b!)? running_var, float momentum, float eps, "
        "Tensor counts) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  NPU_IMPL(m, "batch_norm_reduce", batch_norm_reduce);
  NPU_IMPL(m, "batch_norm_gather_stats_update", batch_norm_gather_stats_update);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "batch_norm_stats", batch_norm_stats);
  NPU_IMPL(m, "batch_norm_elemt", batch_norm_elemt);
  NPU_IMPL(m, "batch_norm_elemt.out", batch_norm_elemt_out);
  NPU_IMPL(m, "batch_norm_gather_stats", batch_norm_gather_stats);
  NPU_IMPL(m, "batch_norm_gather_stats_with_counts", batch_norm_gather_stats_with_counts);
  NPU_IMPL(m, "batch_norm_backward_reduce", batch_norm_backward_reduce);
  NPU_IMPL(m, "batch_norm_backward_elemt", batch_norm_backward_elemt);
  NPU_IMPL(m, "batch_norm_stats.out", batch_norm_stats_out);
  NPU_IMPL(m, "batch_norm_gather_stats.out", batch_norm_gather_stats_out);
  NPU_IMPL(m, "batch_norm_gather_stats_with_counts.out", batch_norm_gather_stats_with_counts_out);
  NPU_IMPL(m, "batch_norm_backward_reduce.out", batch_norm_backward_reduce_out);
  NPU_IMPL(m, "batch_norm_backward_elemt.out", batch_norm_backward_elemt_out);
}

}  // namespace torch_npu::native
