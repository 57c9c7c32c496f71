#include "CompiledKernels.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <utility>

#include "NPUStream.h"

namespace torch_npu {
namespace {

using Invoker = void (*)(uintptr_t fn, const uint64_t* args);

template <size_t... I>
void invoke(uintptr_t fn, const uint64_t* args, std::index_sequence<I...>) {
  using Kernel = void (*)(decltype(static_cast<void>(I), uint64_t{})...);
  reinterpret_cast<Kernel>(fn)(args[I]...);
}

template <size_t N>
void invokeN(uintptr_t fn, const uint64_t* args) {
  invoke(fn, args, std::make_index_sequence<N>{});
}

// invokers[n] calls a kernel of n arguments.
template <size_t... N>
constexpr std::array<Invoker, sizeof...(N)> makeInvokers(std::index_sequence<N...>) {
  return {&invokeN<N>...};
}
constexpr auto kInvokers = makeInvokers(std::make_index_sequence<kMaxCompiledKernelArgs + 1>{});

}  // namespace

KernelArg hostScalarArg(const void* data, size_t element_size) {
  TORCH_CHECK(element_size <= sizeof(uint64_t), "a host scalar of ", element_size,
              " bytes cannot be passed to a compiled npu kernel (at most 8)");
  KernelArg arg;
  std::memcpy(&arg.value, data, element_size);
  arg.host_scalar = true;
  return arg;
}

void launchCompiledKernel(uintptr_t fn, const std::string& name, std::vector<KernelArg> args,
                          c10::DeviceIndex device) {
  TORCH_CHECK(fn != 0, "launch of compiled kernel '", name, "': the kernel address is null");
  TORCH_CHECK(args.size() <= kMaxCompiledKernelArgs, "compiled kernel '", name, "' takes ",
              args.size(), " arguments; at most ", kMaxCompiledKernelArgs, " are supported");
  const Invoker invoker = kInvokers[args.size()];
  launchTask(getCurrentNPUStream(device), name.c_str(), [fn, invoker, args = std::move(args)] {
    // A host scalar's address is taken here, in the task that owns it (a graph replay runs the
    // same task, so the address stays valid for as long as the kernel can be run).
    std::array<uint64_t, kMaxCompiledKernelArgs> values;
    for (size_t i = 0; i < args.size(); ++i) {
      values[i] = args[i].host_scalar ? reinterpret_cast<uintptr_t>(&args[i].value)
                                      : args[i].value;
    }
    invoker(fn, values.data());
  });
}

}  // namespace torch_npu
