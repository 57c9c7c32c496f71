// The card check: what a real card (the 910B) does with each npu op call, and strict card mode,
// which makes SimNPU do the same (docs/strict_mode.md).
//
// How it works:
//  - The facts live in torch_npu/data/card_910B.toml. At import, torch_npu/npu/strict.py reads
//    them and installs (installCardRules) a rule for each of the few rows that are not native on
//    every dtype: the card's kind per dtype (native, aicpu, cpu_fallback, unsupported, unknown)
//    and torch_npu's refusal text per unsupported dtype, with the names of the aten ops that
//    reach the row in SimNPU (mm, mm.out, convolution_overrideable, ...).
//  - Two places start an npu op, and only they consult the rules: the registration wrapper of
//    every kernel of ours (NPU_IMPL, DeviceCheck.h) and the boxed global fallback for ops without
//    one (Dispatch.cpp). Each NPU_IMPL registration owns a Site whose rule is bound when rules are
//    installed, and stays null for the ops the card runs natively on every dtype (nearly all):
//    a call then costs one acquire load and a branch. The boxed path binds an operator once, by
//    the address of its OperatorName (and again after an install).
//  - A call with a rule is judged by the dtype of its first tensor argument (the first element
//    of a tensor list), as the readiness report files it (torch_npu/utils/op_report.py):
//      strict:     unsupported  -> RuntimeError with torch_npu's text (aclnn's dtype error);
//                  cpu_fallback -> the op runs by the CPU fallback, with torch_npu's warning once
//                                  per op (and TORCH_NPU_FALLBACK_CPU_DISABLE=1 refuses it);
//                  anything else runs as usual.
//      permissive: every call runs as usual; the first unsupported or cpu_fallback call of an op
//                  warns once (a Python UserWarning) what the card would do.
//  - The mode: NPU_SIM_STRICT=0|1, read once (initStrictModeFromEnvironment), then
//    torch_npu.npu.set_strict_mode(bool) at any time. HF32 is not a mode: KernelBridge.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Macros.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace torch_npu::card_check {

// What the card does with an (op, dtype), as the data file's kinds (card_support.KINDS).
enum class CardKind : uint8_t { kNative, kAicpu, kCpuFallback, kUnsupported, kUnknown };

constexpr size_t kDtypeSlots = static_cast<size_t>(c10::ScalarType::NumOptions) + 1;

// One row of the data file, as the check needs it. Built once; never freed (a Site may hold it
// while a newer table is installed).
struct OpRule {
  std::string row;  // the data row's name ("mm")
  std::string target;  // the card ("910B")
  // Indexed by ScalarType; the last slot is a call with no tensor argument.
  std::array<CardKind, kDtypeSlots> kinds{};
  // torch_npu's error for each unsupported dtype, with its run-specific parts as placeholders
  // ({file}, {line}, {timestamp}, {timestamp_ms}, {pid}, {device}, {rank}).
  std::array<std::string, kDtypeSlots> refusals;
  // What the card does, in a sentence, for each dtype that is not native (permissive warning).
  std::array<std::string, kDtypeSlots> on_card;
  std::array<std::string, kDtypeSlots> dtype_names;  // "float64"; empty for the last slot
  mutable std::atomic<bool> warned{false};  // the permissive warning, once per row
};

// What the caller does after the check.
enum class Route { kRun, kCpuFallback };

// The slow half of the check, for calls whose op has a rule: raises (strict, unsupported), warns
// (permissive, once per row), or says how to run. `op` names the call in messages.
Route judge(const OpRule& rule, c10::ScalarType dtype, std::string_view op);

// Whether a kernel of this signature can be handed to the CPU fallback from its unboxed wrapper
// (c10::impl::BoxedKernelWrapper boxes it): not for results that are tuples of references.
template <class Ret, class... Args>
inline constexpr bool kCanFallBack =
    c10::impl::can_box_all<Args...>::value &&
    !c10::impl::is_tuple_of_mutable_tensor_refs<Ret>::value &&
    (std::is_void_v<Ret> || std::is_reference_v<Ret> || c10::impl::can_unbox<Ret>::value);

// Strict mode met a cpu_fallback row on a kernel that cannot be boxed (kCanFallBack): it runs
// SimNPU's kernel, and says so once per row.
void cannotFallBack(const OpRule& rule, std::string_view op);

// The rule bound to one NPU_IMPL registration (its op name as registered, "mm.out").
// Constructed during static initialisation of the library; registers itself.
class Site {
 public:
  explicit Site(std::string_view op);
  C10_ALWAYS_INLINE const OpRule* rule() const { return rule_.load(std::memory_order_acquire); }
  std::string_view op() const { return op_; }
  void bind(const OpRule* rule) { rule_.store(rule, std::memory_order_release); }

 private:
  std::string_view op_;
  std::atomic<const OpRule*> rule_{nullptr};
};

// A boxed call's operator as the check knows it: its name as the table spells it ("mm.out")
// and its rule (null: none), bound at its first call after an install.
struct BoxedBinding {
  std::string op;
  std::atomic<const OpRule*> rule{nullptr};
  std::atomic<uint64_t> generation{0};
  const OpRule* get() const { return rule.load(std::memory_order_acquire); }
};
const BoxedBinding& bindingFor(const c10::OperatorHandle& op);

// ---- the dtype a call is judged by --------------------------------------------------------

inline c10::ScalarType dtypeOfArgument(const at::Tensor& t) {
  return t.defined() ? t.scalar_type() : c10::ScalarType::Undefined;
}
inline c10::ScalarType dtypeOfArgument(const std::optional<at::Tensor>& t) {
  return t.has_value() ? dtypeOfArgument(*t) : c10::ScalarType::Undefined;
}
inline c10::ScalarType dtypeOfArgument(at::TensorList list) {
  return list.empty() ? c10::ScalarType::Undefined : dtypeOfArgument(list.front());
}
inline c10::ScalarType dtypeOfArgument(const at::ITensorListRef& list) {
  for (const at::Tensor& t : list) return dtypeOfArgument(t);
  return c10::ScalarType::Undefined;
}
template <class T>
c10::ScalarType dtypeOfArgument(const T&) {  // not a tensor
  return c10::ScalarType::Undefined;
}

// The dtype of the first tensor argument (Undefined when there is none).
template <class... A>
c10::ScalarType firstDtype(const A&... args) {
  c10::ScalarType found = c10::ScalarType::Undefined;
  ((found = found == c10::ScalarType::Undefined ? dtypeOfArgument(args) : found), ...);
  return found;
}

// The same for a boxed call's arguments, stack[begin:].
c10::ScalarType firstDtype(const torch::jit::Stack& stack, size_t begin);

// ---- the mode and the table (Python: torch_npu/npu/strict.py) ------------------------------

// NPU_SIM_STRICT: "0" or "1"; unset is 0. Raises ValueError naming the variable and the values it
// takes. Reads the environment once and sets the mode from it at the first call; later calls
// return the first answer and leave the mode alone.
bool initStrictModeFromEnvironment();
void setStrictMode(bool strict);
bool strictMode();

// A row as Python hands it over: its name, its kind for each dtype (a missing dtype gets
// `other`), the refusal text for each unsupported dtype, what the card does for each dtype that
// is not native (`on_card_without_tensor` for a call with no tensor argument), and the op names
// (name.overload, or name for the default overload, without the namespace) that reach it.
struct RuleSpec {
  std::string row;
  std::string other;  // kind of any dtype not in `kinds`, and of a call with no tensor
  std::map<c10::ScalarType, std::string> kinds;
  std::map<c10::ScalarType, std::string> refusals;
  std::map<c10::ScalarType, std::string> on_card;
  std::string on_card_without_tensor;
  std::vector<std::string> ops;
};
// Replaces the table: binds every Site and forgets the boxed bindings. `dtype_names`: torch's
// name of each dtype ("float64"), for messages.
void installCardRules(const std::string& target,
                      const std::map<c10::ScalarType, std::string>& dtype_names,
                      const std::vector<RuleSpec>& rules);

// The NPU_IMPL registrations' op names (for Python, which maps them to rows).
std::vector<std::string> siteOps();

}  // namespace torch_npu::card_check
