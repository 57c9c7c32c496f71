// What torch_npu does when the interpreter exits, and what it says if the process dies there.
#pragma once

namespace torch_npu {

// Run by torch_npu's atexit handler, while Python is still whole (before its finalization):
// waits for the queued work of every device that was used, then for each such device's autograd
// worker thread to finish the iteration it is in (see AtExit.cpp for why). Errors are the
// program's to report, not exit's: they are ignored here.
void quiesceAtExit();

// Chains a std::terminate handler that first writes the dying thread's name, id and native
// backtrace to stderr, so that an abort names its thread (threads are named: npu<D>_s<ID> for
// stream workers, npu_kernel<N> for kernel threads, pt_autograd_<D> for PyTorch's).
void installTerminateDiagnostics();

}  // namespace torch_npu
