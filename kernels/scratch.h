// Per-thread scratch memory for kernel bodies that need a temporary row or tile.
#pragma once

#include <cstddef>
#include <vector>

namespace npu::kernels::detail {

// At least n elements of T for the calling thread, grown on demand and kept across calls, never
// zeroed: the caller writes what it reads. A std::vector per call (or per row) costs an
// allocation, a zeroing pass and a free each time, and above glibc's mmap threshold page faults
// too; in short kernels that was most of the time. Each Tag (a type naming the call site) has
// its own buffer, so two call sites live at once on one thread never share one; a call site
// must not ask again while it still uses the previous pointer (a larger request moves it).
template <class Tag, class T>
T* thread_scratch(size_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace npu::kernels::detail
