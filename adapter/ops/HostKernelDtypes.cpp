// The dtype widening of the host-kernel path (HostKernelDtypes.h).
//  - widenings() lists each op by its name (every overload), which of its tensors compute in
//    float32 (16-bit floats; for a few float-only kernels integers too), and which of its
//    arguments are indices widened from int32 to int64;
//  - runWidened replaces those arguments by widened npu copies (queued conversions: nothing
//    waits), runs the op, then narrows the results: a fresh float32 result goes back to the
//    narrow dtype of the inputs, and a written argument (in-place self, out=) that was widened
//    receives its widened result by a copy;
//  - ops whose backend-default kernel refuses before the host path could widen (linalg_inv_ex)
//    or runs a CPU library on npu tensors (_nnpack_spatial_convolution) are sent to the host
//    path directly;
//  - one_hot, a composite op (no host kernel) that ATen limits to int64 indices, takes int32 as
//    torch_npu's does, and returns the indices' dtype as torch_npu's does;
//  - _cdist_backward for p = inf follows the card's CdistGrad (>= the rounded distance).
#include "HostKernelDtypes.h"

#include "DeviceCheck.h"
#include "ExecutionPaths.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/one_hot_native.h>
#include <torch/library.h>

#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_npu {
namespace {

// What a call computes in float32 (its floating results return to the narrow dtype).
enum class Compute : uint8_t {
  kAsIs,       // no floating widening
  kFloat32,    // Half / BFloat16 tensors compute in float32
  kFloat32Ints  // Half / BFloat16 and integer tensors compute in float32 (results truncated back)
};

struct Widening {
  Compute compute;
  std::vector<std::string> indices;  // arguments widened from int32 to int64
};

// Ops whose ATen CPU kernel lacks a dtype that torch_npu's kernel takes on a 910B.
const std::unordered_map<std::string, Widening>& widenings() {
  static const std::unordered_map<std::string, Widening> table = {
      // CPU kernels without float16 / bfloat16
      {"aten::_cdist_forward", {Compute::kFloat32, {}}},
      {"aten::_cdist_backward", {Compute::kFloat32, {}}},
      {"aten::_pdist_forward", {Compute::kFloat32, {}}},
      {"aten::_pdist_backward", {Compute::kFloat32, {}}},
      {"aten::_add_relu", {Compute::kFloat32, {}}},
      {"aten::_add_relu_", {Compute::kFloat32, {}}},
      {"aten::avg_pool3d", {Compute::kFloat32, {}}},
      {"aten::avg_pool3d_backward", {Compute::kFloat32, {}}},
      {"aten::_upsample_bicubic2d_aa", {Compute::kFloat32, {}}},
      {"aten::_upsample_bicubic2d_aa_backward", {Compute::kFloat32, {}}},
      {"aten::_upsample_bilinear2d_aa", {Compute::kFloat32, {}}},
      {"aten::_upsample_bilinear2d_aa_backward", {Compute::kFloat32, {}}},
      {"aten::linalg_inv_ex", {Compute::kFloat32, {}}},
      // CPU kernels that round float16 / bfloat16 intermediates (interpolation weights, partial
      // sums, the terms of a derivative) where the card computes in float32 and rounds once
      {"aten::upsample_linear1d", {Compute::kFloat32, {}}},
      {"aten::upsample_linear1d_backward", {Compute::kFloat32, {}}},
      {"aten::upsample_trilinear3d", {Compute::kFloat32, {}}},
      {"aten::upsample_trilinear3d_backward", {Compute::kFloat32, {}}},
      {"aten::grid_sampler_2d", {Compute::kFloat32, {}}},
      {"aten::grid_sampler_2d_backward", {Compute::kFloat32, {}}},
      // the cube unit accumulates 16-bit convolutions in float32 (slow_conv_transpose2d and its
      // gradient reach ATen's kernels; the npu's own convolutions go through Convolution.cpp)
      {"aten::slow_conv_transpose2d", {Compute::kFloat32, {}}},
      {"aten::convolution_backward", {Compute::kFloat32, {}}},
      // integer inputs of float-only CPU kernels (the card casts them through float32)
      {"aten::hardsigmoid", {Compute::kFloat32Ints, {}}},
      {"aten::hardsigmoid_", {Compute::kFloat32Ints, {}}},
      // int32 indices (and the 16-bit floats of the loss)
      {"aten::multilabel_margin_loss_forward", {Compute::kFloat32, {"target"}}},
      {"aten::multilabel_margin_loss_backward", {Compute::kFloat32, {"target"}}},
      {"aten::put_", {Compute::kAsIs, {"index"}}},
      {"aten::put", {Compute::kAsIs, {"index"}}},
  };
  return table;
}

// Whether `t` computes in float32 under `compute`.
bool widensToFloat(const at::Tensor& t, Compute compute) {
  if (!t.defined() || !t.is_privateuseone() || compute == Compute::kAsIs) return false;
  const at::ScalarType type = t.scalar_type();
  if (type == at::kHalf || type == at::kBFloat16) return true;
  return compute == Compute::kFloat32Ints && at::isIntegralType(type, /*includeBool=*/false);
}

bool isInt32Index(const at::Tensor& t) {
  return t.defined() && t.is_privateuseone() && t.scalar_type() == at::kInt;
}

// Applies `f` to each tensor of a tensor or tensor-list value.
template <class Fn>
c10::IValue mapTensors(const c10::IValue& value, const Fn& f) {
  if (value.isTensor()) return f(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList().vec()) out.push_back(f(t));
    return out;
  }
  if (value.isList()) {  // Tensor?[]
    const c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& e : list.vec()) out.push_back(e.isTensor() ? f(e.toTensor()) : e);
    return out;
  }
  return value;
}

template <class Pred>
bool anyTensor(const c10::IValue& value, const Pred& pred) {
  bool found = false;
  mapTensors(value, [&](const at::Tensor& t) {
    found = found || pred(t);
    return t;
  });
  return found;
}

}  // namespace

bool runWidened(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                void (*run)(const c10::OperatorHandle&, torch::jit::Stack*)) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& table = widenings();
  const auto entry = table.find(schema.name());
  if (entry == table.end()) return false;
  const Widening& widening = entry->second;
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t begin = stack->size() - num_args;

  auto isIndex = [&](size_t i) {
    for (const std::string& name : widening.indices) {
      if (arguments[i].name() == name) return true;
    }
    return false;
  };
  // The 16-bit dtype the floating results return to (the first 16-bit floating input's).
  std::optional<at::ScalarType> narrow;
  bool any = false;
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    if (!narrow && !isIndex(i)) {
      mapTensors(v, [&](const at::Tensor& t) {
        if (!narrow && widensToFloat(t, widening.compute)) narrow = t.scalar_type();
        return t;
      });
    }
    if (isIndex(i) && anyTensor(v, isInt32Index)) any = true;
  }
  if (!narrow && !any) return false;

  // The widened arguments; written ones that were widened are remembered to receive the result.
  torch::jit::Stack widened;
  widened.reserve(num_args);
  std::vector<bool> replaced(num_args, false);
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    const c10::AliasInfo* alias = arguments[i].alias_info();
    const bool written = alias != nullptr && alias->isWrite();
    const bool out_argument = written && arguments[i].kwarg_only();
    c10::IValue w = mapTensors(v, [&](const at::Tensor& t) -> at::Tensor {
      if (narrow && !isIndex(i) && widensToFloat(t, widening.compute)) {
        replaced[i] = true;
        // An out= tensor's values are not read: an empty float32 tensor the op sizes.
        if (out_argument) return at::empty({0}, t.options().dtype(at::kFloat));
        return t.to(at::kFloat);
      }
      if (isIndex(i) && isInt32Index(t)) {
        replaced[i] = true;
        return t.to(at::kLong);
      }
      return t;
    });
    TORCH_INTERNAL_ASSERT(!replaced[i] || !written || v.isTensor(), schema.name(),
                          ": a widened written argument must be a tensor (HostKernelDtypes.cpp)");
    widened.push_back(std::move(w));
  }

  run(op, &widened);

  // Narrow the results back.
  std::vector<size_t> written;
  for (size_t i = 0; i < num_args; ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) written.push_back(i);
  }
  auto narrowFresh = [&](const at::Tensor& t) {
    return (narrow && t.defined() && t.scalar_type() == at::kFloat) ? t.to(*narrow) : t;
  };
  const auto& returns = schema.returns();
  std::vector<c10::IValue> results;
  results.reserve(returns.size());
  size_t next_written = 0;
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::IValue& got = widened[r];
    if (returns[r].alias_info() != nullptr && next_written < written.size()) {
      const size_t index = written[next_written++];
      const c10::IValue& original = (*stack)[begin + index];
      if (replaced[index]) {
        const at::Tensor& target = original.toTensor();
        const at::Tensor& value = got.toTensor();
        if (target.sizes() != value.sizes()) at::native::resize_output(target, value.sizes());
        target.copy_(value);
      }
      results.push_back(original);
    } else {
      results.push_back(mapTensors(got, narrowFresh));
    }
  }
  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : results) stack->push_back(std::move(r));
  return true;
}

namespace {

// torch_npu's one_hot (aclnnOneHot) takes int32 and int64 indices and returns their dtype.
at::Tensor oneHot(const at::Tensor& self, int64_t num_classes) {
  if (self.scalar_type() == at::kInt) {
    return at::native::one_hot(self.to(at::kLong), num_classes).to(at::kInt);
  }
  TORCH_CHECK(self.scalar_type() == at::kLong,
              "one_hot: the indices must be int64 or int32 on the npu device, got ",
              self.scalar_type(), "; convert them with .long()");
  return at::native::one_hot(self, num_classes);
}

// The gradient of cdist for p = inf goes to the coordinates where |x1 - x2| reaches the distance.
// ATen's kernel tests |diff| == dist, which a 16-bit distance (rounded) rarely meets exactly; the
// card's CdistGrad takes |diff| >= dist, in float32 over the rounded distance. Other p: ATen's
// kernel (by the host path, widened).
at::Tensor cdistBackward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2,
                         double p, const at::Tensor& cdist) {
  if (!std::isinf(p) || p < 0) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("_cdist_backward", ""), grad, x1, x2, p, cdist);
  }
  TORCH_CHECK(x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1),
              "_cdist_backward: x1 and x2 must be (..., P, M) and (..., R, M), got ", x1.sizes(),
              " and ", x2.sizes());
  const at::ScalarType dtype = x1.scalar_type();
  auto wide = [](const at::Tensor& t) {
    return (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) ? t.to(at::kFloat)
                                                                               : t;
  };
  const at::Tensor diff = wide(x1).unsqueeze(-2) - wide(x2).unsqueeze(-3);  // (..., P, R, M)
  const at::Tensor reaches = diff.abs() >= wide(cdist).unsqueeze(-1);
  const at::Tensor result = (wide(grad).unsqueeze(-1) * diff.sign() * reaches).sum(-2);
  return result.to(dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "one_hot", oneHot);
  NPU_IMPL(m, "_cdist_backward", cdistBackward);
  // ATen's default kernel for backends (CompositeExplicitAutogradNonFunctional) checks the dtype
  // before any host kernel could widen it: the op goes to the host-kernel path directly.
  // Likewise an op whose backend-default kernel (CompositeExplicitAutograd) runs a CPU library
  // on the npu tensors themselves (NNPACK refuses them).
  for (const char* name : {"linalg_inv_ex", "_nnpack_spatial_convolution"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&runUnregistered>());
  }
}

}  // namespace torch_npu
