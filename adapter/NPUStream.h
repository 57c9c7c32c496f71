// Streams of the npu device as PyTorch sees them (c10::Stream) and as the runtime runs them
// (npuStream_t).
//
// How it works:
//  - Each device has its default stream (c10::StreamId 0) and, as CUDA does, a pool of
//    kStreamsPerPool streams per priority level, created on first use and handed out round
//    robin. torch.Stream / torch.npu.Stream draw from the pool, so a program that makes a
//    stream per iteration does not start a worker thread per iteration.
//  - StreamId layout: 0 = default, 1..kStreamsPerPool = normal priority pool,
//    kStreamsPerPool+1..2*kStreamsPerPool = high priority pool. Ids are stable for the process.
//  - The current stream is per host thread and per device, like CUDA's.
#pragma once

#include <c10/core/Stream.h>

#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

#include "npu/runtime.h"

namespace torch_npu {

constexpr int kStreamsPerPool = 8;
constexpr int kMaxDevices = NPU_MAX_DEVICES;

class NPUStream {
 public:
  // Wraps a c10::Stream of the npu device; checks its type and id.
  explicit NPUStream(c10::Stream stream);

  c10::Stream unwrap() const { return stream_; }
  operator c10::Stream() const { return stream_; }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::StreamId id() const { return stream_.id(); }
  // The runtime handle, never NULL (the default stream is resolved to its concrete handle).
  npuStream_t handle() const;
  int priority() const;     // 0 normal, -1 high
  bool query() const;       // true when all queued work has finished
  void synchronize() const; // blocks the calling thread until queued work has finished
  // synchronize() without torch.npu.set_sync_debug_mode's check, for a caller that made the
  // check before queueing a copy into or out of a host buffer: raising after the copy is queued
  // would free the buffer (the caller's tensors unwind) while the copy still uses it.
  void synchronizeAfterSyncDebugCheck() const;

  bool operator==(const NPUStream& other) const { return stream_ == other.stream_; }
  bool operator!=(const NPUStream& other) const { return !(*this == other); }

 private:
  c10::Stream stream_;
};

// device -1 means the current device.
NPUStream getCurrentNPUStream(c10::DeviceIndex device = -1);
NPUStream getDefaultNPUStream(c10::DeviceIndex device = -1);
// priority: 0 normal, negative high (the runtime's range is [-1, 0]).
NPUStream getStreamFromPool(int priority = 0, c10::DeviceIndex device = -1);
// Makes `stream` current on its device for the calling thread; returns the previous one.
NPUStream setCurrentNPUStream(NPUStream stream);

namespace detail {
// The type-erased body of a queued task (one allocation per launch: the callable itself).
struct TaskBody {
  virtual ~TaskBody() = default;
  virtual void run() = 0;
  // Bodies are allocated by the launching thread and freed by the stream's worker; through
  // malloc that is a cross-thread free, which contends on the allocator's arena lock at every
  // launch. A small recycled pool of fixed-size blocks avoids it (NPUStream.cpp).
  static void* operator new(std::size_t size);
  static void operator delete(void* p, std::size_t size);
};
template <class F>
struct TaskBodyOf final : TaskBody {
  F fn;
  explicit TaskBodyOf(F f) : fn(std::move(f)) {}
  void run() override { fn(); }
};
// short_task: npuLaunchShortTaskWithRelease (may run at once on this thread). kernel: false for
// host-side work the stream must reach (npuLaunchTaskWithRelease: it runs in shadow execution too).
void launchBody(npuStream_t stream, const char* name, TaskBody* body, bool short_task = false,
                bool kernel = true);
}  // namespace detail

// The runtime handle of the calling thread's current stream on `device` (a valid index, as the
// allocator and the ops' launch paths hold it): one thread-local read and one atomic load once
// the stream exists, where getCurrentNPUStream(device).handle() checks the device twice and
// makes a c10::Stream on the way. The hot paths (every allocation, every launch of an op) take
// the current stream this way, once.
npuStream_t currentStreamHandle(c10::DeviceIndex device);

// Enqueues fn on `stream`; it runs later on the stream's worker thread (at once and
// synchronously with ASCEND_LAUNCH_BLOCKING=1). fn is a kernel (npuLaunchKernel): it may read
// and write device memory and the state it owns, nothing else, since shadow execution
// (NPU_SIM_SHADOW=1) does not run it. An exception thrown by fn fails the task: the
// error, with `name` (kept by the runtime, truncated to 55 characters), is reported by the next
// synchronize or query of the stream.
template <class F>
void launchTask(npuStream_t stream, const char* name, F&& fn) {
  detail::launchBody(stream, name, new detail::TaskBodyOf<std::decay_t<F>>(std::forward<F>(fn)));
}
template <class F>
void launchTask(const NPUStream& stream, const char* name, F&& fn) {
  launchTask(stream.handle(), name, std::forward<F>(fn));
}

// Enqueues fn as a task that is not a kernel: host-side work that must wait for the stream to
// reach it (releasing a host buffer that a queued copy reads). Shadow execution runs it, where a
// kernel is released at its launch without running.
template <class F>
void launchHostTask(const NPUStream& stream, const char* name, F&& fn) {
  detail::launchBody(stream.handle(), name,
                     new detail::TaskBodyOf<std::decay_t<F>>(std::forward<F>(fn)),
                     /*short_task=*/false, /*kernel=*/false);
}

// A kernel over at most this many elements takes about a microsecond: less than handing it to
// the stream's worker.
constexpr int64_t kShortKernelElements = 4096;

// launchTask for one of the library's kernels over `elements` elements. A short one runs at once
// on this thread when the stream is idle (npuLaunchShortTaskWithRelease: same order, same error
// reporting). Only for bodies that call our kernels directly: a body that dispatches ATen ops
// would see this thread's dispatch state (autocast, modes, profiler) rather than a worker's.
template <class F>
void launchKernelTask(npuStream_t stream, const char* name, int64_t elements, F&& fn) {
  detail::launchBody(stream, name, new detail::TaskBodyOf<std::decay_t<F>>(std::forward<F>(fn)),
                     elements <= kShortKernelElements);
}
template <class F>
void launchKernelTask(const NPUStream& stream, const char* name, int64_t elements, F&& fn) {
  launchKernelTask(stream.handle(), name, elements, std::forward<F>(fn));
}

}  // namespace torch_npu
