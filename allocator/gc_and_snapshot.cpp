// Returning cached memory to the runtime (emptyCache, garbage collection, the out-of-memory
// retries) and reading the allocator's state (snapshot, pointer lookup).
#include "allocator/device_state.h"
#include "npu/log.h"

namespace npu::alloc::detail {

// `b` is a free block that is a whole fixed segment.
void DeviceState::releaseSegment(Block* b) {
  Segment* seg = b->segment;
  const StatType type = b->pool->statType();
  eraseFree(b);
  npuError_t err;
  {
    DeviceGuard guard(device);
    err = npuFree(seg->base);
  }
  reserved -= seg->size;
  trace("segment_free", seg->base, seg->size, seg->stream, seg->pool);
  NPU_LOG(NPU_LOG_INFO, "ALLOCATOR", "device %d: segment of %zu bytes at %p returned (reserved %zu)",
          static_cast<int>(device), seg->size, static_cast<void*>(seg->base),
          static_cast<size_t>(reserved));
  ++stats.num_device_free;
  decrease(stats.segment, type, 1);
  decrease(stats.reserved_bytes, type, static_cast<int64_t>(seg->size));
  if (seg->size >= maxSplit()) decrease(stats.oversize_segments, 1);
  segments.erase(reinterpret_cast<uintptr_t>(seg->base));
  delete seg;
  recycleBlock(b);
  if (err != npuSuccess) runtimeFailure("npuFree", err);
}

void DeviceState::releaseCachedBlocks(const PrivatePool* only) {
  std::vector<BlockPool*> pools;
  if (only == nullptr) pools = {&large, &small};
  for (auto& [id, priv] : private_pools) {
    if (priv->use_count == 0 && (only == nullptr || priv.get() == only)) {
      pools.insert(pools.end(), {&priv->large, &priv->small});
    }
  }
  std::vector<Block*> victims;
  for (BlockPool* pool : pools) {
    for (Block* b : pool->blocks) {
      if (!b->isSplit() && !b->segment->expandable) victims.push_back(b);
    }
  }
  for (Block* b : victims) releaseSegment(b);
  std::vector<Segment*> growable;
  for (const auto& [key, seg] : expandable) {
    const bool chosen = only == nullptr || seg->pool->private_pool == only;
    if (chosen && !heldByGraph(*seg->pool)) growable.push_back(seg);
  }
  for (Segment* seg : growable) unmapFreePages(seg);
  forgetEmptyPools();
}

// With max_split_size set, cached oversize blocks are what usually stands in the way: free one
// big enough for the request, else the largest ones of this stream until enough is released.
bool DeviceState::releaseOversizeBlocks(BlockPool& pool, npuStream_t stream, size_t size) {
  if (maxSplit() == std::numeric_limits<size_t>::max() || pool.blocks.empty()) return false;
  if (heldByGraph(pool)) return false;
  const auto releasable = [](const Block* b) { return !b->isSplit() && !b->segment->expandable; };
  search_key.stream = stream;
  search_key.size = std::max(size, maxSplit());
  search_key.ptr = nullptr;
  auto it = pool.blocks.lower_bound(&search_key);
  if (it != pool.blocks.end() && (*it)->stream == stream) {
    if (!releasable(*it)) return false;
    releaseSegment(*it);
    return true;
  }
  if (it == pool.blocks.begin()) return false;
  std::vector<Block*> victims;
  size_t released = 0;
  --it;  // the largest block of this stream, if any
  while (released < search_key.size && (*it)->stream == stream && (*it)->size >= maxSplit()) {
    if (releasable(*it)) {
      victims.push_back(*it);
      released += (*it)->size;
    }
    if (it == pool.blocks.begin()) break;
    --it;
  }
  const size_t wanted = search_key.size;
  for (Block* b : victims) releaseSegment(b);
  return released >= wanted;
}

// garbage_collection_threshold: once reserved memory passes threshold * allowed (allowed is
// fraction * capacity, the whole capacity when no fraction is set), cached unsplit large
// segments are freed, oldest first, before a new segment is requested. Age is the number of
// free-set searches since a block was cached. Every block at least as old as the average goes
// in one round (as PyTorch does), not just enough to reach the target, so that collection does
// not run again on the very next allocation. Simplified from PyTorch: PyTorch only collects when
// a memory fraction has been set.
void DeviceState::collectGarbage() {
  const double allowed = static_cast<double>(std::min(allowedBytes(), total_memory));
  const auto threshold = static_cast<size_t>(config.garbage_collection_threshold * allowed);
  if (reserved <= threshold) return;
  const size_t target = reserved - threshold;
  std::vector<Block*> candidates;
  for (Block* b : large.blocks) {
    if (!b->isSplit() && !b->segment->expandable) candidates.push_back(b);
  }
  size_t reclaimed = 0;
  while (reclaimed < target && !candidates.empty()) {
    double total_age = 0;
    for (const Block* b : candidates) {
      total_age += static_cast<double>(large.searches - b->free_since);
    }
    const double average = total_age / static_cast<double>(candidates.size());
    std::vector<Block*> younger;
    for (Block* b : candidates) {
      if (static_cast<double>(large.searches - b->free_since) >= average) {
        reclaimed += b->size;
        releaseSegment(b);
      } else {
        younger.push_back(b);
      }
    }
    candidates.swap(younger);
  }
}

void DeviceState::emptyCache() {
  std::unique_lock<DeviceLock> lock(mutex);
  waitForPendingUses(lock);
  releaseCachedBlocks();
}

void DeviceState::snapshot(std::vector<SegmentInfo>& out) const {
  std::lock_guard<DeviceLock> lock(mutex);
  for (const auto& [address, seg] : segments) {
    if (seg->size == 0) continue;
    SegmentInfo info;
    info.device = device;
    info.pool_id = seg->pool->private_pool != nullptr ? seg->pool->private_pool->id : 0;
    info.address = address;
    info.total_size = seg->size;
    info.stream = seg->stream;
    info.is_large = !seg->pool->is_small;
    info.is_expandable = seg->expandable;
    for (const Block* b = seg->head; b != nullptr; b = b->next) {
      BlockInfo block;
      block.size = b->size;
      block.allocated = b->allocated;
      block.active = !b->isFree();
      block.requested_size = block.active ? b->requested_size : 0;
      if (block.allocated) info.allocated_size += b->size;
      if (block.active) {
        info.active_size += b->size;
        info.requested_size += b->requested_size;
      }
      info.blocks.push_back(block);
    }
    out.push_back(std::move(info));
  }
}

bool DeviceState::find(const void* ptr, void** base, size_t* size) const {
  std::lock_guard<DeviceLock> lock(mutex);
  // Most lookups are of pointers handed out, which the pointer map knows.
  if (const Block* b = allocated.find(ptr)) {
    *base = b->ptr;
    *size = b->requested_size;
    return true;
  }
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = segments.upper_bound(addr);
  if (it == segments.begin()) return false;
  const Segment* seg = std::prev(it)->second;
  if (addr >= reinterpret_cast<uintptr_t>(seg->base) + seg->size) return false;
  for (const Block* b = seg->head; b != nullptr; b = b->next) {
    const auto start = reinterpret_cast<uintptr_t>(b->ptr);
    if (addr >= start && addr < start + b->size) {
      if (!b->allocated) return false;
      *base = b->ptr;
      *size = b->requested_size;
      return true;
    }
  }
  return false;
}

}  // namespace npu::alloc::detail
