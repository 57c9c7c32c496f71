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
//  - Blocks of max_split_size or more are never split and only reused for requests that leave
//    less than 20 MiB of them unused, so that big blocks are not chopped into useless pieces.
//  - A block belongs to the stream it was allocated for: work queued there later is ordered
//    after earlier uses. recordStream adds other streams; freeing such a block records an event
//    on each of them, and the block stays out of the free set until all have completed (polled
//    at the next allocate, waited for by emptyCache and by the out-of-memory path).
//  - When the runtime refuses a new segment: free cached oversize blocks (if max_split_size is
//    set), then wait for pending stream uses, free every unsplit cached segment and retry once;
//    if that fails too, raise OutOfMemoryError.
//  - Expandable segments: instead of many fixed segments, each (stream, pool) owns one reserved
//    virtual range whose mapped part grows by pages at its end. Blocks that would have sat in
//    different segments are neighbours and merge, so alternating sizes do not strand memory;
//    emptyCache unmaps the free pages at the end.
//  - Each pointer handed out is in a sharded hash map (pointer -> block), so free() finds its
//    block, and with it the device, without being told the device.
//  - Locks: one mutex per device guards all of its blocks, pools and stats; the pointer map has
//    a mutex per shard. Order: shard before device, never the other way round, and no lock is
//    held while waiting for an event.
#include "npu/caching_allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/allocator_internal.h"

namespace npu::alloc {
namespace detail {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kPointerShards = 16;
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

void increase(Stat& s, int64_t n) {
  s.current += n;
  s.allocated += n;
  s.peak = std::max(s.peak, s.current);
}
void decrease(Stat& s, int64_t n) {
  s.current -= n;
  s.freed += n;
}
// Every change is counted in the aggregate and in the pool's own entry.
void increase(StatArray& a, StatType pool, int64_t n) {
  increase(a[kAggregate], n);
  increase(a[pool], n);
}
void decrease(StatArray& a, StatType pool, int64_t n) {
  decrease(a[kAggregate], n);
  decrease(a[pool], n);
}
void change(StatArray& a, StatType pool, int64_t delta) {
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
  std::vector<npuStream_t> stream_uses;  // streams besides `stream` that used the block

  bool isSplit() const { return prev != nullptr || next != nullptr; }
  // Free and in its pool's free set (no client, no pending stream use).
  bool isFree() const { return !allocated && event_count == 0; }
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) {
      return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
    }
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
using FreeSet = std::set<Block*, BlockOrder>;

struct BlockPool {
  BlockPool(DeviceState* o, bool small) : owner(o), is_small(small) {}
  DeviceState* const owner;
  const bool is_small;
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
};

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

  mutable std::mutex mutex;
  DeviceStats stats;
  BlockPool small{this, true};
  BlockPool large{this, false};
  size_t reserved = 0;  // SIZE: bytes held from the runtime (mapped bytes if expandable)
  double fraction = 1.0;
  bool fraction_set = false;
  std::map<uintptr_t, Segment*> segments;  // by base address
  std::map<std::pair<npuStream_t, bool>, Segment*> expandable;  // (stream, is_small)
  std::map<npuStream_t, std::deque<PendingUse>> pending;  // per stream, in record order
  size_t pending_count = 0;
  std::vector<npuEvent_t> spare_events;  // reused; destroyed only with the allocator
  std::vector<Block*> spare_blocks;
  std::vector<FreeSet::node_type> spare_nodes;
  Block search_key;

  // Entry points; each takes the lock.
  Block* malloc(size_t request, npuStream_t stream);
  void free(Block* block);
  void recordStream(Block* block, npuStream_t stream);
  void emptyCache();
  void snapshot(std::vector<SegmentInfo>& out) const;
  bool findInterior(uintptr_t addr, void** base, size_t* size) const;

 private:
  size_t allowedBytes() const {
    return fraction_set ? static_cast<size_t>(fraction * static_cast<double>(total_memory))
                        : std::numeric_limits<size_t>::max();
  }
  size_t maxSplit() const { return config.max_split_size; }

  Block* newBlock();
  void recycleBlock(Block* b);
  void insertFree(Block* b);
  void eraseFree(FreeSet::iterator it);
  void eraseFree(Block* b) { eraseFree(b->pool->blocks.find(b)); }

  Block* takeFreeBlock(BlockPool& pool, npuStream_t stream, size_t size);
  Block* newSegmentBlock(BlockPool& pool, npuStream_t stream, size_t size, bool is_retry);
  Block* growExpandable(BlockPool& pool, npuStream_t stream, size_t size);
  Block* useBlock(Block* b, size_t size, size_t request);
  bool shouldSplit(const Block* b, size_t size) const;
  void freeBlock(Block* b);
  void insertEvents(Block* b);
  void processEvents();
  void waitForPendingUses(std::unique_lock<std::mutex>& lock);
  void releaseSegment(Block* b);
  void shrinkExpandable(Segment* seg);
  void releaseCachedBlocks();
  bool releaseOversizeBlocks(BlockPool& pool, npuStream_t stream, size_t size);
  void collectGarbage();
  [[noreturn]] void throwOutOfMemory(std::unique_lock<std::mutex>& lock, size_t alloc_size);
};

// ---- block and node bookkeeping --------------------------------------------------------------

Block* DeviceState::newBlock() {
  if (spare_blocks.empty()) return new Block();
  Block* b = spare_blocks.back();
  spare_blocks.pop_back();
  return b;
}

void DeviceState::recycleBlock(Block* b) {
  if (spare_blocks.size() >= kMaxSpareNodes) {
    delete b;
    return;
  }
  b->stream_uses.clear();
  std::vector<npuStream_t> uses = std::move(b->stream_uses);
  *b = Block();
  b->stream_uses = std::move(uses);  // keeps its capacity
  spare_blocks.push_back(b);
}

void DeviceState::insertFree(Block* b) {
  if (spare_nodes.empty()) {
    b->pool->blocks.insert(b);
    return;
  }
  FreeSet::node_type node = std::move(spare_nodes.back());
  spare_nodes.pop_back();
  node.value() = b;
  b->pool->blocks.insert(std::move(node));
}

void DeviceState::eraseFree(FreeSet::iterator it) {
  Block* b = *it;
  FreeSet::node_type node = b->pool->blocks.extract(it);
  if (spare_nodes.size() < kMaxSpareNodes) spare_nodes.push_back(std::move(node));
}

// ---- allocation ------------------------------------------------------------------------------

Block* DeviceState::malloc(size_t request, npuStream_t stream) {
  std::unique_lock<std::mutex> lock(mutex);
  if (pending_count != 0) processEvents();
  const size_t size = roundSize(request, config);
  BlockPool& pool = size <= kSmallSize ? small : large;
  Block* block = config.caching_disabled ? nullptr : takeFreeBlock(pool, stream, size);
  if (block == nullptr) {
    if (config.garbage_collection_threshold > 0.0 && !config.caching_disabled) collectGarbage();
    block = newSegmentBlock(pool, stream, size, false);
    if (block == nullptr && releaseOversizeBlocks(pool, stream, size)) {
      block = newSegmentBlock(pool, stream, size, false);
    }
    if (block == nullptr) {
      waitForPendingUses(lock);
      releaseCachedBlocks();
      block = newSegmentBlock(pool, stream, size, true);
    }
    if (block == nullptr) {
      // Like PyTorch, report what was asked of the runtime: the segment, for fixed segments.
      const bool fixed_segments = !config.caching_disabled && !config.expandable_segments;
      throwOutOfMemory(lock, fixed_segments ? segmentSize(size) : size);
    }
  }
  return useBlock(block, size, request);
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
  Block* found = *it;
  eraseFree(it);
  return found;
}

Block* DeviceState::newSegmentBlock(BlockPool& pool, npuStream_t stream, size_t size,
                                    bool is_retry) {
  if (is_retry) ++stats.num_alloc_retries;
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
  Block* b = newBlock();
  b->ptr = seg->base;
  b->size = bytes;
  b->stream = stream;
  b->pool = &pool;
  b->segment = seg;
  seg->head = seg->tail = b;
  segments.emplace(reinterpret_cast<uintptr_t>(ptr), seg);

  reserved += bytes;
  ++stats.num_device_alloc;
  increase(stats.segment, pool.statType(), 1);
  increase(stats.reserved_bytes, pool.statType(), static_cast<int64_t>(bytes));
  if (bytes >= maxSplit()) increase(stats.oversize_segments, 1);
  return b;
}

// Makes the free block at the end of the (stream, pool) expandable segment at least `size`
// bytes by mapping pages behind it, and takes it out of the free set.
Block* DeviceState::growExpandable(BlockPool& pool, npuStream_t stream, size_t size) {
  const auto key = std::make_pair(stream, pool.is_small);
  auto found = expandable.find(key);
  Segment* seg = found == expandable.end() ? nullptr : found->second;
  Block* tail = seg != nullptr ? seg->tail : nullptr;
  const size_t have = tail != nullptr && tail->isFree() ? tail->size : 0;
  if (have >= size) {
    eraseFree(tail);
    return tail;
  }
  const size_t need = roundUp(size - have, page_size);
  if (need > allowedBytes() || reserved + need > allowedBytes()) return nullptr;

  DeviceGuard guard(device);
  bool fresh = false;
  if (seg == nullptr) {
    // Reserving address space costs no capacity, so reserve the whole device: the segment can
    // then grow as far as memory allows without ever moving.
    const size_t address_size = roundUp(total_memory, page_size);
    void* base = nullptr;
    npuError_t err = npuMemAddressReserve(&base, address_size);
    if (err == npuErrorMemoryAllocation) return nullptr;
    if (err != npuSuccess) runtimeFailure("npuMemAddressReserve", err);
    seg = new Segment();
    seg->base = static_cast<char*>(base);
    seg->address_size = address_size;
    seg->stream = stream;
    seg->pool = &pool;
    seg->expandable = true;
    segments.emplace(reinterpret_cast<uintptr_t>(base), seg);
    expandable.emplace(key, seg);
    fresh = true;
  }
  npuError_t err = seg->size + need > seg->address_size
                       ? npuErrorMemoryAllocation
                       : npuMemMap(seg->base + seg->size, need);
  if (err != npuSuccess) {
    if (fresh) {
      npuMemAddressFree(seg->base);
      segments.erase(reinterpret_cast<uintptr_t>(seg->base));
      expandable.erase(key);
      delete seg;
    }
    if (err == npuErrorMemoryAllocation) return nullptr;
    runtimeFailure("npuMemMap", err);
  }

  if (seg->size == 0) increase(stats.segment, pool.statType(), 1);
  reserved += need;
  ++stats.num_device_alloc;
  increase(stats.reserved_bytes, pool.statType(), static_cast<int64_t>(need));
  if (have != 0) {
    eraseFree(tail);
    tail->size += need;
  } else {
    tail = newBlock();
    tail->ptr = seg->base + seg->size;
    tail->size = need;
    tail->stream = stream;
    tail->pool = &pool;
    tail->segment = seg;
    tail->prev = seg->tail;
    if (seg->tail != nullptr) {
      seg->tail->next = tail;
    } else {
      seg->head = tail;
    }
    seg->tail = tail;
  }
  seg->size += need;
  return tail;
}

bool DeviceState::shouldSplit(const Block* b, size_t size) const {
  const size_t remaining = b->size - size;
  if (b->pool->is_small || b->segment->expandable) return remaining >= kMinBlockSize;
  // A large remainder under 1 MiB would only ever serve small-pool-sized requests, which the
  // large pool never sees, so it stays with the block.
  return size < maxSplit() && remaining > kSmallSize;
}

Block* DeviceState::useBlock(Block* b, size_t size, size_t request) {
  const StatType type = b->pool->statType();
  const bool counts_split = !b->segment->expandable;
  const bool already_split = b->isSplit();
  if (shouldSplit(b, size)) {
    Block* rest = newBlock();
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->segment = b->segment;
    rest->prev = b;
    rest->next = b->next;
    rest->free_since = b->pool->searches;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    if (b->segment->tail == b) b->segment->tail = rest;
    b->size = size;
    insertFree(rest);
    if (counts_split) {
      if (already_split) {
        // An inactive split block shrank by `size`.
        decrease(stats.inactive_split_bytes, type, static_cast<int64_t>(size));
      } else {
        increase(stats.inactive_split, type, 1);
        increase(stats.inactive_split_bytes, type, static_cast<int64_t>(rest->size));
      }
    }
  } else if (already_split && counts_split) {
    decrease(stats.inactive_split, type, 1);
    decrease(stats.inactive_split_bytes, type, static_cast<int64_t>(b->size));
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

void DeviceState::free(Block* b) {
  std::lock_guard<std::mutex> lock(mutex);
  const StatType type = b->pool->statType();
  b->allocated = false;
  decrease(stats.allocation, type, 1);
  decrease(stats.allocated_bytes, type, static_cast<int64_t>(b->size));
  if (b->size >= maxSplit()) decrease(stats.oversize_allocations, 1);
  if (b->stream_uses.empty()) {
    freeBlock(b);
  } else {
    insertEvents(b);
  }
}

void DeviceState::recordStream(Block* b, npuStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex);
  if (stream == nullptr) stream = default_stream;
  // The allocating stream is ordered with itself already.
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

// Returns a block nobody uses any more to its pool, merged with free neighbours.
void DeviceState::freeBlock(Block* b) {
  const StatType type = b->pool->statType();
  const auto original_size = static_cast<int64_t>(b->size);
  const auto requested = static_cast<int64_t>(b->requested_size);
  Segment* seg = b->segment;
  int64_t split_blocks_delta = 0;
  int64_t split_bytes_delta = 0;
  if (b->prev != nullptr && b->prev->isFree()) {
    Block* p = b->prev;
    --split_blocks_delta;
    split_bytes_delta -= static_cast<int64_t>(p->size);
    eraseFree(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    if (seg->tail == b) seg->tail = p;
    recycleBlock(b);
    b = p;
  }
  if (b->next != nullptr && b->next->isFree()) {
    Block* n = b->next;
    --split_blocks_delta;
    split_bytes_delta -= static_cast<int64_t>(n->size);
    eraseFree(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    if (seg->tail == n) seg->tail = b;
    recycleBlock(n);
  }
  if (b->isSplit()) {
    ++split_blocks_delta;
    split_bytes_delta += static_cast<int64_t>(b->size);
  }
  b->requested_size = 0;
  b->stream_uses.clear();
  b->free_since = b->pool->searches;
  insertFree(b);

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
void DeviceState::waitForPendingUses(std::unique_lock<std::mutex>& lock) {
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
  ++stats.num_device_free;
  decrease(stats.segment, type, 1);
  decrease(stats.reserved_bytes, type, static_cast<int64_t>(seg->size));
  if (seg->size >= maxSplit()) decrease(stats.oversize_segments, 1);
  segments.erase(reinterpret_cast<uintptr_t>(seg->base));
  delete seg;
  recycleBlock(b);
  if (err != npuSuccess) runtimeFailure("npuFree", err);
}

// Unmaps the whole free pages at the end of an expandable segment; frees its address range once
// nothing is mapped. Free pages in the middle stay mapped (PyTorch unmaps those too).
void DeviceState::shrinkExpandable(Segment* seg) {
  Block* tail = seg->tail;
  if (tail == nullptr || !tail->isFree()) return;
  const size_t keep = roundUp(static_cast<size_t>(tail->ptr - seg->base), page_size);
  if (keep >= seg->size) return;
  const size_t cut = seg->size - keep;
  const StatType type = seg->pool->statType();
  eraseFree(tail);
  DeviceGuard guard(device);
  npuError_t err = npuMemUnmap(seg->base + keep, cut);
  if (err != npuSuccess) {
    insertFree(tail);
    runtimeFailure("npuMemUnmap", err);
  }
  reserved -= cut;
  ++stats.num_device_free;
  decrease(stats.reserved_bytes, type, static_cast<int64_t>(cut));
  seg->size = keep;
  tail->size -= cut;
  if (tail->size != 0) {
    insertFree(tail);
  } else {
    seg->tail = tail->prev;
    if (tail->prev != nullptr) {
      tail->prev->next = nullptr;
    } else {
      seg->head = nullptr;
    }
    recycleBlock(tail);
  }
  if (seg->size == 0) {
    decrease(stats.segment, type, 1);
    npuMemAddressFree(seg->base);
    segments.erase(reinterpret_cast<uintptr_t>(seg->base));
    expandable.erase(std::make_pair(seg->stream, seg->pool->is_small));
    delete seg;
  }
}

void DeviceState::releaseCachedBlocks() {
  std::vector<Block*> victims;
  for (BlockPool* pool : {&large, &small}) {
    for (Block* b : pool->blocks) {
      if (!b->isSplit() && !b->segment->expandable) victims.push_back(b);
    }
  }
  for (Block* b : victims) releaseSegment(b);
  std::vector<Segment*> growable;
  for (const auto& [key, seg] : expandable) growable.push_back(seg);
  for (Segment* seg : growable) shrinkExpandable(seg);
}

// With max_split_size set, cached oversize blocks are what usually stands in the way: free one
// big enough for the request, else the largest ones of this stream until enough is released.
bool DeviceState::releaseOversizeBlocks(BlockPool& pool, npuStream_t stream, size_t size) {
  if (maxSplit() == std::numeric_limits<size_t>::max() || pool.blocks.empty()) return false;
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
    for (const Block* b : candidates) total_age += static_cast<double>(large.searches - b->free_since);
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
  std::unique_lock<std::mutex> lock(mutex);
  waitForPendingUses(lock);
  releaseCachedBlocks();
}

void DeviceState::throwOutOfMemory(std::unique_lock<std::mutex>& lock, size_t alloc_size) {
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
  throw OutOfMemoryError(message);
}

// ---- introspection ---------------------------------------------------------------------------

void DeviceState::snapshot(std::vector<SegmentInfo>& out) const {
  std::lock_guard<std::mutex> lock(mutex);
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

bool DeviceState::findInterior(uintptr_t addr, void** base, size_t* size) const {
  std::lock_guard<std::mutex> lock(mutex);
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

  struct alignas(64) Shard {
    std::mutex mutex;
    std::unordered_map<const void*, Block*> blocks;
    std::vector<std::unordered_map<const void*, Block*>::node_type> spare;
  };

  AllocatorConfig config;
  std::array<std::atomic<DeviceState*>, detail::kMaxDevices> devices{};
  std::mutex init_mutex;
  std::array<Shard, detail::kPointerShards> shards;

  Shard& shardFor(const void* ptr) {
    // Blocks are at least 512-byte aligned, segments 2 MiB: hash so they spread over shards.
    const uint64_t h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)) *
                       0x9E3779B97F4A7C15ull;
    return shards[h >> 60];
  }

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
    return *s;
  }

  // The state of `device` if it was used; validates the index either way.
  DeviceState* existing(int device) const {
    checkIndex(device);
    DeviceState* s = devices[device].load(std::memory_order_acquire);
    if (s == nullptr) checkVisible(device);
    return s;
  }

  void registerBlock(Block* b) {
    Shard& shard = shardFor(b->ptr);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.spare.empty()) {
      shard.blocks.emplace(b->ptr, b);
      return;
    }
    auto node = std::move(shard.spare.back());
    shard.spare.pop_back();
    node.key() = b->ptr;
    node.mapped() = b;
    shard.blocks.insert(std::move(node));
  }

  Block* unregisterBlock(const void* ptr) {
    Shard& shard = shardFor(ptr);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.blocks.find(ptr);
    if (it == shard.blocks.end()) return nullptr;
    Block* b = it->second;
    auto node = shard.blocks.extract(it);
    if (shard.spare.size() < detail::kMaxSpareNodes) shard.spare.push_back(std::move(node));
    return b;
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
  Block* b = state.malloc(size, stream);
  // Registered after the device lock is released: locks are only ever taken shard first.
  impl_->registerBlock(b);
  return b->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  Block* b = impl_->unregisterBlock(ptr);
  if (b == nullptr) {
    throw AllocatorError(
        "free of a pointer this allocator did not allocate (or already freed): " +
        detail::hexPointer(ptr));
  }
  b->pool->owner->free(b);
}

void CachingAllocator::recordStream(void* ptr, npuStream_t stream) {
  if (ptr == nullptr) return;
  Impl::Shard& shard = impl_->shardFor(ptr);
  // The shard lock is held throughout so that the block cannot be freed under us.
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.blocks.find(ptr);
  if (it == shard.blocks.end()) {
    throw AllocatorError(
        "recordStream of a pointer this allocator did not allocate (or already freed): " +
        detail::hexPointer(ptr));
  }
  it->second->pool->owner->recordStream(it->second, stream);
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
    std::lock_guard<std::mutex> lock(s->mutex);
    stats = s->stats;
  }
  // SIZE_MAX (no limit) reads -1, as torch.npu.memory_stats()["max_split_size"] shows it.
  stats.max_split_size = static_cast<int64_t>(impl_->config.max_split_size);
  return stats;
}

void CachingAllocator::resetPeakStats(int device) {
  if (DeviceState* s = impl_->existing(device)) {
    std::lock_guard<std::mutex> lock(s->mutex);
    detail::forEachStat(s->stats, [](Stat& stat) { stat.peak = stat.current; });
  }
}

void CachingAllocator::resetAccumulatedStats(int device) {
  if (DeviceState* s = impl_->existing(device)) {
    std::lock_guard<std::mutex> lock(s->mutex);
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
  std::lock_guard<std::mutex> lock(s.mutex);
  s.fraction = fraction;
  s.fraction_set = true;
}

double CachingAllocator::getMemoryFraction(int device) const {
  const DeviceState* s = impl_->existing(device);
  if (s == nullptr) return 1.0;
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->fraction;
}

bool CachingAllocator::findAllocation(const void* ptr, int* device, void** base,
                                      size_t* size) const {
  if (ptr == nullptr) return false;
  {
    // Most lookups are of pointers handed out, which the pointer map knows.
    Impl::Shard& shard = impl_->shardFor(ptr);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.blocks.find(ptr);
    if (it != shard.blocks.end()) {
      const Block* b = it->second;
      if (device != nullptr) *device = b->pool->owner->device;
      if (base != nullptr) *base = b->ptr;
      if (size != nullptr) *size = b->requested_size;
      return true;
    }
  }
  for (const auto& slot : impl_->devices) {
    const DeviceState* s = slot.load(std::memory_order_acquire);
    void* found_base = nullptr;
    size_t found_size = 0;
    if (s != nullptr && s->findInterior(reinterpret_cast<uintptr_t>(ptr), &found_base,
                                        &found_size)) {
      if (device != nullptr) *device = s->device;
      if (base != nullptr) *base = found_base;
      if (size != nullptr) *size = found_size;
      return true;
    }
  }
  return false;
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
