#include "DeviceCheck.h"

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace torch_npu {
namespace device_check {

void reportMismatch(std::string_view op, DeviceRule rule, size_t argument, c10::Device common,
                    const at::Tensor& tensor) {
  if (rule != DeviceRule::kSameDevice) {
    // TensorIterator's own words (CUDA raises these for elementwise ops and reductions).
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                       "devices, ", common, " and ", tensor.device(), "!");
  }
  // The generated wrappers' check in the words torch_npu prints (those of the PyTorch releases
  // it builds against), with the argument's name from the schema; PyTorch's own wrappers now
  // say "but got <argument> is on <device>, different from other tensors on <device>".
  const std::string base(baseName(op));
  const std::string overload(op.size() > base.size() ? op.substr(base.size() + 1) : "");
  std::string argument_name = "#" + std::to_string(argument);
  if (const auto handle = c10::Dispatcher::singleton().findSchema({"aten::" + base, overload})) {
    const auto& arguments = handle->schema().arguments();
    if (argument < arguments.size()) argument_name = arguments[argument].name();
  }
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                     "devices, ", common, " and ", tensor.device(), "! (when checking argument "
                     "for argument ", argument_name, " in method aten::", op, ")");
}

const c10::OperatorHandle& operatorHandle(std::string_view registered) {
  static std::mutex mutex;
  static auto* handles = new std::unordered_map<std::string, c10::OperatorHandle>();
  const std::string key(registered);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = handles->find(key); it != handles->end()) return it->second;
  const std::string base(baseName(registered));
  const std::string overload(registered.size() > base.size() ? registered.substr(base.size() + 1)
                                                             : "");
  std::optional<c10::OperatorHandle> handle;
  for (const char* ns : {"aten::", "npu::"}) {
    handle = c10::Dispatcher::singleton().findSchema({ns + base, overload});
    if (handle) break;
  }
  TORCH_INTERNAL_ASSERT(handle.has_value(), "no operator registered as '", key,
                        "' (a bug: NPU_IMPL registered it)");
  return handles->emplace(key, *handle).first->second;
}

}  // namespace device_check

void checkDevices(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string_view full = name.name;
  const bool aten = full.starts_with("aten::");
  std::string op_name(aten ? full.substr(6) : full);
  if (!name.overload_name.empty()) op_name += "." + name.overload_name;
  // Ops of other libraries have no yaml entry: TensorIterator's rule, the looser of the two.
  const DeviceRule rule = aten ? device_check::ruleFor(op_name) : DeviceRule::kTensorIterator;
  if (rule == DeviceRule::kNone) return;

  const auto& arguments = op.schema().arguments();
  std::optional<c10::Device> common;
  auto visit = [&](size_t i, const at::Tensor& t, bool index) {
    const c10::AliasInfo* alias = i < arguments.size() ? arguments[i].alias_info() : nullptr;
    const bool written = alias != nullptr && alias->isWrite();
    bool ok = true;
    switch (rule) {
      case DeviceRule::kSameDevice:
        ok = device_check::agrees<DeviceRule::kSameDevice>(common, t, written);
        break;
      case DeviceRule::kTensorIterator:
        ok = device_check::agrees<DeviceRule::kTensorIterator>(common, t, written);
        break;
      case DeviceRule::kCpuIndices:
        ok = device_check::agrees<DeviceRule::kCpuIndices>(common, t, written, index);
        break;
      case DeviceRule::kIndicesToSelf:
        ok = device_check::agrees<DeviceRule::kIndicesToSelf>(common, t, written, index);
        break;
      case DeviceRule::kNone:
        break;
    }
    if (!ok) device_check::reportMismatch(op_name, rule, i, *common, t);
  };
  for (size_t i = begin; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      visit(i - begin, v.toTensor(), false);
    } else if (v.isList()) {  // Tensor[], Tensor?[] (the indices of the kCpuIndices ops)
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) visit(i - begin, e.toTensor(), true);
      }
    }
  }
}

}  // namespace torch_npu
