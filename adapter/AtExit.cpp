// Interpreter exit.
//
// Why the autograd threads need a barrier: PyTorch runs the backward of npu tensors on one
// worker thread per device (pt_autograd_<D>). That thread drops tensors that Python created (the
// activations a node saved); with torch's PyObject preservation, dropping such a reference can
// decrement the Python object, which takes the GIL. A thread that asks for the GIL after Python
// began finalizing is ended with pthread_exit, whose unwinding through the noexcept decref aborts
// the process ("terminate called without an active exception", after the program had printed
// everything). So before finalization we make each used device's autograd thread run one more
// backward of our own, built from tensors Python never saw: the thread takes it from its queue
// only once the iteration it was in has ended, and ours holds no Python object, so when the
// barrier returns the thread has nothing left that could take the GIL. The same holds for the
// watchdog of an hccl process group the program never destroyed (it drops the tensors of the
// collectives it retires): it is stopped first.
#include "AtExit.h"

#include <execinfo.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "NPUFunctions.h"
#include "distributed/ProcessGroupHCCL.h"
#include "npu/caching_allocator.h"
#include "npu/runtime.h"

namespace torch_npu {
namespace {

// A device that never held a tensor ran no autograd node; touching it here would only start its
// stream worker at exit.
bool wasUsed(int device) {
  const npu::alloc::DeviceStats stats = npu::alloc::CachingAllocator::instance().getStats(device);
  return stats.allocation[npu::alloc::kAggregate].allocated > 0 ||
         stats.segment[npu::alloc::kAggregate].current > 0;
}

void autogradBarrier(c10::DeviceIndex device) {
  at::AutoGradMode grad(true);
  const at::Tensor x =
      at::ones({1}, at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, device)))
          .set_requires_grad(true);
  torch::autograd::backward({x.mul(2).sum()});
}

std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void terminateWithDiagnostics() {
  char name[32] = "?";
  pthread_getname_np(pthread_self(), name, sizeof(name));
  dprintf(STDERR_FILENO, "torch_npu: std::terminate on thread '%s' (tid %ld); native backtrace:\n",
          name, static_cast<long>(syscall(SYS_gettid)));
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

}  // namespace

void quiesceAtExit() {
  if (!isInitialized() || isInBadFork()) return;
  stopProcessGroupWatchdogsAtExit();
  const int count = deviceCount();
  for (int d = 0; d < count; ++d) {
    if (!wasUsed(d)) continue;
    try {
      DeviceSwitch on_device(static_cast<c10::DeviceIndex>(d));
      (void)npuDeviceSynchronize();
      (void)npuGetLastError();  // a failed task was the program's to report
      autogradBarrier(static_cast<c10::DeviceIndex>(d));
      (void)npuDeviceSynchronize();
    } catch (const std::exception&) {
      // Same: a device left broken by the program does not stop the others from being drained.
    }
  }
}

void installTerminateDiagnostics() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  g_previous_terminate = std::set_terminate(terminateWithDiagnostics);
}

}  // namespace torch_npu
