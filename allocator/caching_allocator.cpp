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
#include "allocator/device_state.h"
#include "npu/log.h"

// The free-block sets, allocation and freeing (the hot path) live here; the other parts of
// DeviceState are listed in device_state.h.

namespace npu::alloc {
namespace detail {

namespace {
std::atomic<TraceObserver> g_trace_observer{nullptr};
}  // namespace

void DeviceState::trace(const char* action, const void* address, size_t size,
                        npuStream_t stream, const BlockPool* pool, size_t device_free) const {
  const TraceObserver observer = g_trace_observer.load(std::memory_order_acquire);
  if (observer == nullptr) return;
  TraceEvent event;
  event.action = action;
  event.device = device;
  event.address = reinterpret_cast<uintptr_t>(address);
  event.size = size;
  event.stream = stream;
  event.pool_id = pool != nullptr && pool->private_pool != nullptr ? pool->private_pool->id : 0;
  event.device_free = device_free;
  observer(event);
}

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
  static const bool faults = npuSimFaultsArmed() != 0;
  npuSimFault fault;
  fault.kind = npuSimFaultNone;
  if (__builtin_expect(faults, 0)) {
    // NPU_SIM_FAULTS oom@alloc=N: this allocation fails as if the device were full.
    if (npuSimFaultTick(npuSimOnAlloc, device, &fault) == npuSuccess &&
        fault.kind == npuSimFaultOom) {
      throwOutOfMemory(lock, roundSize(request, config));
    }
  }
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
    // Last resort for an allocation outside the private pools: a user pool's free block, if
    // the pool allows it (use_on_oom). A pool's own allocations never take another's.
    if (block == nullptr && !private_pools.empty() && pool.private_pool == nullptr) {
      block = takeFromPoolsUsableOnOom(stream, size);
    }
    if (block == nullptr) {
      // Like PyTorch, report what was asked of the runtime: the segment, for fixed segments.
      const bool fixed_segments = !config.caching_disabled && !config.expandable_segments;
      throwOutOfMemory(lock, fixed_segments ? segmentSize(size, config) : size);
    }
  }
  Block* used = useBlock(block, size, request);
  registerPointer(used);
  if (__builtin_expect(fault.kind == npuSimFaultHbmUce, 0)) {
    // NPU_SIM_FAULTS hbm_uce@alloc=N: the memory this allocation was given is faulty (an
    // activation, a KV cache block: whatever the program allocates N-th).
    (void)npuSimInjectMemError(device, used->ptr, request);
  }
  return used->ptr;
}

void DeviceState::registerPointer(Block* b) { allocated.insert(b->ptr, b); }

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
  const size_t bytes = config.caching_disabled ? size : segmentSize(size, config);
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
  trace("segment_alloc", ptr, bytes, stream, &pool);
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

bool DeviceState::shouldSplit(const Block* b, size_t size) const {
  const size_t remaining = b->size - size;
  if (b->pool->private_pool != nullptr && b->pool->private_pool->no_split) return false;
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

// ---- out of memory (the retries before it: gc_and_snapshot.cpp) ------------------------------

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
  trace("oom", nullptr, alloc_size, nullptr, nullptr, free_bytes);
  NPU_LOG(NPU_LOG_ERROR, "ALLOCATOR", "%s", message.c_str());
  throw OutOfMemoryError(message);
}

// ---- teardown ----------------------------------------------------------------------------------

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
    if (config.per_process_memory_fraction >= 0.0) {  // PYTORCH_NPU_ALLOC_CONF's cap
      s->fraction = config.per_process_memory_fraction;
      s->fraction_set = true;
    }
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
  void* ptr = state.malloc(size, stream);
  // The stream sanitizer's uninitialised-read check (NPU_SIM_SANITIZER_UNINIT) starts these bytes
  // unwritten; a no-op unless the sanitizer is on.
  npuSanAlloc(ptr, size, 0);
  // Shadow execution: a small fresh block reads as zero, not as the bytes of the metadata that
  // last lived there (kernels, which would overwrite it, do not run). In stream order, after
  // the block's previous use.
  static const bool shadow = npuSimShadow() != 0;
  if (shadow && size <= NPU_SIM_SHADOW_CARRY_BYTES) {
    // Best effort: a stream that refuses the memset (its capture was invalidated) reports its
    // own error at its next synchronize; the block then keeps its bytes.
    (void)npuSimScrubAsync(ptr, size, stream);
  }
  return ptr;
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

void CachingAllocator::createPool(int device, uint64_t pool_id, bool use_on_oom, bool no_split) {
  impl_->state(device).createPool(pool_id, use_on_oom, no_split);
}

void CachingAllocator::beginAllocateThreadToPool(int device, uint64_t pool_id) {
  impl_->state(device).beginAllocateThreadToPool(pool_id);
}

void CachingAllocator::endAllocateThreadToPool(int device, uint64_t pool_id) {
  impl_->state(device).endAllocateThreadToPool(pool_id);
}

int CachingAllocator::poolUseCount(int device, uint64_t pool_id) const {
  const DeviceState* s = impl_->existing(device);
  return s == nullptr ? 0 : s->poolUseCount(pool_id);
}

void CachingAllocator::releasePoolMemory(int device, uint64_t pool_id) {
  if (DeviceState* s = impl_->existing(device)) s->releasePoolMemory(pool_id);
}

void CachingAllocator::setTraceObserver(TraceObserver observer) {
  detail::g_trace_observer.store(observer, std::memory_order_release);
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

void CachingAllocator::setSettings(const std::string& conf) {
  std::lock_guard<std::mutex> init(impl_->init_mutex);  // no device state appears meanwhile
  AllocatorConfig updated = impl_->config;
  AllocatorConfig::update(conf, updated);  // throws, changing nothing, on a bad setting
  // The device states read the config under their locks: take them all while it changes.
  std::vector<std::unique_lock<DeviceLock>> locks;
  std::vector<DeviceState*> states;
  for (auto& slot : impl_->devices) {
    DeviceState* s = slot.load(std::memory_order_acquire);
    if (s == nullptr) continue;
    locks.emplace_back(s->mutex);
    states.push_back(s);
  }
  const bool new_fraction =
      updated.per_process_memory_fraction != impl_->config.per_process_memory_fraction;
  impl_->config = std::move(updated);
  if (new_fraction && impl_->config.per_process_memory_fraction >= 0.0) {
    for (DeviceState* s : states) {
      s->fraction = impl_->config.per_process_memory_fraction;
      s->fraction_set = true;
    }
  }
}

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
