// The checks every npu kernel registration goes through (NPU_IMPL):
//  - the device check: its tensor arguments must be on one device, as CUDA demands, so no kernel
//    of ours reads another device's memory (or host memory) while that device's stream may still
//    be writing it (below);
//  - the card check: what the card does with the call's (op, dtype), and strict card mode's
//    refusal or CPU fallback (CardCheck.h; a null pointer test for the ops the card runs
//    natively).
//
// How it works:
//  - Each op is registered with NPU_IMPL(m, "mm", mm) instead of m.impl("mm", TORCH_FN(mm)). The
//    wrapper walks the kernel's arguments at compile time (Tensor, optional<Tensor>, tensor
//    lists) and compares their devices before calling the kernel: a few loads and compares per
//    tensor, no allocation; the message is built only on failure.
//  - The rule of each op is PyTorch's own (native_functions.yaml, read at build time into
//    NoCheckOps.h): ops marked `device_check: NoCheck` are TensorIterator ops, which take CPU
//    0-dim tensors as scalars (DeviceRule::kTensorIterator); every other op gets CUDA's generated
//    wrapper's check (DeviceRule::kSameDevice), with its message.
//  - The ops that legitimately take tensors on other devices are listed in kExemptOps below, the
//    one place exemptions are made, each with its reason.
//  - The ATen host-kernel path and the CPU fallback (ops without a kernel of ours) apply the same
//    rule to the boxed arguments: checkDevices(op, stack) in runOnHost.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CompileTimeFunctionPointer.h>
#include <c10/core/Device.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "CardCheck.h"
#include "ExecutionPaths.h"
#include "NoCheckOps.h"  // generated: kNoCheckOps

namespace torch_npu {

enum class DeviceRule {
  kSameDevice,      // CUDA's generated wrappers: every defined tensor argument on one device
  kTensorIterator,  // the same, except that CPU 0-dim tensors pass (TensorIterator's scalars)
  kCpuIndices,      // as kTensorIterator, and the index list (Tensor?[]) may be on the CPU
  kIndicesToSelf,   // as kCpuIndices, and where self is on the CPU the indices may be anywhere
  kNone,            // exempt (kExemptOps)
};

namespace device_check {

struct Exemption {
  std::string_view op;  // the operator's name without overload; "*" ends a prefix
  DeviceRule rule;      // kNone, kCpuIndices or kIndicesToSelf
  std::string_view reason;
};

// The ops that take tensors on several devices by design. Everything else is checked.
inline constexpr Exemption kExemptOps[] = {
    {"_copy_from", DeviceRule::kNone, "a copy: source and destination are on different devices"},
    {"_copy_from_and_resize", DeviceRule::kNone, "a copy, as _copy_from"},
    {"set_", DeviceRule::kNone,
     "self takes source's storage; PyTorch's set_ checks the storage's device itself"},
    {"_has_compatible_shallow_copy_type", DeviceRule::kNone,
     "compares tensor types across devices: Module.to moves parameters cpu <-> npu through it"},
    {"is_set_to", DeviceRule::kNone,
     "compares two tensors' storages: on different devices they are simply not set to each other"},
    {"fill_", DeviceRule::kNone,
     "its value is a 0-dim tensor on any device, read with item() (as ATen's fill_ does)"},
    {"masked_fill_", DeviceRule::kNone,
     "checks self and mask itself with CUDA's message; its value is a 0-dim tensor on any device, "
     "read with item()"},
    {"bernoulli_", DeviceRule::kNone,
     "p may be on any device: it is copied to self's device first, as CUDA's kernel does"},
    {"_pack_padded_sequence", DeviceRule::kNone,
     "lengths is a CPU tensor by contract; the kernel refuses one on npu with torch_npu's "
     "message (PackedSequence.cpp)"},
    {"_foreach_*", DeviceRule::kNone,
     "lists may span devices (a model split over devices): a list whose devices differ takes "
     "ATen's per-tensor loop, whose ops are checked one by one (as CUDA's foreach kernels do)"},
    // Reached through the host-kernel path: advanced indexing takes its indices on the CPU or on
    // the tensor's device, as on CUDA (the CPU kernel reads either); the npu tensors must agree.
    {"index", DeviceRule::kCpuIndices, "x[cpu_index], as with CUDA"},
    {"_unsafe_index", DeviceRule::kCpuIndices, "indices may be on the CPU, as with CUDA"},
    {"index_put", DeviceRule::kCpuIndices, "indices may be on the CPU, as with CUDA"},
    {"index_put_", DeviceRule::kCpuIndices, "indices may be on the CPU, as with CUDA"},
    {"_index_put_impl_", DeviceRule::kIndicesToSelf,
     "indices may be on the CPU, as with CUDA; a CPU self takes npu indices, which ATen's "
     "index_put_ (AdvancedIndex) moves to self's device, as torch_npu accepts them"},
    {"_unsafe_index_put", DeviceRule::kCpuIndices, "indices may be on the CPU, as with CUDA"},
    {"_unsafe_masked_index", DeviceRule::kCpuIndices, "indices may be on the CPU, as with CUDA"},
    {"_unsafe_masked_index_put_accumulate", DeviceRule::kCpuIndices,
     "indices may be on the CPU, as with CUDA"},
};

constexpr std::string_view baseName(std::string_view op) {
  const size_t dot = op.find('.');
  return dot == std::string_view::npos ? op : op.substr(0, dot);
}

constexpr const Exemption* exemptionFor(std::string_view op) {
  const std::string_view base = baseName(op);
  for (const Exemption& e : kExemptOps) {
    if (e.op.ends_with('*') ? base.starts_with(e.op.substr(0, e.op.size() - 1)) : base == e.op) {
      return &e;
    }
  }
  return nullptr;
}

constexpr bool isNoCheck(std::string_view op) {
  return std::binary_search(std::begin(kNoCheckOps), std::end(kNoCheckOps), op);
}

// `op` is "name.overload" (or "name"), without "aten::", as registrations spell it.
constexpr DeviceRule ruleFor(std::string_view op) {
  if (const Exemption* e = exemptionFor(op)) return e->rule;
  return isNoCheck(op) ? DeviceRule::kTensorIterator : DeviceRule::kSameDevice;
}

// Raises PyTorch's message for the rule: CUDA's wrapper's (it names the argument, looked up in
// the op's schema) or TensorIterator's. `argument` indexes the schema's arguments.
[[noreturn]] void reportMismatch(std::string_view op, DeviceRule rule, size_t argument,
                                 c10::Device common, const at::Tensor& tensor);

// `written`: the op writes t (out=, in-place self); a CPU tensor is never a scalar there.
// `index`: t is an element of an index list (Tensor?[]), which CUDA reads from either device.
// Only the indices: values and masks on the CPU are refused as CUDA refuses them (a CPU values
// tensor of index_put_ was once accepted because the whole op was exempt).
template <DeviceRule kRule>
C10_ALWAYS_INLINE bool agrees(std::optional<c10::Device>& common, const at::Tensor& t,
                              bool written, bool index = false) {
  if (!t.defined()) return true;
  constexpr bool kIndices = kRule == DeviceRule::kCpuIndices || kRule == DeviceRule::kIndicesToSelf;
  if constexpr (kRule == DeviceRule::kTensorIterator || kIndices) {
    if (!written && t.is_cpu() && t.dim() == 0) return true;
  }
  if constexpr (kIndices) {
    if (!written && index && t.is_cpu()) return true;
  }
  if constexpr (kRule == DeviceRule::kIndicesToSelf) {  // self comes first: it set `common`
    if (index && common.has_value() && common->is_cpu()) return true;
  }
  if (!common.has_value()) {
    common = t.device();
    return true;
  }
  return *common == t.device();
}

// One walk over an op's arguments; throws at the first tensor on another device. A kernel
// takes the tensors it writes as `at::Tensor&`, the others as `const at::Tensor&`.
template <DeviceRule kRule>
struct Walk {
  std::string_view op;
  std::optional<c10::Device> common;

  void visit(size_t i, const at::Tensor& t, bool written = false, bool index = false) {
    if (C10_UNLIKELY(!agrees<kRule>(common, t, written, index))) {
      reportMismatch(op, kRule, i, *common, t);
    }
  }
  void visit(size_t i, at::Tensor& t) { visit(i, std::as_const(t), true); }
  void visit(size_t i, const std::optional<at::Tensor>& t) {
    if (t.has_value()) visit(i, *t);
  }
  void visit(size_t i, const at::ITensorListRef& list) {
    for (const at::Tensor& t : list) visit(i, t);
  }
  void visit(size_t i, at::TensorList list) {
    for (const at::Tensor& t : list) visit(i, t);
  }
  void visit(size_t i, const c10::List<std::optional<at::Tensor>>& list) {  // indices
    for (const std::optional<at::Tensor> t : list) {
      if (t.has_value()) visit(i, *t, false, true);
    }
  }
  template <class T>
  void visit(size_t, const T&) {}  // not a tensor
};

// The handle of a registration's op ("mm.out": aten::mm.out; npu ops by their own namespace),
// looked up once per op name (the slow path of the card check only).
const c10::OperatorHandle& operatorHandle(std::string_view registered);

// A string literal as a template argument: the op's name travels in the wrapper's type.
template <size_t N>
struct OpName {
  char chars[N];
  constexpr OpName(const char (&s)[N]) { std::copy_n(s, N, chars); }  // NOLINT: implicit
  constexpr std::string_view view() const { return {chars, N - 1}; }
};

template <OpName kName, class Kernel>
struct Checked;

template <OpName kName, class Ret, class... Args, Ret (*kKernel)(Args...)>
struct Checked<kName, c10::CompileTimeFunctionPointer<Ret(Args...), kKernel>> {
  static constexpr DeviceRule kRule = ruleFor(kName.view());

  template <size_t... I, class... A>
  C10_ALWAYS_INLINE static void check(std::index_sequence<I...>, A&... args) {
    Walk<kRule> walk{kName.view(), std::nullopt};
    (walk.visit(I, args), ...);
  }

  // The card check's binding for this registration (CardCheck.h): null unless the card treats
  // some dtype of this op differently from a native kernel.
  static inline card_check::Site site{kName.view()};

  static Ret call(Args... args) {
    if constexpr (kRule != DeviceRule::kNone) check(std::index_sequence_for<Args...>{}, args...);
    if (const card_check::OpRule* rule = site.rule(); C10_UNLIKELY(rule != nullptr)) {
      if (card_check::judge(*rule, card_check::firstDtype(args...), kName.view()) ==
          card_check::Route::kCpuFallback) {
        if constexpr (card_check::kCanFallBack<Ret, Args...>) {
          return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
              c10::BoxedKernel::makeFromFunction<&runByCpuFallback>(),
              operatorHandle(kName.view()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
              std::forward<Args>(args)...);
        } else {
          card_check::cannotFallBack(*rule, kName.view());
        }
      }
    }
    return (*kKernel)(std::forward<Args>(args)...);
  }

  using Pointer = c10::CompileTimeFunctionPointer<Ret(Args...), &call>;
};

}  // namespace device_check

// The boxed form for the host-kernel path and the CPU fallback: the rule of op's own name.
void checkDevices(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin);

}  // namespace torch_npu

// Registers `fn` for aten::<name> on the npu device behind its device check (see above).
#define NPU_IMPL(m, name, fn)                                                         \
  (m).impl(name, ::torch_npu::device_check::Checked<name, decltype(TORCH_FN(fn))>::Pointer())
