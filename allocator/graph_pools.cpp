// Graph pools and user pools: where a capture's allocations, or those of a thread inside
// use_mem_pool, go (see PrivatePool in device_state.h).
#include <algorithm>
#include <string>

#include "allocator/device_state.h"

namespace npu::alloc::detail {

// The default pools, or the pool of the capture that `stream` records into.
BlockPool& DeviceState::poolFor(npuStream_t stream, size_t size) {
  const bool is_small = size <= kSmallSize;
  if (!routes.empty()) {
    for (const auto& [routed, priv] : routes) {
      if (routed == stream) return is_small ? priv->small : priv->large;
    }
    // A stream that joined a capture (it waited for an event recorded in it) allocates for the
    // graph too; with one capture on the device there is only one pool it can mean.
    npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
    if (npuStreamIsCapturing(stream, &status) == npuSuccess &&
        status != npuStreamCaptureStatusNone) {
      PrivatePool* priv = routes.front().second;
      for (const auto& route : routes) {
        if (route.second != priv) {
          throw AllocatorError(
              "allocation on stream " + hexPointer(stream) + " of NPU " +
              std::to_string(device) + ", which joined a graph capture, while several captures "
              "allocate into different pools; allocate on the capturing stream itself");
        }
      }
      return is_small ? priv->small : priv->large;
    }
  }
  if (!thread_routes.empty()) {
    const std::thread::id self = std::this_thread::get_id();
    // The innermost use_mem_pool of this thread (the last one begun) wins, as in PyTorch.
    for (auto it = thread_routes.rbegin(); it != thread_routes.rend(); ++it) {
      if (it->first == self) return is_small ? it->second->small : it->second->large;
    }
  }
  return is_small ? small : large;
}

PrivatePool& DeviceState::poolWithId(uint64_t id) {
  std::unique_ptr<PrivatePool>& priv = private_pools[id];
  if (!priv) priv = std::make_unique<PrivatePool>(this, id);
  return *priv;
}

void DeviceState::beginAllocateToPool(uint64_t id, npuStream_t stream) {
  std::lock_guard<DeviceLock> lock(mutex);
  for (const auto& route : routes) {
    if (route.first == stream) {
      throw AllocatorError("stream " + hexPointer(stream) + " of NPU " + std::to_string(device) +
                           " already allocates into a graph pool (one capture per stream)");
    }
  }
  PrivatePool& priv = poolWithId(id);
  ++priv.use_count;
  routes.emplace_back(stream, &priv);
}

void DeviceState::endAllocateToPool(uint64_t id) {
  std::lock_guard<DeviceLock> lock(mutex);
  auto found = private_pools.find(id);
  if (found == private_pools.end()) return;
  routes.erase(std::remove_if(routes.begin(), routes.end(),
                              [&](const auto& r) { return r.second == found->second.get(); }),
               routes.end());
  if (!routes.empty()) return;
  // No capture left: the stream uses of blocks freed meanwhile can be recorded now.
  std::vector<Block*> blocks;
  blocks.swap(deferred_frees);
  for (Block* b : blocks) insertEvents(b);
}

void DeviceState::releasePool(uint64_t id) {
  std::lock_guard<DeviceLock> lock(mutex);
  auto found = private_pools.find(id);
  if (found == private_pools.end()) {
    throw AllocatorError("release of graph pool " + std::to_string(id) + " on NPU " +
                         std::to_string(device) + ", which does not exist");
  }
  if (found->second->use_count > 0) --found->second->use_count;
}

void DeviceState::createPool(uint64_t id, bool use_on_oom, bool no_split) {
  std::lock_guard<DeviceLock> lock(mutex);
  PrivatePool& priv = poolWithId(id);
  ++priv.use_count;
  priv.use_on_oom = priv.use_on_oom || use_on_oom;
  priv.no_split = priv.no_split || no_split;
}

void DeviceState::beginAllocateThreadToPool(uint64_t id) {
  std::lock_guard<DeviceLock> lock(mutex);
  PrivatePool& priv = poolWithId(id);
  ++priv.use_count;
  thread_routes.emplace_back(std::this_thread::get_id(), &priv);
}

void DeviceState::endAllocateThreadToPool(uint64_t id) {
  std::lock_guard<DeviceLock> lock(mutex);
  const std::thread::id self = std::this_thread::get_id();
  for (auto it = thread_routes.rbegin(); it != thread_routes.rend(); ++it) {
    if (it->first == self && it->second->id == id) {
      thread_routes.erase(std::next(it).base());
      return;
    }
  }
  throw AllocatorError("end of allocation to pool " + std::to_string(id) + " on NPU " +
                       std::to_string(device) + " by a thread that did not begin it");
}

int DeviceState::poolUseCount(uint64_t id) const {
  std::lock_guard<DeviceLock> lock(mutex);
  auto found = private_pools.find(id);
  return found == private_pools.end() ? 0 : found->second->use_count;
}

void DeviceState::releasePoolMemory(uint64_t id) {
  std::unique_lock<DeviceLock> lock(mutex);
  auto found = private_pools.find(id);
  if (found == private_pools.end() || found->second->use_count > 0) return;
  waitForPendingUses(lock);
  found = private_pools.find(id);  // the lock was dropped while waiting
  if (found == private_pools.end() || found->second->use_count > 0) return;
  releaseCachedBlocks(found->second.get());
}

// An allocation about to fail for lack of memory may take a free block of a user pool created
// with use_on_oom (PyTorch's last resort too).
Block* DeviceState::takeFromPoolsUsableOnOom(npuStream_t stream, size_t size) {
  for (auto& [id, priv] : private_pools) {
    if (!priv->use_on_oom) continue;
    BlockPool& pool = size <= kSmallSize ? priv->small : priv->large;
    if (Block* b = takeFreeBlock(pool, stream, size)) {
      if (!b->segment->expandable || mapPages(b->segment, b->ptr, size)) return b;
    }
  }
  return nullptr;
}

// A pool no graph holds and that owns no memory any more is forgotten.
void DeviceState::forgetEmptyPools() {
  for (auto it = private_pools.begin(); it != private_pools.end();) {
    const bool empty = it->second->use_count == 0 &&
                       std::none_of(segments.begin(), segments.end(), [&](const auto& entry) {
                         return entry.second->pool->private_pool == it->second.get();
                       });
    it = empty ? private_pools.erase(it) : std::next(it);
  }
}

}  // namespace npu::alloc::detail
