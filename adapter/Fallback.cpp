#include "Fallback.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "NPUGenerator.h"
#include "ops/HostKernel.h"
#include "ops/OpStats.h"

namespace torch_npu {
namespace {

constexpr const char* kDisableVariable = "TORCH_NPU_FALLBACK_CPU_DISABLE";

bool fallbackDisabled() {
  const char* value = std::getenv(kDisableVariable);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

}  // namespace

c10::DeviceIndex npuDeviceOf(const torch::jit::Stack& stack, size_t begin) {
  c10::DeviceIndex found = -1;
  auto visit = [&](const at::Tensor& t) {
    if (found < 0 && t.defined() && t.is_privateuseone()) found = t.device().index();
  };
  for (size_t i = begin; i < stack.size() && found < 0; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      visit(v.toTensor());
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) visit(e.toTensor());
      }
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {  // a factory's device=
      found = v.toDevice().has_index()
                  ? v.toDevice().index()
                  : c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
    }
  }
  return found;
}

void replaceNPUGenerators(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const auto& arguments = schema.arguments();
  const size_t begin = stack->size() - arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!isGeneratorType(arguments[i].type())) continue;
    c10::IValue& value = (*stack)[begin + i];
    std::optional<at::Generator> generator;
    c10::DeviceIndex device = npuDeviceOf(*stack, begin);
    if (value.isGenerator()) {
      generator = value.toGenerator();
      if (generator->device().type() != c10::DeviceType::PrivateUse1) continue;
      device = generator->device().index();
    }
    value = c10::IValue(at::detail::createCPUGenerator(nextLaunchSeed(generator, device)));
  }
}

void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!fallbackDisabled(), "The operator [", name,
                              "] is not supported on NPU and ", kDisableVariable,
                              "=1 forbids the CPU fallback; unset it to run the op on the CPU");
  if (OpStats::instance().count(OpPath::kCpuFallback, name) == 1) {
    std::fprintf(stderr,
                 "Warning: CAUTION: The operator '%s' is not currently supported on the NPU "
                 "backend and will fall back to run on the CPU. This may have performance "
                 "implications.\n",
                 name.c_str());
    std::fflush(stderr);
  }
  replaceNPUGenerators(op.schema(), stack);
  // View ops must alias their input, which a copy to the CPU cannot do: the native table lists
  // every view op without a composite kernel, so reaching here with one is an error.
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  // ATen's CPU kernel on the stream where it can, the CPU fallback otherwise (HostKernel.h).
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&runOnHost>());
}

}  // namespace torch_npu
