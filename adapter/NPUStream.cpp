#include "NPUStream.h"

#include <immintrin.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include "CostModel.h"
#include "NPUException.h"
#include "NPUFunctions.h"

namespace torch_npu {
namespace {

constexpr int kPriorityLevels = 2;  // index 0: normal (priority 0), 1: high (priority -1)

// A stream's runtime handle is created on first use (call_once) and read by every kernel launch
// and allocation after that: the handles are atomics, so the read is one load (std::call_once
// alone cost ~100 instructions a call, several calls per op).
struct DeviceStreams {
  std::once_flag default_once;
  std::atomic<npuStream_t> default_handle{nullptr};
  std::array<std::array<std::once_flag, kStreamsPerPool>, kPriorityLevels> pool_once;
  std::array<std::array<std::atomic<npuStream_t>, kStreamsPerPool>, kPriorityLevels> pool{};
  std::array<std::atomic<uint32_t>, kPriorityLevels> next{};
};

DeviceStreams& streamsOf(c10::DeviceIndex device) {
  static std::array<std::unique_ptr<DeviceStreams>, kMaxDevices> all;
  static std::array<std::atomic<DeviceStreams*>, kMaxDevices> ready{};
  static std::array<std::once_flag, kMaxDevices> once;
  TORCH_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "bug: device index ",
                        static_cast<int>(device), " out of range");
  if (DeviceStreams* streams = ready[device].load(std::memory_order_acquire)) return *streams;
  std::call_once(once[device], [&] {
    all[device] = std::make_unique<DeviceStreams>();
    ready[device].store(all[device].get(), std::memory_order_release);
  });
  return *all[device];
}

// The calling thread's current stream id per device; 0 (the default stream) until set.
thread_local std::array<c10::StreamId, kMaxDevices> t_current_ids{};

int levelOfId(c10::StreamId id) { return static_cast<int>((id - 1) / kStreamsPerPool); }
int slotOfId(c10::StreamId id) { return static_cast<int>((id - 1) % kStreamsPerPool); }
c10::StreamId idOf(int level, int slot) { return 1 + level * kStreamsPerPool + slot; }

// The handle's slot of stream `id` on a device: filled once the stream exists.
std::atomic<npuStream_t>& handleSlot(DeviceStreams& streams, c10::StreamId id) {
  return id == 0 ? streams.default_handle : streams.pool[levelOfId(id)][slotOfId(id)];
}

c10::Stream makeStream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

c10::DeviceIndex resolveDevice(c10::DeviceIndex device) {
  lazyInit();
  return checkedDeviceIndex(device);
}

// The runtime owns the body (npuLaunchTaskWithRelease): it may run it again when the launch
// was captured into a graph, and releases it once no run is left.
void runTask(void* arg) {
  auto* body = static_cast<detail::TaskBody*>(arg);
  // Tasks run ATen CPU kernels on tensors that wrap device memory; autograd is the business of
  // the host thread that launched them.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(
      c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  try {
    body->run();
  } catch (const c10::Error& e) {
    npuTaskFail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    npuTaskFail(e.what());
  }
}

void releaseTask(void* arg) { delete static_cast<detail::TaskBody*>(arg); }

}  // namespace

NPUStream::NPUStream(c10::Stream stream) : stream_(stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "Expected an npu stream, got a stream of device type ", stream.device_type());
  TORCH_CHECK(stream.id() >= 0 && stream.id() <= kPriorityLevels * kStreamsPerPool,
              "Invalid npu stream id ", stream.id());
}

npuStream_t currentStreamHandle(c10::DeviceIndex device) {
  const c10::StreamId id = t_current_ids[device];
  if (npuStream_t h = handleSlot(streamsOf(device), id).load(std::memory_order_acquire)) return h;
  return NPUStream(makeStream(device, id)).handle();  // its first use: creates it
}

npuStream_t NPUStream::handle() const {
  const c10::DeviceIndex device = resolveDevice(device_index());
  DeviceStreams& streams = streamsOf(device);
  const c10::StreamId id = stream_.id();
  std::atomic<npuStream_t>& handle = handleSlot(streams, id);
  if (npuStream_t h = handle.load(std::memory_order_acquire)) return h;
  if (id == 0) {
    std::call_once(streams.default_once, [&] {
      npuStream_t created = nullptr;
      NPU_CHECK(npuGetDefaultStream(device, &created));
      handle.store(created, std::memory_order_release);
    });
    return handle.load(std::memory_order_acquire);
  }
  const int level = levelOfId(id), slot = slotOfId(id);
  std::call_once(streams.pool_once[level][slot], [&] {
    DeviceSwitch on_device(device);
    npuStream_t created = nullptr;
    NPU_CHECK(npuStreamCreateWithPriority(&created, 0, level == 0 ? 0 : -1));
    handle.store(created, std::memory_order_release);
  });
  return handle.load(std::memory_order_acquire);
}

int NPUStream::priority() const {
  if (stream_.id() == 0) return 0;
  return levelOfId(stream_.id()) == 0 ? 0 : -1;
}

bool NPUStream::query() const {
  const npuError_t error = npuStreamQuery(handle());
  if (error == npuErrorNotReady) return false;
  NPU_CHECK(error);
  return true;
}

void NPUStream::synchronize() const {
  if (C10_UNLIKELY(syncDebugMode() != 0)) warnOrErrorOnSync();
  NPU_CHECK(npuStreamSynchronize(handle()));
}

void NPUStream::synchronizeAfterSyncDebugCheck() const {
  NPU_CHECK(npuStreamSynchronize(handle()));
}

NPUStream getCurrentNPUStream(c10::DeviceIndex device) {
  device = resolveDevice(device);
  return NPUStream(makeStream(device, t_current_ids[device]));
}

NPUStream getDefaultNPUStream(c10::DeviceIndex device) {
  device = resolveDevice(device);
  return NPUStream(makeStream(device, 0));
}

NPUStream getStreamFromPool(int priority, c10::DeviceIndex device) {
  device = resolveDevice(device);
  const int level = priority < 0 ? 1 : 0;
  DeviceStreams& streams = streamsOf(device);
  const int slot = static_cast<int>(streams.next[level].fetch_add(1) % kStreamsPerPool);
  return NPUStream(makeStream(device, idOf(level, slot)));
}

NPUStream setCurrentNPUStream(NPUStream stream) {
  const c10::DeviceIndex device = resolveDevice(stream.device_index());
  NPUStream previous(makeStream(device, t_current_ids[device]));
  t_current_ids[device] = stream.id();
  return previous;
}

namespace detail {
namespace {

// The pool of task body blocks: a free list under a spin lock (held for a few instructions; a
// mutex could sleep, which is what we are avoiding). Bodies larger than a block use new.
constexpr std::size_t kBodyBlock = 1024;
constexpr std::size_t kMaxPooledBlocks = 4096;
struct FreeBlock {
  FreeBlock* next;
};
std::atomic_flag g_pool_lock = ATOMIC_FLAG_INIT;
FreeBlock* g_pool = nullptr;
std::size_t g_pooled = 0;

struct PoolLock {
  PoolLock() {
    while (g_pool_lock.test_and_set(std::memory_order_acquire)) {
      _mm_pause();
    }
  }
  ~PoolLock() { g_pool_lock.clear(std::memory_order_release); }
};

}  // namespace

void* TaskBody::operator new(std::size_t size) {
  if (size > kBodyBlock) return ::operator new(size);
  {
    const PoolLock lock;
    if (FreeBlock* block = g_pool) {
      g_pool = block->next;
      --g_pooled;
      return block;
    }
  }
  return ::operator new(kBodyBlock);
}

void TaskBody::operator delete(void* p, std::size_t size) {
  if (size > kBodyBlock) {
    ::operator delete(p);
    return;
  }
  {
    const PoolLock lock;
    if (g_pooled < kMaxPooledBlocks) {
      auto* block = static_cast<FreeBlock*>(p);
      block->next = g_pool;
      g_pool = block;
      ++g_pooled;
      return;
    }
  }
  ::operator delete(p);
}

void launchBody(npuStream_t handle, const char* name, TaskBody* body, bool short_task,
                bool kernel) {
  // A kernel computes on device memory only (shadow execution does not run it, npu/runtime.h);
  // other tasks are host-side work the stream must reach.
  npuError_t error;
  if (kernel) {
    if (C10_UNLIKELY(costModelInstalled())) noteKernelLaunch(handle);  // shadow's 910B clock
    error = npuLaunchKernel(handle, name, &runTask, &releaseTask, body,
                            short_task ? npuKernelShort : 0u);
  } else {
    error = npuLaunchTaskWithRelease(handle, name, &runTask, &releaseTask, body);
  }
  if (error != npuSuccess) {
    // With ASCEND_LAUNCH_BLOCKING=1 the task has already run (and was released) when it is the
    // task that failed; otherwise it was never queued.
    if (error != npuErrorLaunchFailure) delete body;
    NPU_CHECK(error);
  }
}

}  // namespace detail
}  // namespace torch_npu
