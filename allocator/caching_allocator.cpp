// SimNPU caching allocator (the role of torch_npu's NPUCachingAllocator).
//
// How it works (the algorithm of PyTorch's CUDACachingAllocator, re-derived):
//  - Memory comes from the runtime in segments: 2 MiB for requests <= 1 MiB (the small pool),
//    20 MiB for requests below 10 MiB, else the request rounded up to 2 MiB (the large pool).
//    Requests are rounded up to 512 bytes, or to roundup_power2_divisions steps.
//  - A segment is a doubly linked list of blocks that tile it. Free blocks sit in their pool's
//    free set ordered by (stream, size, address): an allocation takes the smallest free block of
//    its stream that fits (best fit) and splits off the rest when the rest is worth keeping
//    (>= 512 B in the small pool, > 1 MiB in the large pool).
//  - Freeing merges a block with its free neighbours, so a fully freed segment is one block
//    again. Segments go back to the runtime only on emptyCache, when an allocation would
//    otherwise fail, or by garbage collection.
//  - With max_split_size set, a request of that size or more never splits its block, and a
//    cached block of that size or more only serves such a request, and only if it leaves less
//    than 20 MiB unused: big blocks are not chopped into pieces that nothing can reuse.
//  - A block belongs to the stream it was allocated for: work queued there later is ordered
//    after earlier uses. recordStream adds other streams; freeing such a block records an event
//    on each of them, and the block stays out of the free set until all have completed (polled
//    at the next allocate, waited for by emptyCache and by the out-of-memory path).
//  - When the runtime refuses a new segment: free cached oversize blocks (if max_split_size is
//    set), then wait for pending stream uses, free every unsplit cached segment and retry once;
//    if that fails too, raise OutOfMemoryError.
//  - Expandable segments: instead of many fixed segments, each (stream, pool) owns one reserved
//    virtual range whose blocks tile a prefix (the extent) that grows by pages at its end.
//    Blocks that would have sat in different segments are neighbours and merge, so alternating
//    sizes do not strand memory. Pages are mapped when a block over them is handed out; the
//    whole pages inside free blocks, anywhere in the range, are unmapped by emptyCache and
//    before an allocation gives up (out of memory), so memory cached by one pool or stream can
//    serve another. A range with nothing mapped is given back.
//  - Each device keeps a hash map of the pointers it handed out (pointer -> block). free() is
//    not told the device: it tries the device this thread used last, then the others.
//  - Locks: one lock per device (DeviceLock) guards its blocks, pools, pointer map and stats, so
//    a cached allocate or free takes exactly one lock. No lock is held while waiting for an
//    event, and none across devices.
//  - Hot path: splitting and merging keep the free-set entry of the free block involved (its key
//    changes without changing its place in the order), so a cached allocate + free is one tree
//    search, a few pointer updates and no heap allocation.
#include "npu/caching_allocator.h"
#include "npu/log.h"

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

namespace npu::alloc {
namespace detail {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kMaxRequest = size_t{1} << 60;
// Containers' nodes are recycled (so a cached allocate/free never calls malloc); beyond this
// many spare nodes they are released.
constexpr size_t kMaxSpareNodes = 1024;

[[noreturn]] void runtimeFailure(const char* call, npuError_t err) {
  std::string message = std::string(call) + " failed: " + npuGetErrorName(err);
  const char* detail = npuGetLastErrorMessage();
  if (detail != nullptr && *detail != '\0') message += std::string(": ") + detail;
  throw AllocatorError(message);
}

std::string hexPointer(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(ptr));
  return buf;
}

size_t roundUp(size_t size, size_t multiple) { return (size + multiple - 1) / multiple * multiple; }

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

void forEachStat(DeviceStats& s, void (*fn)(Stat&)) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes}) {
    for (Stat& stat : *a) fn(stat);
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

}  // namespace

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
  PrivatePool* const private_pool;  // set for a graph's pool
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
struct PrivatePool {
  PrivatePool(DeviceState* owner) : small(owner, true, this), large(owner, false, this) {}
  BlockPool small;
  BlockPool large;
  int use_count = 0;  // captures that allocated into it and whose graphs still live
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

 private:
  BlockPool& poolFor(npuStream_t stream, size_t size);
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
  void releaseCachedBlocks();
  bool releaseOversizeBlocks(BlockPool& pool, npuStream_t stream, size_t size);
  void collectGarbage();
  [[noreturn]] void throwOutOfMemory(std::unique_lock<DeviceLock>& lock, size_t alloc_size);
};

// ---- block and node bookkeeping --------------------------------------------------------------

Block* DeviceState::newBlock(char* ptr, size_t size, npuStream_t stream, BlockPool* pool,
                             Segment* seg) {
  Block* b;
  if (spare_blocks.empty()) {
    b = new Block();
  } else {
    b = spare_blocks.back();
    spare_blocks.pop_back();
  }
  b->ptr = ptr;
  b->size = size;
  b->requested_size = 0;
  b->stream = stream;
  b->pool = pool;
  b->segment = seg;
  b->prev = nullptr;
  b->next = nullptr;
  b->allocated = false;
  b->event_count = 0;
  b->free_since = pool->searches;
  return b;
}

void DeviceState::recycleBlock(Block* b) {
  if (spare_blocks.size() >= kMaxSpareNodes) {
    delete b;
    return;
  }
  b->stream_uses.clear();  // keeps its capacity
  spare_blocks.push_back(b);
}

void DeviceState::insertFree(Block* b) {
  if (spare_nodes.empty()) {
    b->free_pos = b->pool->blocks.insert(b).first;
    return;
  }
  FreeSet::node_type node = std::move(spare_nodes.back());
  spare_nodes.pop_back();
  node.value() = b;
  b->free_pos = b->pool->blocks.insert(std::move(node)).position;
}

void DeviceState::eraseFree(Block* b) {
  FreeSet::node_type node = b->pool->blocks.extract(b->free_pos);
  if (spare_nodes.size() < kMaxSpareNodes) spare_nodes.push_back(std::move(node));
}

// Splitting and merging change the key (size, address) of a block that is in the free set.
// Rather than erase and reinsert it (two tree rebalances on every cached allocate and free),
// its entry stays where it is when the new key still sorts between its neighbours, which is
// the common case. A key that grew can only have passed its successor, one that shrank only
// its predecessor.
void DeviceState::keyGrew(Block* b) {
  FreeSet& set = b->pool->blocks;
  auto next = std::next(b->free_pos);
  if (next == set.end() || BlockOrder()(b, *next)) return;
  FreeSet::node_type node = set.extract(b->free_pos);
  b->free_pos = set.insert(std::move(node)).position;
}

void DeviceState::keyShrank(Block* b) {
  FreeSet& set = b->pool->blocks;
  if (b->free_pos == set.begin() || BlockOrder()(*std::prev(b->free_pos), b)) return;
  FreeSet::node_type node = set.extract(b->free_pos);
  b->free_pos = set.insert(std::move(node)).position;
}

// ---- allocation ------------------------------------------------------------------------------

void* DeviceState::malloc(size_t request, npuStream_t stream) {
  std::unique_lock<DeviceLock> lock(mutex);
  // No device has this much; rounding it up would overflow.
  if (request > kMaxRequest) throwOutOfMemory(lock, request);
  if (pending_count != 0) processEvents();
  const size_t size = roundSize(request, config);
  BlockPool& pool = poolFor(stream, size);
  Block* block = config.caching_disabled ? nullptr : takeFreeBlock(pool, stream, size);
  if (block != nullptr && block->segment->expandable &&
      !mapPages(block->segment, block->ptr, size)) {
    block = nullptr;
  }
  if (block == nullptr) {
    if (config.garbage_collection_threshold > 0.0 && !config.caching_disabled) collectGarbage();
    block = newSegmentBlock(pool, stream, size);
    if (block == nullptr && releaseOversizeBlocks(pool, stream, size)) {
      block = newSegmentBlock(pool, stream, size);
    }
    if (block == nullptr) {
      // Flush and retry once. Waiting may also have freed a block that fits but sits in a
      // segment still in use, so the free set is searched again (PyTorch goes straight to the
      // runtime here).
      ++stats.num_alloc_retries;
      waitForPendingUses(lock);
      releaseCachedBlocks();
      if (!config.caching_disabled) block = takeFreeBlock(pool, stream, size);
      if (block != nullptr && block->segment->expandable &&
          !mapPages(block->segment, block->ptr, size)) {
        block = nullptr;
      }
      if (block == nullptr) block = newSegmentBlock(pool, stream, size);
    }
    if (block == nullptr) {
      // Like PyTorch, report what was asked of the runtime: the segment, for fixed segments.
      const bool fixed_segments = !config.caching_disabled && !config.expandable_segments;
      throwOutOfMemory(lock, fixed_segments ? segmentSize(size) : size);
    }
  }
  Block* used = useBlock(block, size, request);
  registerPointer(used);
  return used->ptr;
}

void DeviceState::registerPointer(Block* b) { allocated.insert(b->ptr, b); }

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
  return is_small ? small : large;
}

void DeviceState::beginAllocateToPool(uint64_t id, npuStream_t stream) {
  std::lock_guard<DeviceLock> lock(mutex);
  for (const auto& route : routes) {
    if (route.first == stream) {
      throw AllocatorError("stream " + hexPointer(stream) + " of NPU " + std::to_string(device) +
                           " already allocates into a graph pool (one capture per stream)");
    }
  }
  std::unique_ptr<PrivatePool>& priv = private_pools[id];
  if (!priv) priv = std::make_unique<PrivatePool>(this);
  ++priv->use_count;
  routes.emplace_back(stream, priv.get());
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

Block* DeviceState::takeFreeBlock(BlockPool& pool, npuStream_t stream, size_t size) {
  ++pool.searches;
  search_key.stream = stream;
  search_key.size = size;
  search_key.ptr = nullptr;
  auto it = pool.blocks.lower_bound(&search_key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  const Block* b = *it;
  // An oversize block would be split for a normal request, or mostly wasted on a big one.
  if (size < maxSplit() && b->size >= maxSplit()) return nullptr;
  if (size >= maxSplit() && b->size >= size + kMaxNonSplitRounding) return nullptr;
  return *it;
}

Block* DeviceState::newSegmentBlock(BlockPool& pool, npuStream_t stream, size_t size) {
  if (config.expandable_segments && !config.caching_disabled) {
    return growExpandable(pool, stream, size);
  }
  // Without caching a segment is exactly one block, returned to the runtime when freed.
  const size_t bytes = config.caching_disabled ? size : segmentSize(size);
  if (bytes > allowedBytes() || reserved + bytes > allowedBytes()) return nullptr;
  void* ptr = nullptr;
  npuError_t err;
  {
    DeviceGuard guard(device);
    err = npuMalloc(&ptr, bytes);
  }
  if (err == npuErrorMemoryAllocation) return nullptr;
  if (err != npuSuccess) runtimeFailure("npuMalloc", err);

  auto* seg = new Segment();
  seg->base = static_cast<char*>(ptr);
  seg->size = bytes;
  seg->stream = stream;
  seg->pool = &pool;
  Block* b = newBlock(seg->base, bytes, stream, &pool, seg);
  seg->head = seg->tail = b;
  segments.emplace(reinterpret_cast<uintptr_t>(ptr), seg);
  NPU_LOG(NPU_LOG_INFO, "ALLOCATOR", "device %d: new segment of %zu bytes at %p (reserved %zu)",
          static_cast<int>(device), bytes, ptr, static_cast<size_t>(reserved + bytes));
  insertFree(b);  // useBlock takes blocks from the free set

  reserved += bytes;
  ++stats.num_device_alloc;
  increase(stats.segment, pool.statType(), 1);
  increase(stats.reserved_bytes, pool.statType(), static_cast<int64_t>(bytes));
  if (bytes >= maxSplit()) increase(stats.oversize_segments, 1);
  return b;
}

// Makes the free block at the end of the (stream, pool) expandable segment at least `size`
// bytes, extending the extent by pages, and maps its first `size` bytes; returns it (in the free
// set), or nullptr when memory is short.
Block* DeviceState::growExpandable(BlockPool& pool, npuStream_t stream, size_t size) {
  const auto key = std::make_pair(stream, static_cast<const BlockPool*>(&pool));
  auto found = expandable.find(key);
  Segment* seg = found == expandable.end() ? nullptr : found->second;
  if (seg == nullptr) {
    // Reserving address space costs no capacity, so reserve the whole device: the segment can
    // then grow as far as memory allows without ever moving.
    const size_t address_size = roundUp(total_memory, page_size);
    void* base = nullptr;
    npuError_t err;
    {
      DeviceGuard guard(device);
      err = npuMemAddressReserve(&base, address_size);
    }
    if (err == npuErrorMemoryAllocation) return nullptr;
    if (err != npuSuccess) runtimeFailure("npuMemAddressReserve", err);
    seg = new Segment();
    seg->base = static_cast<char*>(base);
    seg->address_size = address_size;
    seg->stream = stream;
    seg->pool = &pool;
    seg->expandable = true;
    seg->page_mapped.assign(address_size / page_size, false);
    segments.emplace(reinterpret_cast<uintptr_t>(base), seg);
    expandable.emplace(key, seg);
  }
  Block* tail = seg->tail;
  const size_t have = tail != nullptr && tail->isFree() ? tail->size : 0;
  if (have < size) {
    const size_t extend = roundUp(size - have, page_size);
    if (extend > seg->address_size - seg->size) {
      releaseIfUnmapped(seg);
      return nullptr;
    }
    // The new extent is unmapped address space: it costs nothing until mapPages.
    if (have != 0) {
      tail->size += extend;
      keyGrew(tail);
    } else {
      tail = newBlock(seg->base + seg->size, extend, stream, &pool, seg);
      tail->prev = seg->tail;
      if (seg->tail != nullptr) {
        seg->tail->next = tail;
      } else {
        seg->head = tail;
      }
      seg->tail = tail;
      insertFree(tail);
    }
    seg->size += extend;
  }
  if (!mapPages(seg, tail->ptr, size)) {
    releaseIfUnmapped(seg);
    return nullptr;
  }
  return tail;
}

// Maps the pages under [ptr, ptr + size) of an expandable segment that are not mapped yet;
// false, with nothing changed, when the memory fraction or the device refuses.
bool DeviceState::mapPages(Segment* seg, const char* ptr, size_t size) {
  const size_t first = static_cast<size_t>(ptr - seg->base) / page_size;
  const size_t end = (static_cast<size_t>(ptr - seg->base) + size + page_size - 1) / page_size;
  size_t need = 0;
  for (size_t p = first; p < end; ++p) need += seg->page_mapped[p] ? 0 : page_size;
  if (need == 0) return true;
  if (need > allowedBytes() || reserved + need > allowedBytes()) return false;
  std::vector<std::pair<size_t, size_t>> done;  // runs mapped by this call, [from, to)
  npuError_t err = npuSuccess;
  {
    DeviceGuard guard(device);
    for (size_t p = first; p < end && err == npuSuccess;) {
      if (seg->page_mapped[p]) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < end && !seg->page_mapped[q]) ++q;
      err = npuMemMap(seg->base + p * page_size, (q - p) * page_size);
      if (err == npuSuccess) {
        for (size_t i = p; i < q; ++i) seg->page_mapped[i] = true;
        done.emplace_back(p, q);
      }
      p = q;
    }
    if (err != npuSuccess) {
      for (const auto& [from, to] : done) {
        npuMemUnmap(seg->base + from * page_size, (to - from) * page_size);
        for (size_t i = from; i < to; ++i) seg->page_mapped[i] = false;
      }
    }
  }
  if (err == npuErrorMemoryAllocation) return false;
  if (err != npuSuccess) runtimeFailure("npuMemMap", err);
  const StatType type = seg->pool->statType();
  if (seg->mapped == 0) increase(stats.segment, type, 1);
  seg->mapped += need;
  reserved += need;
  ++stats.num_device_alloc;
  increase(stats.reserved_bytes, type, static_cast<int64_t>(need));
  return true;
}

bool DeviceState::shouldSplit(const Block* b, size_t size) const {
  const size_t remaining = b->size - size;
  if (b->pool->is_small || b->segment->expandable) return remaining >= kMinBlockSize;
  // A large remainder under 1 MiB would only ever serve small-pool-sized requests, which the
  // large pool never sees, so it stays with the block.
  return size < maxSplit() && remaining > kSmallSize;
}

// `free` is a block in the free set; returns the block handed out: `free` itself, or its front
// part when the rest is worth keeping (the rest stays in the free set as `free`).
Block* DeviceState::useBlock(Block* free, size_t size, size_t request) {
  const StatType type = free->pool->statType();
  Segment* seg = free->segment;
  const bool counts_split = !seg->expandable;
  const bool already_split = free->isSplit();
  Block* b = free;
  if (shouldSplit(free, size)) {
    b = newBlock(free->ptr, size, free->stream, free->pool, seg);
    b->prev = free->prev;
    b->next = free;
    if (free->prev != nullptr) free->prev->next = b;
    free->prev = b;
    if (seg->head == free) seg->head = b;
    free->ptr += size;
    free->size -= size;
    keyShrank(free);
    Block* rest = free;
    if (counts_split) {
      if (already_split) {
        // An inactive split block shrank by `size`.
        decrease(stats.inactive_split_bytes, type, static_cast<int64_t>(size));
      } else {
        increase(stats.inactive_split, type, 1);
        increase(stats.inactive_split_bytes, type, static_cast<int64_t>(rest->size));
      }
    }
  } else {
    eraseFree(free);
    if (already_split && counts_split) {
      decrease(stats.inactive_split, type, 1);
      decrease(stats.inactive_split_bytes, type, static_cast<int64_t>(b->size));
    }
  }
  b->allocated = true;
  b->requested_size = request;
  const auto bytes = static_cast<int64_t>(b->size);
  increase(stats.allocation, type, 1);
  increase(stats.allocated_bytes, type, bytes);
  increase(stats.active, type, 1);
  increase(stats.active_bytes, type, bytes);
  increase(stats.requested_bytes, type, static_cast<int64_t>(request));
  if (b->size >= maxSplit()) increase(stats.oversize_allocations, 1);
  return b;
}

// ---- freeing ---------------------------------------------------------------------------------

bool DeviceState::tryFree(const void* ptr) {
  std::lock_guard<DeviceLock> lock(mutex);
  Block* b = allocated.erase(ptr);
  if (b == nullptr) return false;
  free(b);
  return true;
}

void DeviceState::free(Block* b) {
  const StatType type = b->pool->statType();
  b->allocated = false;
  decrease(stats.allocation, type, 1);
  decrease(stats.allocated_bytes, type, static_cast<int64_t>(b->size));
  if (b->size >= maxSplit()) decrease(stats.oversize_allocations, 1);
  if (b->stream_uses.empty()) {
    freeBlock(b);
  } else if (!routes.empty()) {
    // Recording an event on a capturing stream would put it in the graph, not mark the stream
    // now: wait with the stream uses until the captures end (PyTorch defers them too).
    deferred_frees.push_back(b);
  } else {
    insertEvents(b);
  }
}

bool DeviceState::tryRecordStream(const void* ptr, npuStream_t stream) {
  std::lock_guard<DeviceLock> lock(mutex);
  Block* b = allocated.find(ptr);
  if (b == nullptr) return false;
  if (stream == nullptr) stream = default_stream;
  // The allocating stream is ordered with itself already.
  if (stream == b->stream) return true;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
  return true;
}

// Returns a block nobody uses any more to its pool, merged with free neighbours. The merged
// block can be a neighbour's Block object, so `b` must not be used by the caller afterwards.
void DeviceState::freeBlock(Block* b) {
  const StatType type = b->pool->statType();
  const auto original_size = static_cast<int64_t>(b->size);
  const auto requested = static_cast<int64_t>(b->requested_size);
  Segment* seg = b->segment;
  int64_t split_blocks_delta = 0;
  int64_t split_bytes_delta = 0;
  b->requested_size = 0;
  b->stream_uses.clear();
  // Merge into a free neighbour: its free-set entry is reused (see keyGrew).
  Block* p = b->prev != nullptr && b->prev->isFree() ? b->prev : nullptr;
  Block* n = b->next != nullptr && b->next->isFree() ? b->next : nullptr;
  if (p != nullptr) {
    --split_blocks_delta;
    split_bytes_delta -= static_cast<int64_t>(p->size);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    if (seg->tail == b) seg->tail = p;
    recycleBlock(b);
    b = p;
    if (n != nullptr) {
      --split_blocks_delta;
      split_bytes_delta -= static_cast<int64_t>(n->size);
      eraseFree(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      if (seg->tail == n) seg->tail = b;
      recycleBlock(n);
    }
    keyGrew(b);
  } else if (n != nullptr) {
    --split_blocks_delta;
    split_bytes_delta -= static_cast<int64_t>(n->size);
    n->ptr = b->ptr;
    n->size += b->size;
    n->prev = b->prev;
    if (b->prev != nullptr) b->prev->next = n;
    if (seg->head == b) seg->head = n;
    recycleBlock(b);
    b = n;
    keyGrew(b);
  } else {
    insertFree(b);
  }
  b->free_since = b->pool->searches;
  if (b->isSplit()) {
    ++split_blocks_delta;
    split_bytes_delta += static_cast<int64_t>(b->size);
  }

  // Free pages of an expandable segment can always be unmapped, so its free blocks are not
  // the stranded memory that inactive_split is meant to show (PyTorch excludes them too).
  if (!seg->expandable) {
    change(stats.inactive_split, type, split_blocks_delta);
    change(stats.inactive_split_bytes, type, split_bytes_delta);
  }
  decrease(stats.active, type, 1);
  decrease(stats.active_bytes, type, original_size);
  decrease(stats.requested_bytes, type, requested);

  if (config.caching_disabled && !b->isSplit() && !seg->expandable) releaseSegment(b);
}

void DeviceState::insertEvents(Block* b) {
  DeviceGuard guard(device);
  for (npuStream_t s : b->stream_uses) {
    npuEvent_t event = nullptr;
    if (!spare_events.empty()) {
      event = spare_events.back();
      spare_events.pop_back();
    } else {
      npuError_t err = npuEventCreateWithFlags(&event, npuEventDisableTiming);
      if (err != npuSuccess) runtimeFailure("npuEventCreateWithFlags", err);
    }
    if (npuEventRecord(event, s) != npuSuccess) {
      // The stream is gone (destroying a stream finishes its work first): nothing of it can
      // still touch the block.
      spare_events.push_back(event);
      continue;
    }
    ++b->event_count;
    pending[s].push_back(PendingUse{event, b});
    ++pending_count;
  }
  b->stream_uses.clear();
  if (b->event_count == 0) freeBlock(b);
}

// Frees the blocks whose stream uses have all completed. Each stream's events complete in
// record order, so a stream's queue is only read up to its first unfinished event.
void DeviceState::processEvents() {
  for (auto it = pending.begin(); it != pending.end();) {
    std::deque<PendingUse>& queue = it->second;
    while (!queue.empty()) {
      // Anything but "not ready" (done, or a failure reported through the event) means the
      // stream will not touch the block again.
      if (npuEventQuery(queue.front().event) == npuErrorNotReady) break;
      Block* b = queue.front().block;
      spare_events.push_back(queue.front().event);
      queue.pop_front();
      --pending_count;
      if (--b->event_count == 0) freeBlock(b);
    }
    it = queue.empty() ? pending.erase(it) : std::next(it);
  }
}

// Waits, without the lock, for every stream use pending now; then frees those blocks. Events
// are never destroyed while the allocator lives, so a handle stays valid even if another thread
// recycles it meanwhile (waiting for its new record only takes longer).
void DeviceState::waitForPendingUses(std::unique_lock<DeviceLock>& lock) {
  if (pending_count == 0) return;
  ++stats.num_sync_all_streams;
  std::vector<npuEvent_t> events;
  events.reserve(pending_count);
  for (const auto& [stream, queue] : pending) {
    for (const PendingUse& use : queue) events.push_back(use.event);
  }
  lock.unlock();
  for (npuEvent_t e : events) npuEventSynchronize(e);
  lock.lock();
  processEvents();
}

// ---- returning memory to the runtime ---------------------------------------------------------

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

// Unmaps the mapped pages in [first, end) of an expandable segment (runs of them, as the
// runtime wants whole mapped ranges).
void DeviceState::unmapPages(Segment* seg, size_t first, size_t end) {
  const StatType type = seg->pool->statType();
  DeviceGuard guard(device);
  for (size_t p = first; p < end;) {
    if (!seg->page_mapped[p]) {
      ++p;
      continue;
    }
    size_t q = p;
    while (q < end && seg->page_mapped[q]) ++q;
    const size_t bytes = (q - p) * page_size;
    npuError_t err = npuMemUnmap(seg->base + p * page_size, bytes);
    if (err != npuSuccess) runtimeFailure("npuMemUnmap", err);
    for (size_t i = p; i < q; ++i) seg->page_mapped[i] = false;
    seg->mapped -= bytes;
    reserved -= bytes;
    ++stats.num_device_free;
    decrease(stats.reserved_bytes, type, static_cast<int64_t>(bytes));
    if (seg->mapped == 0) decrease(stats.segment, type, 1);
    p = q;
  }
}

// Unmaps every whole page inside a free block of an expandable segment, wherever it lies (the
// pages a free block shares with a used neighbour stay), then gives the range back if nothing
// is mapped any more.
void DeviceState::unmapFreePages(Segment* seg) {
  for (Block* b = seg->head; b != nullptr; b = b->next) {
    if (!b->isFree()) continue;
    const auto offset = static_cast<size_t>(b->ptr - seg->base);
    const size_t first = (offset + page_size - 1) / page_size;
    const size_t end = (offset + b->size) / page_size;
    if (first < end) unmapPages(seg, first, end);
  }
  releaseIfUnmapped(seg);
}

// An expandable segment with no page mapped holds only free address space (a used block has
// mapped pages): its blocks and range are given back.
void DeviceState::releaseIfUnmapped(Segment* seg) {
  if (seg->mapped != 0) return;
  for (Block* b = seg->head; b != nullptr;) {
    Block* next = b->next;
    if (!b->isFree()) return;  // cannot happen (see above); keep the segment if it does
    b = next;
  }
  for (Block* b = seg->head; b != nullptr;) {
    Block* next = b->next;
    eraseFree(b);
    recycleBlock(b);
    b = next;
  }
  npuMemAddressFree(seg->base);
  segments.erase(reinterpret_cast<uintptr_t>(seg->base));
  expandable.erase(std::make_pair(seg->stream, static_cast<const BlockPool*>(seg->pool)));
  delete seg;
}

void DeviceState::releaseCachedBlocks() {
  std::vector<BlockPool*> pools{&large, &small};
  for (auto& [id, priv] : private_pools) {
    if (priv->use_count == 0) pools.insert(pools.end(), {&priv->large, &priv->small});
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
    if (!heldByGraph(*seg->pool)) growable.push_back(seg);
  }
  for (Segment* seg : growable) unmapFreePages(seg);
  // A pool no graph holds and that owns no memory any more is forgotten.
  for (auto it = private_pools.begin(); it != private_pools.end();) {
    const bool empty = it->second->use_count == 0 && std::none_of(
        segments.begin(), segments.end(), [&](const auto& entry) {
          return entry.second->pool->private_pool == it->second.get();
        });
    it = empty ? private_pools.erase(it) : std::next(it);
  }
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

void DeviceState::throwOutOfMemory(std::unique_lock<DeviceLock>& lock, size_t alloc_size) {
  ++stats.num_ooms;
  const auto allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
  const auto reserved_now = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
  const bool limited = fraction_set;
  const size_t allowed = allowedBytes();
  lock.unlock();
  size_t free_bytes = 0;
  size_t total_bytes = total_memory;
  {
    DeviceGuard guard(device);
    if (npuMemGetInfo(&free_bytes, &total_bytes) != npuSuccess) total_bytes = total_memory;
  }
  std::string message = "NPU out of memory. Tried to allocate " + formatSize(alloc_size) +
                        " (NPU " + std::to_string(device) + "; " + formatSize(total_bytes) +
                        " total capacity; " + formatSize(allocated) + " already allocated; " +
                        formatSize(free_bytes) + " free; ";
  if (limited) message += formatSize(allowed) + " allowed; ";
  message += formatSize(reserved_now) +
             " reserved in total by PyTorch) If reserved memory is >> allocated memory try "
             "setting max_split_size_mb to avoid fragmentation.";
  NPU_LOG(NPU_LOG_ERROR, "ALLOCATOR", "%s", message.c_str());
  throw OutOfMemoryError(message);
}

// ---- introspection ---------------------------------------------------------------------------

void DeviceState::snapshot(std::vector<SegmentInfo>& out) const {
  std::lock_guard<DeviceLock> lock(mutex);
  for (const auto& [address, seg] : segments) {
    if (seg->size == 0) continue;
    SegmentInfo info;
    info.device = device;
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

// Returns everything, blocks still allocated included: nothing may use the allocator (or its
// memory) once it is destroyed.
DeviceState::~DeviceState() {
  // Not DeviceGuard: a destructor must not throw.
  int previous = -1;
  const bool restore = npuGetDevice(&previous) == npuSuccess && previous != device;
  npuSetDevice(device);
  for (auto& [stream, queue] : pending) {
    for (const PendingUse& use : queue) {
      npuEventSynchronize(use.event);
      npuEventDestroy(use.event);
    }
  }
  for (npuEvent_t e : spare_events) npuEventDestroy(e);
  for (auto& [address, seg] : segments) {
    if (seg->expandable) {
      npuMemAddressFree(seg->base);  // unmaps what is still mapped
    } else {
      npuFree(seg->base);
    }
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    delete seg;
  }
  for (Block* b : spare_blocks) delete b;
  if (restore) npuSetDevice(previous);
}

}  // namespace detail

using detail::Block;
using detail::DeviceState;

struct CachingAllocator::Impl {
  explicit Impl(AllocatorConfig c) : config(std::move(c)) {}
  ~Impl() {
    for (auto& slot : devices) delete slot.load();
  }

  AllocatorConfig config;
  std::array<std::atomic<DeviceState*>, detail::kMaxDevices> devices{};
  std::atomic<int> device_limit{0};  // 1 + the highest device index with a state
  std::mutex init_mutex;

  static void checkIndex(int device) {
    if (device < 0 || device >= detail::kMaxDevices) {
      throw AllocatorError("invalid device index " + std::to_string(device));
    }
  }

  static void checkVisible(int device) {
    int count = 0;
    npuError_t err = npuGetDeviceCount(&count);
    if (err != npuSuccess) detail::runtimeFailure("npuGetDeviceCount", err);
    if (device >= count) {
      throw AllocatorError("invalid device index " + std::to_string(device) + " (" +
                           std::to_string(count) + " devices visible)");
    }
  }

  // The state of `device`, created on first use.
  DeviceState& state(int device) {
    checkIndex(device);
    DeviceState* s = devices[device].load(std::memory_order_acquire);
    if (s != nullptr) return *s;
    std::lock_guard<std::mutex> lock(init_mutex);
    s = devices[device].load(std::memory_order_acquire);
    if (s != nullptr) return *s;
    checkVisible(device);
    npuDeviceProp prop{};
    npuError_t err = npuGetDeviceProperties(&prop, device);
    if (err != npuSuccess) detail::runtimeFailure("npuGetDeviceProperties", err);
    npuStream_t stream = nullptr;
    err = npuGetDefaultStream(device, &stream);
    if (err != npuSuccess) detail::runtimeFailure("npuGetDefaultStream", err);
    size_t page = npuMemGetGranularity();
    if (page == 0) page = kSmallBuffer;
    s = new DeviceState(device, config, prop.total_memory, stream, page);
    devices[device].store(s, std::memory_order_release);
    if (device_limit.load() <= device) device_limit.store(device + 1);
    return *s;
  }

  // The state of `device` if it was used; validates the index either way.
  DeviceState* existing(int device) const {
    checkIndex(device);
    DeviceState* s = devices[device].load(std::memory_order_acquire);
    if (s == nullptr) checkVisible(device);
    return s;
  }

  // Runs `fn(state)` on the device states, the one this thread used last first, until it
  // returns true; returns the device it succeeded on, or -1. With one device (the usual case)
  // that is a single lookup.
  template <typename Fn>
  int onOwner(Fn&& fn) {
    thread_local int last_device = 0;
    const int hint = last_device;
    if (DeviceState* s = devices[hint].load(std::memory_order_acquire); s && fn(*s)) return hint;
    const int limit = device_limit.load(std::memory_order_acquire);
    for (int d = 0; d < limit; ++d) {
      DeviceState* s = devices[d].load(std::memory_order_acquire);
      if (d != hint && s != nullptr && fn(*s)) {
        last_device = d;
        return d;
      }
    }
    return -1;
  }
};

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: tensors freed during interpreter shutdown still reach it, after other
  // static objects may already be gone.
  static CachingAllocator* allocator = new CachingAllocator(AllocatorConfig::fromEnvironment());
  return *allocator;
}

CachingAllocator::CachingAllocator(AllocatorConfig config) : impl_(new Impl(std::move(config))) {}

CachingAllocator::~CachingAllocator() { delete impl_; }

void* CachingAllocator::allocate(size_t size, int device, npuStream_t stream) {
  if (size == 0) return nullptr;
  DeviceState& state = impl_->state(device);
  if (stream == nullptr) stream = state.default_stream;
  return state.malloc(size, stream);
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  if (impl_->onOwner([ptr](DeviceState& s) { return s.tryFree(ptr); }) < 0) {
    throw AllocatorError(
        "free of a pointer this allocator did not allocate (or already freed): " +
        detail::hexPointer(ptr));
  }
}

void CachingAllocator::recordStream(void* ptr, npuStream_t stream) {
  if (ptr == nullptr) return;
  if (impl_->onOwner([&](DeviceState& s) { return s.tryRecordStream(ptr, stream); }) < 0) {
    throw AllocatorError(
        "recordStream of a pointer this allocator did not allocate (or already freed): " +
        detail::hexPointer(ptr));
  }
}

void CachingAllocator::beginAllocateToPool(int device, uint64_t pool_id, npuStream_t stream) {
  DeviceState& state = impl_->state(device);
  state.beginAllocateToPool(pool_id, stream == nullptr ? state.default_stream : stream);
}

void CachingAllocator::endAllocateToPool(int device, uint64_t pool_id) {
  impl_->state(device).endAllocateToPool(pool_id);
}

void CachingAllocator::releasePool(int device, uint64_t pool_id) {
  impl_->state(device).releasePool(pool_id);
}

void CachingAllocator::emptyCache() {
  for (auto& slot : impl_->devices) {
    DeviceState* s = slot.load(std::memory_order_acquire);
    if (s != nullptr) s->emptyCache();
  }
}

DeviceStats CachingAllocator::getStats(int device) const {
  DeviceStats stats;
  if (const DeviceState* s = impl_->existing(device)) {
    std::lock_guard<DeviceLock> lock(s->mutex);
    stats = s->stats;
  }
  // SIZE_MAX (no limit) reads -1, as torch.npu.memory_stats()["max_split_size"] shows it.
  stats.max_split_size = static_cast<int64_t>(impl_->config.max_split_size);
  return stats;
}

void CachingAllocator::resetPeakStats(int device) {
  if (DeviceState* s = impl_->existing(device)) {
    std::lock_guard<DeviceLock> lock(s->mutex);
    detail::forEachStat(s->stats, [](Stat& stat) { stat.peak = stat.current; });
  }
}

void CachingAllocator::resetAccumulatedStats(int device) {
  if (DeviceState* s = impl_->existing(device)) {
    std::lock_guard<DeviceLock> lock(s->mutex);
    detail::forEachStat(s->stats, [](Stat& stat) {
      stat.allocated = 0;
      stat.freed = 0;
    });
    s->stats.num_alloc_retries = 0;
    s->stats.num_ooms = 0;
    s->stats.num_sync_all_streams = 0;
    s->stats.num_device_alloc = 0;
    s->stats.num_device_free = 0;
  }
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::vector<SegmentInfo> segments;
  for (const auto& slot : impl_->devices) {
    const DeviceState* s = slot.load(std::memory_order_acquire);
    if (s != nullptr) s->snapshot(segments);
  }
  return segments;
}

void CachingAllocator::setMemoryFraction(double fraction, int device) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    std::ostringstream os;
    os << "setMemoryFraction: invalid fraction " << fraction << "; expected a value in [0, 1]";
    throw std::invalid_argument(os.str());
  }
  DeviceState& s = impl_->state(device);
  std::lock_guard<DeviceLock> lock(s.mutex);
  s.fraction = fraction;
  s.fraction_set = true;
}

double CachingAllocator::getMemoryFraction(int device) const {
  const DeviceState* s = impl_->existing(device);
  if (s == nullptr) return 1.0;
  std::lock_guard<DeviceLock> lock(s->mutex);
  return s->fraction;
}

bool CachingAllocator::findAllocation(const void* ptr, int* device, void** base,
                                      size_t* size) const {
  if (ptr == nullptr) return false;
  void* found_base = nullptr;
  size_t found_size = 0;
  const int owner = impl_->onOwner(
      [&](DeviceState& s) { return s.find(ptr, &found_base, &found_size); });
  if (owner < 0) return false;
  if (device != nullptr) *device = owner;
  if (base != nullptr) *base = found_base;
  if (size != nullptr) *size = found_size;
  return true;
}

const AllocatorConfig& CachingAllocator::config() const { return impl_->config; }

std::string formatSize(uint64_t bytes) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (bytes <= 1024) {
    os << bytes << " bytes";
  } else if (bytes <= 1048576) {
    os << static_cast<double>(bytes) / 1024.0 << " KiB";
  } else if (bytes <= 1073741824ull) {
    os << static_cast<double>(bytes) / 1048576.0 << " MiB";
  } else {
    os << static_cast<double>(bytes) / 1073741824.0 << " GiB";
  }
  return os.str();
}

}  // namespace npu::alloc
