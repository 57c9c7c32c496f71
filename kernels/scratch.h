// Per-thread scratch memory for kernel bodies that need a temporary row, tile or packed panel.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernel_assert.h"

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

// A 64-byte aligned buffer, grown on demand and freed with it. Bytes it adds are zero, so that
// lanes a kernel reads but never stores hold zeros or its own stale values, never arbitrary bits
// (denormals there would slow the arithmetic on them).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(p_); }

  // At least n elements of T; the contents are kept unless the buffer grows.
  template <class T>
  T* reserve(size_t n) {
    const size_t need = (n * sizeof(T) + 63) / 64 * 64;
    if (bytes_ < need) {
      std::free(p_);
      p_ = std::aligned_alloc(64, need);
      NPU_KERNEL_ASSERT(p_ != nullptr, "out of host memory for a kernel's scratch buffer");
      std::memset(p_, 0, need);
      bytes_ = need;
    }
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The slots of scratch(): each call site that may be live at once with another on one thread
// has its own.
enum ScratchSlot : int {
  kGemmPackedA = 0,  // gemm.cpp's packing buffers: a row block's A panels (or a few-row A),
  kGemmPackedB = 1,  // a task's block of B panels,
  kGemmPanel = 2,    // one A panel (a private copy, or a batch item's)
  kWinoInput = 3,    // conv.cpp's Winograd: the padded input slice,
  kWinoV = 4,        // the input transform of a block of tiles,
  kWinoM = 5,        // and its products
  kScratchSlots = 6,
};

// A 64-byte aligned per-thread scratch buffer (one per slot and T), grown on demand and kept: a
// kernel reuses it on the next call instead of faulting fresh pages in.
template <class T>
T* scratch(int slot, size_t n) {
  thread_local AlignedBuffer bufs[kScratchSlots];
  return bufs[slot].reserve<T>(n);
}

// scratch() for a buffer that may be large: up to keep_bytes it is the thread's slot, kept
// between calls; above, `call_own` holds it, for the caller's call only (a thread does not keep
// a rare large buffer for its life).
template <class T>
T* scratch_up_to(int slot, size_t n, size_t keep_bytes, AlignedBuffer& call_own) {
  return n * sizeof(T) <= keep_bytes ? scratch<T>(slot, n) : call_own.reserve<T>(n);
}

}  // namespace npu::kernels::detail
