#include "CardCheck.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "npu/env.h"

namespace torch_npu::card_check {
namespace {

constexpr const char* kStrictVariable = "NPU_SIM_STRICT";
std::atomic<bool> g_strict{false};

// ---- the table ----------------------------------------------------------------------------

struct Table {
  std::deque<OpRule> rules;  // deque: rules never move (Sites point at them)
  std::unordered_map<std::string, const OpRule*> by_op;
};

std::mutex g_install_mutex;
// Every table ever installed: a Site or a boxed call may still read a replaced one's rule.
std::vector<std::unique_ptr<Table>>& tables() {
  static auto* t = new std::vector<std::unique_ptr<Table>>();  // never destroyed
  return *t;
}
std::atomic<const Table*> g_table{nullptr};

std::mutex g_sites_mutex;
std::vector<Site*>& sites() {
  static auto* s = new std::vector<Site*>();  // never destroyed: Sites live as long as the library
  return *s;
}

// Boxed calls: each operator bound at its first call, and again at its first call after an
// install (its generation is older). Entries are never erased, so a binding handed out stays
// valid while another thread installs.
std::atomic<uint64_t> g_generation{1};
std::shared_mutex g_boxed_mutex;
std::unordered_map<const c10::OperatorName*, BoxedBinding>& boxedBindings() {
  static auto* m = new std::unordered_map<const c10::OperatorName*, BoxedBinding>();
  return *m;
}

CardKind parseKind(const std::string& kind) {
  if (kind == "native") return CardKind::kNative;
  if (kind == "aicpu") return CardKind::kAicpu;
  if (kind == "cpu_fallback") return CardKind::kCpuFallback;
  if (kind == "unsupported") return CardKind::kUnsupported;
  TORCH_CHECK_VALUE(kind == "unknown", "card rules: unknown kind '", kind,
                    "' (expected native, aicpu, cpu_fallback, unsupported or unknown)");
  return CardKind::kUnknown;
}

// The op name a Site or the table uses: "mm" for aten::mm, "mm.out" for aten::mm.out.
std::string opKey(const c10::OperatorName& name) {
  std::string_view full = name.name;
  const size_t colons = full.find("::");
  std::string key(colons == std::string_view::npos ? full : full.substr(colons + 2));
  if (!name.overload_name.empty()) key += "." + name.overload_name;
  return key;
}

// ---- messages -----------------------------------------------------------------------------

void replaceAll(std::string* text, std::string_view from, const std::string& to) {
  for (size_t at = text->find(from); at != std::string::npos;
       at = text->find(from, at + to.size())) {
    text->replace(at, from.size(), to);
  }
}

// torch_npu's timestamps: "2025-03-07-11:22:33" and, in CANN's line, with ".mmm.uuu".
std::pair<std::string, std::string> timestamps() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch())
                      .count() % 1000000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char base[32];
  std::strftime(base, sizeof base, "%Y-%m-%d-%H:%M:%S", &local);
  char fine[48];
  std::snprintf(fine, sizeof fine, "%s.%03d.%03d", base, static_cast<int>(us / 1000),
                static_cast<int>(us % 1000));
  return {base, fine};
}

// The refusal with this run's parts filled in. {file}:{line} name the place in SimNPU that
// raises, as torch_npu's name the op-plugin source line that does.
std::string runMessage(std::string text, int line) {
  const auto [stamp, stamp_ms] = timestamps();
  const c10::DeviceIndex device =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  const char* rank = std::getenv("RANK");
  replaceAll(&text, "{file}", "adapter/ops/CardCheck.cpp");
  replaceAll(&text, "{line}", std::to_string(line));
  replaceAll(&text, "{timestamp_ms}", stamp_ms);
  replaceAll(&text, "{timestamp}", stamp);
  replaceAll(&text, "{pid}", std::to_string(::getpid()));
  replaceAll(&text, "{device}", std::to_string(device));
  replaceAll(&text, "{rank}", rank != nullptr ? rank : "-1");
  return text;
}

size_t slotOf(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Undefined ? kDtypeSlots - 1 : static_cast<size_t>(dtype);
}

}  // namespace

// ---- the check --------------------------------------------------------------------------------

Route judge(const OpRule& rule, c10::ScalarType dtype, std::string_view op) {
  const size_t slot = slotOf(dtype);
  const CardKind kind = rule.kinds[slot];
  if (kind != CardKind::kUnsupported && kind != CardKind::kCpuFallback) return Route::kRun;
  if (g_strict.load(std::memory_order_relaxed)) {
    if (kind == CardKind::kCpuFallback) return Route::kCpuFallback;
    TORCH_CHECK(false, runMessage(rule.refusals[slot], __LINE__));
  }
  if (!rule.warned.exchange(true, std::memory_order_relaxed)) {
    const std::string dtype_text =
        rule.dtype_names[slot].empty() ? "" : " on " + rule.dtype_names[slot];
    TORCH_WARN("aten::", op, dtype_text, ": ", rule.on_card[slot],
               " SimNPU ran it, because strict card mode is off; NPU_SIM_STRICT=1 or "
               "torch_npu.npu.set_strict_mode(True) makes it behave as on the ", rule.target,
               ". (Warned once per op; torch_npu/data/card_", rule.target, ".toml, row '",
               rule.row, "'.)");
  }
  return Route::kRun;
}

void cannotFallBack(const OpRule& rule, std::string_view op) {
  if (!rule.warned.exchange(true, std::memory_order_relaxed)) {
    TORCH_WARN("aten::", op, ": strict card mode would run this op by the CPU fallback, as the ",
               rule.target, " does, but its kernel's signature cannot be boxed for it; SimNPU's "
               "kernel runs instead. (A SimNPU limitation; warned once per op.)");
  }
}

Site::Site(std::string_view op) : op_(op) {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  sites().push_back(this);
}

const BoxedBinding& bindingFor(const c10::OperatorHandle& op) {
  const c10::OperatorName* key = &op.operator_name();
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  {
    std::shared_lock<std::shared_mutex> lock(g_boxed_mutex);
    const auto& bound = boxedBindings();
    if (auto it = bound.find(key);
        it != bound.end() && it->second.generation.load(std::memory_order_acquire) == generation) {
      return it->second;
    }
  }
  std::unique_lock<std::shared_mutex> lock(g_boxed_mutex);
  BoxedBinding& binding = boxedBindings()[key];
  if (binding.op.empty()) binding.op = opKey(*key);
  const Table* table = g_table.load(std::memory_order_acquire);
  const OpRule* rule = nullptr;
  if (table != nullptr) {
    if (auto it = table->by_op.find(binding.op); it != table->by_op.end()) rule = it->second;
  }
  binding.rule.store(rule, std::memory_order_release);
  binding.generation.store(generation, std::memory_order_release);
  return binding;
}

c10::ScalarType firstDtype(const torch::jit::Stack& stack, size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) return dtypeOfArgument(v.toTensor());
    if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      if (!list.empty()) return dtypeOfArgument(list.get(0));
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) return dtypeOfArgument(e.toTensor());
      }
    }
  }
  return c10::ScalarType::Undefined;
}

// ---- the mode and the table -------------------------------------------------------------------

bool initStrictModeFromEnvironment() {
  // Read once: the answer (or the error) of the first call stands for the process.
  static const std::optional<bool> from_env = []() -> std::optional<bool> {
    const char* value = std::getenv(kStrictVariable);
    bool strict = false;
    if (value == nullptr) return false;
    if (!npu::env::parseFlag(value, &strict)) return std::nullopt;
    return strict;
  }();
  TORCH_CHECK_VALUE(from_env.has_value(),
                    npu::env::invalid(kStrictVariable, std::getenv(kStrictVariable),
                                      "0 or 1 (1: strict card mode: an op or dtype the 910B does "
                                      "not support fails or falls back to the CPU as on the "
                                      "card; see docs/strict_mode.md)"));
  // The start value: applied once, so set_strict_mode's choice stands after it.
  static std::once_flag applied;
  std::call_once(applied, [] { g_strict.store(*from_env, std::memory_order_relaxed); });
  return *from_env;
}

void setStrictMode(bool strict) { g_strict.store(strict, std::memory_order_relaxed); }

bool strictMode() { return g_strict.load(std::memory_order_relaxed); }

void installCardRules(const std::string& target,
                      const std::map<c10::ScalarType, std::string>& dtype_names,
                      const std::vector<RuleSpec>& specs) {
  auto table = std::make_unique<Table>();
  for (const RuleSpec& spec : specs) {
    OpRule& rule = table->rules.emplace_back();
    rule.row = spec.row;
    rule.target = target;
    rule.kinds.fill(parseKind(spec.other));
    for (const auto& [dtype, name] : dtype_names) rule.dtype_names[slotOf(dtype)] = name;
    for (const auto& [dtype, kind] : spec.kinds) rule.kinds[slotOf(dtype)] = parseKind(kind);
    for (const auto& [dtype, text] : spec.refusals) rule.refusals[slotOf(dtype)] = text;
    for (const auto& [dtype, text] : spec.on_card) rule.on_card[slotOf(dtype)] = text;
    rule.on_card[kDtypeSlots - 1] = spec.on_card_without_tensor;
    for (size_t slot = 0; slot < kDtypeSlots; ++slot) {
      TORCH_CHECK_VALUE(rule.kinds[slot] != CardKind::kUnsupported || !rule.refusals[slot].empty(),
                        "card rules: row '", spec.row, "' refuses ",
                        slot + 1 == kDtypeSlots ? "calls without a tensor" : rule.dtype_names[slot],
                        " but gives no message for it");
    }
  for (const std::string& op : spec.ops) table->by_op[op] = &rule;
  }
  std::lock_guard<std::mutex> install(g_install_mutex);
  const Table* published = table.get();
  tables().push_back(std::move(table));
  g_table.store(published, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(g_sites_mutex);
    for (Site* site : sites()) {
      const auto it = published->by_op.find(std::string(site->op()));
      site->bind(it == published->by_op.end() ? nullptr : it->second);
    }
  }
  g_generation.fetch_add(1, std::memory_order_acq_rel);  // boxed bindings rebind at next use
}

std::vector<std::string> siteOps() {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  std::vector<std::string> ops;
  ops.reserve(sites().size());
  for (const Site* site : sites()) ops.emplace_back(site->op());
  return ops;
}

}  // namespace torch_npu::card_check
