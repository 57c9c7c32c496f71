// SimNPU caching allocator: torch_npu's / PyTorch CUDA's caching allocator over the runtime's
// device memory. C++ (the adapter wraps it in a c10::DeviceAllocator); no PyTorch in here.
//
// Semantics follow PyTorch's CUDACachingAllocator: small (<= 1 MiB) and large pools, 512-byte
// rounding, splitting and merging, per-stream free lists, record_stream, statistics with
// current/peak/allocated/freed, empty_cache, snapshots, per-process memory fraction,
// PYTORCH_NPU_ALLOC_CONF and PYTORCH_NO_NPU_MEMORY_CACHING.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "npu/runtime.h"

#define NPU_ALLOC_API __attribute__((visibility("default")))

namespace npu::alloc {

// One statistic. current and peak are levels; allocated and freed are running sums of the
// increases and decreases of current.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
};

enum StatType : int { kAggregate = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };
using StatArray = Stat[kNumStatTypes];

// Mirrors c10::CachingDeviceAllocator::DeviceStats field for field, so the adapter copies it.
struct DeviceStats {
  StatArray allocation;            // COUNT: allocations requested by client code
  StatArray segment;               // COUNT: segments obtained from the runtime
  StatArray active;                // COUNT: active blocks (allocated or used by a stream)
  StatArray inactive_split;        // COUNT: free blocks inside segments that are split
  StatArray allocated_bytes;       // SUM: bytes allocated to clients (rounded sizes)
  StatArray reserved_bytes;        // SUM: bytes reserved from the runtime
  StatArray active_bytes;          // SUM: bytes in active blocks
  StatArray inactive_split_bytes;  // SUM: bytes in inactive split blocks
  StatArray requested_bytes;       // SUM: bytes requested by clients (unrounded)
  int64_t num_alloc_retries = 0;   // COUNT: runtime malloc failures that flushed the cache
  int64_t num_ooms = 0;            // COUNT: out-of-memory errors raised
  Stat oversize_allocations;       // COUNT: blocks above max_split_size handed out
  Stat oversize_segments;          // COUNT: segments above max_split_size
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;    // COUNT: runtime malloc / map calls
  int64_t num_device_free = 0;     // COUNT: runtime free / unmap calls
  int64_t max_split_size = 0;      // SIZE: blocks above this are never split
};

struct BlockInfo {
  size_t size = 0;
  size_t requested_size = 0;
  bool allocated = false;
  bool active = false;
};

struct SegmentInfo {
  int device = 0;
  uint64_t pool_id = 0;  // 0: the default pools; else the graph or user pool that owns it
  uintptr_t address = 0;
  size_t total_size = 0;
  size_t requested_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  npuStream_t stream = nullptr;
  bool is_large = false;
  bool is_expandable = false;
  std::vector<BlockInfo> blocks;
};

// One event of the allocator's dealings with the runtime, for memory history (torch.cuda's
// trace entries): "segment_alloc" / "segment_free" (a fixed segment obtained / returned),
// "segment_map" / "segment_unmap" (pages of an expandable segment mapped / unmapped) and "oom"
// (size: the bytes that could not be had; device_free: what the runtime reported free).
struct TraceEvent {
  const char* action = "";  // a string literal
  int device = 0;
  uintptr_t address = 0;
  size_t size = 0;
  npuStream_t stream = nullptr;
  uint64_t pool_id = 0;
  size_t device_free = 0;
};
// Called on the thread doing the work, with the device's lock held: it must not block nor call
// back into the allocator.
using TraceObserver = void (*)(const TraceEvent&);

// Parsed PYTORCH_NPU_ALLOC_CONF (or PYTORCH_ALLOC_CONF): every key torch_npu documents. The
// ones marked "accepted" are checked as torch_npu checks them and kept (collect_env, the
// settings string) but change nothing: they tune hardware or host-side work that SimNPU does
// not have.
struct AllocatorConfig {
  size_t max_split_size = SIZE_MAX;            // max_split_size_mb (MiB in the variable)
  double garbage_collection_threshold = 0.0;   // 0 = off; else in (0, 1)
  bool expandable_segments = false;
  std::vector<size_t> roundup_power2_divisions; // per power-of-two interval, 0 = off
  bool caching_disabled = false;               // PYTORCH_NO_NPU_MEMORY_CACHING=1
  // large_segment_size_mb (> 10; segment_size_mb, 20..512, when it is absent): the segment
  // size of the large pool for requests of 1 to 10 MiB. SIZE: bytes.
  size_t large_segment_size = 20u << 20;
  // page_size:1g: large-pool segments are whole GiB (1 GiB huge pages).
  bool huge_pages = false;
  // per_process_memory_fraction in [0, 1]: each device's cap, as set_per_process_memory_fraction
  // sets it, from the device's first use; < 0 = not set.
  double per_process_memory_fraction = -1.0;
  size_t base_addr_aligned_kb = 16;            // accepted (0..16)
  bool multi_stream_lazy_reclaim = false;      // accepted (host-side event polling)
  bool pinned_use_background_threads = false;  // accepted (host-side event polling)
  bool pin_memory_expandable_segments = false; // accepted (host allocator)
  bool pinned_mem_register = false;            // accepted (host memory registration)
  size_t pinned_reserve_segment_size_mb = 0;   // accepted (host allocator's reserve)
  size_t pinned_max_round_threshold_mb = 0;    // accepted (host allocator rounding), 0 = unset
  size_t pinned_max_cached_size_mb = 0;        // accepted (host allocator cache cap), 0 = unset

  // Throws std::invalid_argument naming the bad key or value and the accepted forms.
  static AllocatorConfig parse(const std::string& conf);
  // Applies the keys `conf` names to `config`, leaving the others (torch.npu.memory.
  // _set_allocator_settings); on a bad setting throws with `config` unchanged.
  static void update(const std::string& conf, AllocatorConfig& config);
  static AllocatorConfig fromEnvironment();
};

// Thrown when an allocation cannot be satisfied even after freeing cached blocks. what() is
// torch_npu's message: "NPU out of memory. Tried to allocate ... (NPU d; ... total capacity;
// ... already allocated; ... free; ... reserved in total by PyTorch) If reserved memory is >>
// allocated memory try setting max_split_size_mb to avoid fragmentation."
class NPU_ALLOC_API OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown for misuse: freeing a pointer the allocator does not own (double free), a bad device.
class NPU_ALLOC_API AllocatorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Process-wide allocator, one state per device. Thread-safe.
class NPU_ALLOC_API CachingAllocator {
 public:
  // The instance configured from the environment on first use.
  static CachingAllocator& instance();
  explicit CachingAllocator(AllocatorConfig config);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Memory for `stream` on `device`; size 0 returns nullptr. Throws OutOfMemoryError.
  void* allocate(size_t size, int device, npuStream_t stream);
  // nullptr is a no-op; an unknown pointer throws AllocatorError.
  void free(void* ptr);
  // The block holding ptr is in use by `stream` too: when freed it is not reused until the
  // work queued on `stream` at free time has finished.
  void recordStream(void* ptr, npuStream_t stream);
  // Returns every unused cached segment to the runtime (waits for pending stream uses).
  void emptyCache();

  // Graph pools (CUDA graphs' mempools), for stream capture. Between begin and end, what
  // `stream` (and any stream that joined its capture) allocates on `device` comes from pool
  // `pool_id` (created on first use; several graphs may share one id), and blocks freed into
  // it are reused only by allocations into the same pool: a replay writes the addresses the
  // capture used, so nothing else may hold them. Each begin counts as one use of the pool;
  // releasePool drops one (a graph reset or destroyed), and a pool without uses gives its
  // free memory back with the next emptyCache. While any capture is in progress on a device,
  // stream uses of freed blocks are recorded only after it ends (an event recorded on a
  // capturing stream would belong to the graph).
  void beginAllocateToPool(int device, uint64_t pool_id, npuStream_t stream);
  void endAllocateToPool(int device, uint64_t pool_id);
  void releasePool(int device, uint64_t pool_id);

  // User pools (torch.npu.MemPool / use_mem_pool, torch.cuda's semantics), kept with the graph
  // pools and sharing their ids. createPool makes the pool on `device` (or adds a use to an
  // existing one): use_on_oom lets an allocation outside the pool that would fail for lack of
  // memory take one of the pool's free blocks; no_split hands out the pool's blocks whole.
  // Between beginAllocateThreadToPool and endAllocateThreadToPool, what the calling thread
  // allocates on `device`, on any stream, comes from the pool; blocks freed go back to the
  // pool they came from. While the pool has uses (releasePool drops one) its cached segments
  // stay through emptyCache; releasePoolMemory then returns those of a pool without uses.
  void createPool(int device, uint64_t pool_id, bool use_on_oom, bool no_split);
  void beginAllocateThreadToPool(int device, uint64_t pool_id);
  void endAllocateThreadToPool(int device, uint64_t pool_id);
  int poolUseCount(int device, uint64_t pool_id) const;
  void releasePoolMemory(int device, uint64_t pool_id);

  // Every segment_alloc / segment_free / segment_map / segment_unmap / oom of every device
  // goes to `observer` (nullptr: none).
  static void setTraceObserver(TraceObserver observer);

  DeviceStats getStats(int device) const;
  void resetPeakStats(int device);
  void resetAccumulatedStats(int device);
  std::vector<SegmentInfo> snapshot() const;

  // Caps this process's reserved memory on `device` at fraction * capacity.
  void setMemoryFraction(double fraction, int device);
  double getMemoryFraction(int device) const;

  // Base address and size of the allocation holding ptr (for data_ptr -> device lookups).
  bool findAllocation(const void* ptr, int* device, void** base, size_t* size) const;

  const AllocatorConfig& config() const;
  // Changes the settings `conf` names (PYTORCH_NPU_ALLOC_CONF's grammar and keys) at run time:
  // later allocations follow them; existing segments stay as they are. A
  // per_process_memory_fraction applies to every device in use too. Throws
  // std::invalid_argument, changing nothing, on a bad setting.
  void setSettings(const std::string& conf);

 private:
  struct Impl;
  Impl* impl_;
};

// Formats a byte count as PyTorch does in OOM messages ("20.00 MiB", "1.50 GiB").
NPU_ALLOC_API std::string formatSize(uint64_t bytes);

}  // namespace npu::alloc
