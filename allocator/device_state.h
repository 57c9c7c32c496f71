// The caching allocator's per-device state (caching_allocator.cpp explains the algorithm): blocks,
// pools, segments and DeviceState, shared by the allocator's translation units. Not installed.
//  - caching_allocator.cpp: allocation and freeing (the free-block sets, the hot path), the
//    public CachingAllocator;
//  - expandable_segments.cpp: growing, mapping and unmapping expandable segments;
//  - stream_uses.cpp: recordStream and the events that keep a freed block out of the free set;
//  - gc_and_snapshot.cpp: returning memory to the runtime (emptyCache, garbage collection,
//    out-of-memory retries) and the snapshot / pointer lookup.
#pragma once

#include "npu/caching_allocator.h"
#include "npu/runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "allocator/allocator_internal.h"
#include "allocator/device_lock.h"
#include "allocator/pointer_map.h"
#include <string>
#include <thread>

namespace npu::alloc {
namespace detail {

constexpr int kMaxDevices = NPU_MAX_DEVICES;
constexpr size_t kMaxRequest = size_t{1} << 60;
// Containers' nodes are recycled (so a cached allocate/free never calls malloc); beyond this
// many spare nodes they are released.
constexpr size_t kMaxSpareNodes = 1024;

[[noreturn]] inline void runtimeFailure(const char* call, npuError_t err) {
  std::string message = std::string(call) + " failed: " + npuGetErrorName(err);
  const char* detail = npuGetLastErrorMessage();
  if (detail != nullptr && *detail != '\0') message += std::string(": ") + detail;
  throw AllocatorError(message);
}

inline std::string hexPointer(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(ptr));
  return buf;
}

inline size_t roundUp(size_t size, size_t multiple) {
  return (size + multiple - 1) / multiple * multiple;
}

// Runs runtime calls on `device`: the current device is per host thread and belongs to our
// caller, so it is put back afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (npuGetDevice(&previous_) != npuSuccess) previous_ = -1;
    if (previous_ != device) {
      npuError_t err = npuSetDevice(device);
      if (err != npuSuccess) runtimeFailure("npuSetDevice", err);
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_ && previous_ >= 0) npuSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// Stats change on every allocate and free: keep them out of function calls.
[[gnu::always_inline]] inline void increase(Stat& s, int64_t n) {
  s.current += n;
  s.allocated += n;
  s.peak = std::max(s.peak, s.current);
}
[[gnu::always_inline]] inline void decrease(Stat& s, int64_t n) {
  s.current -= n;
  s.freed += n;
}
// Every change is counted in the aggregate and in the pool's own entry.
[[gnu::always_inline]] inline void increase(StatArray& a, StatType pool, int64_t n) {
  increase(a[kAggregate], n);
  increase(a[pool], n);
}
[[gnu::always_inline]] inline void decrease(StatArray& a, StatType pool, int64_t n) {
  decrease(a[kAggregate], n);
  decrease(a[pool], n);
}
[[gnu::always_inline]] inline void change(StatArray& a, StatType pool, int64_t delta) {
  if (delta > 0) increase(a, pool, delta);
  if (delta < 0) decrease(a, pool, -delta);
}

inline void forEachStat(DeviceStats& s, void (*fn)(Stat&)) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes}) {
    for (Stat& stat : *a) fn(stat);
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

struct Segment;
struct BlockPool;
struct DeviceState;
struct PrivatePool;

struct Block;

// Free-set order: by stream, then best fit (size), then address.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};
using FreeSet = std::set<Block*, BlockOrder>;

struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested_size = 0;  // what the client asked for (0 while free)
  npuStream_t stream = nullptr;
  BlockPool* pool = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours inside the segment, by address
  Block* next = nullptr;
  bool allocated = false;
  int event_count = 0;     // recorded events still to complete before the block is free
  uint64_t free_since = 0; // the pool's search count when the block was cached (its GC age)
  FreeSet::iterator free_pos;  // its free-set entry, valid while isFree()
  std::vector<npuStream_t> stream_uses;  // streams besides `stream` that used the block

  bool isSplit() const { return prev != nullptr || next != nullptr; }
  // Free and in its pool's free set (no client, no pending stream use).
  bool isFree() const { return !allocated && event_count == 0; }
};

inline bool BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) {
    return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
  }
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

struct BlockPool {
  BlockPool(DeviceState* o, bool small, PrivatePool* priv = nullptr)
      : owner(o), is_small(small), private_pool(priv) {}
  DeviceState* const owner;
  const bool is_small;
  PrivatePool* const private_pool;  // set for a graph's pool (graph_pools.cpp)
  FreeSet blocks;
  uint64_t searches = 0;  // free-set searches: the clock by which cached blocks age for GC
  StatType statType() const { return is_small ? kSmallPool : kLargePool; }
};

struct Segment {
  char* base = nullptr;
  size_t size = 0;          // bytes backed by device memory (the mapped prefix if expandable)
  size_t address_size = 0;  // expandable: the reserved virtual range
  npuStream_t stream = nullptr;
  BlockPool* pool = nullptr;
  Block* head = nullptr;  // the block at `base`: merges keep the lower block, so it stays
  Block* tail = nullptr;
  bool expandable = false;
  // Expandable only: which pages of the range are mapped, and their SIZE in bytes.
  std::vector<bool> page_mapped;
  size_t mapped = 0;
};

// A graph's memory pool (CUDA graphs' mempool): what a capture allocates comes from here, and
// what it frees stays here, because a replay writes those addresses again. While a graph holds
// the pool (use_count > 0) its memory is never reused by other allocations nor returned to the
// runtime; afterwards its free segments go back with the next empty_cache.
//
// A user pool (torch.npu.MemPool) is the same kind of pool, filled by the allocations of a
// thread inside use_mem_pool instead of a capturing stream; its MemPool object holds one use.
struct PrivatePool {
  PrivatePool(DeviceState* owner, uint64_t pool_id)
      : id(pool_id), small(owner, true, this), large(owner, false, this) {}
  const uint64_t id;
  BlockPool small;
  BlockPool large;
  int use_count = 0;  // captures, MemPool objects and use_mem_pool blocks that hold it
  bool use_on_oom = false;  // user pools: other allocations may take its free blocks at OOM
  bool no_split = false;    // user pools: blocks are handed out whole
};

// A pool's free blocks belong to a live graph: they must stay where they are.
inline bool heldByGraph(const BlockPool& pool) {
  return pool.private_pool != nullptr && pool.private_pool->use_count > 0;
}

struct PendingUse {
  npuEvent_t event;
  Block* block;
};

struct DeviceState {
  DeviceState(int dev, const AllocatorConfig& cfg, size_t total, npuStream_t stream,
              size_t page)
      : device(dev), config(cfg), total_memory(total), default_stream(stream),
        page_size(page) {}
  ~DeviceState();

  const int device;
  const AllocatorConfig& config;
  const size_t total_memory;
  const npuStream_t default_stream;
  const size_t page_size;  // mapping granularity for expandable segments

  mutable DeviceLock mutex;
  DeviceStats stats;
  BlockPool small{this, true};
  BlockPool large{this, false};
  size_t reserved = 0;  // SIZE: bytes held from the runtime (mapped pages if expandable)
  double fraction = 1.0;
  bool fraction_set = false;
  std::map<uintptr_t, Segment*> segments;  // by base address
  std::map<std::pair<npuStream_t, const BlockPool*>, Segment*> expandable;  // (stream, pool)
  // Graph pools by id, and the streams whose allocations go to one now (captures in progress).
  std::map<uint64_t, std::unique_ptr<PrivatePool>> private_pools;
  std::vector<std::pair<npuStream_t, PrivatePool*>> routes;
  // Threads whose allocations go to a user pool now (use_mem_pool).
  std::vector<std::pair<std::thread::id, PrivatePool*>> thread_routes;
  std::vector<Block*> deferred_frees;  // freed during a capture with stream uses (see free)
  std::map<npuStream_t, std::deque<PendingUse>> pending;  // per stream, in record order
  size_t pending_count = 0;
  std::vector<npuEvent_t> spare_events;  // reused; destroyed only with the allocator
  std::vector<Block*> spare_blocks;
  std::vector<FreeSet::node_type> spare_nodes;
  Block search_key;
  PointerMap<Block> allocated;  // every pointer handed out and not yet freed

  // Entry points; each takes the lock. The try* ones return false for a pointer that is not
  // one of this device's allocations.
  void* malloc(size_t request, npuStream_t stream);
  bool tryFree(const void* ptr);
  bool tryRecordStream(const void* ptr, npuStream_t stream);
  bool find(const void* ptr, void** base, size_t* size) const;
  void emptyCache();
  void snapshot(std::vector<SegmentInfo>& out) const;
  void beginAllocateToPool(uint64_t id, npuStream_t stream);
  void endAllocateToPool(uint64_t id);
  void releasePool(uint64_t id);
  void createPool(uint64_t id, bool use_on_oom, bool no_split);
  void beginAllocateThreadToPool(uint64_t id);
  void endAllocateThreadToPool(uint64_t id);
  int poolUseCount(uint64_t id) const;
  void releasePoolMemory(uint64_t id);

 private:
  PrivatePool& poolWithId(uint64_t id);
  Block* takeFromPoolsUsableOnOom(npuStream_t stream, size_t size);
  void trace(const char* action, const void* address, size_t size, npuStream_t stream,
             const BlockPool* pool, size_t device_free = 0) const;
  BlockPool& poolFor(npuStream_t stream, size_t size);
  void forgetEmptyPools();
  size_t allowedBytes() const {
    return fraction_set ? static_cast<size_t>(fraction * static_cast<double>(total_memory))
                        : std::numeric_limits<size_t>::max();
  }
  size_t maxSplit() const { return config.max_split_size; }

  Block* newBlock(char* ptr, size_t size, npuStream_t stream, BlockPool* pool, Segment* seg);
  void recycleBlock(Block* b);
  void insertFree(Block* b);
  void eraseFree(Block* b);
  void keyGrew(Block* b);
  void keyShrank(Block* b);
  void registerPointer(Block* b);
  void free(Block* b);

  Block* takeFreeBlock(BlockPool& pool, npuStream_t stream, size_t size);
  Block* newSegmentBlock(BlockPool& pool, npuStream_t stream, size_t size);
  Block* growExpandable(BlockPool& pool, npuStream_t stream, size_t size);
  Block* useBlock(Block* b, size_t size, size_t request);
  bool shouldSplit(const Block* b, size_t size) const;
  void freeBlock(Block* b);
  void insertEvents(Block* b);
  void processEvents();
  void waitForPendingUses(std::unique_lock<DeviceLock>& lock);
  void releaseSegment(Block* b);
  bool mapPages(Segment* seg, const char* ptr, size_t size);
  void unmapPages(Segment* seg, size_t first, size_t end);
  void unmapFreePages(Segment* seg);
  void releaseIfUnmapped(Segment* seg);
  // Returns the unused cached memory of the default pools and of pools without uses, or (with
  // `only`) of that pool alone.
  void releaseCachedBlocks(const PrivatePool* only = nullptr);
  bool releaseOversizeBlocks(BlockPool& pool, npuStream_t stream, size_t size);
  void collectGarbage();
  [[noreturn]] void throwOutOfMemory(std::unique_lock<DeviceLock>& lock, size_t alloc_size);
};

}  // namespace detail
}  // namespace npu::alloc
