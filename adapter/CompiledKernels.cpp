#include "CompiledKernels.h"

#include <c10/util/Exception.h>

#include <array>
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

void launchCompiledKernel(uintptr_t fn, const std::string& name, std::vector<uint64_t> args,
                          c10::DeviceIndex device) {
  TORCH_CHECK(fn != 0, "launch of compiled kernel '", name, "': the kernel address is null");
  TORCH_CHECK(args.size() <= kMaxCompiledKernelArgs, "compiled kernel '", name, "' takes ",
              args.size(), " arguments; at most ", kMaxCompiledKernelArgs, " are supported");
  const Invoker invoker = kInvokers[args.size()];
  launchTask(getCurrentNPUStream(device), name.c_str(),
             [fn, invoker, args = std::move(args)] { invoker(fn, args.data()); });
}

}  // namespace torch_npu
