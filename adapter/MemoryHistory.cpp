#include "MemoryHistory.h"

#include <Python.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>

// torch/csrc/profiler/python/combined_traceback.h declares these two (libtorch_python) but
// includes nlohmann/json, which torch's wheel does not ship: their declarations, as there.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(
    std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

#include "npu/caching_allocator.h"

namespace torch_npu::memory_history {
namespace {

namespace py = pybind11;
using Stack = std::shared_ptr<torch::CapturedTraceback>;

struct Entry {
  const char* action;  // "alloc", "free_requested", "free_completed", "segment_alloc", ...
  uintptr_t addr;
  size_t size;
  uintptr_t stream;
  int64_t time_us;
  Stack stack;
  size_t device_free = 0;  // "oom" only
  uint64_t pool_id = 0;
};

struct Live {
  size_t size;
  int device;
  uintptr_t stream;
  Stack stack;
};

struct History {
  std::mutex mutex;
  bool trace = false;          // enabled="all"
  bool stack_alloc = false;    // context state / alloc / all
  bool stack_free = false;     // context all
  bool cpp_frames = false;     // stacks="all"
  size_t max_entries = SIZE_MAX;
  std::vector<std::deque<Entry>> traces;  // per device
  std::unordered_map<uintptr_t, Live> live;
};

std::atomic<bool> g_recording{false};

History& history() {
  static auto* h = new History();  // never destroyed: frees may come after static teardown
  return *h;
}

// Whether an allocation's stack is recorded, and with C++ frames (read under the lock; the
// walk itself must happen outside it, as it may take the GIL).
struct AllocStackOptions {
  bool with_stack = false;
  bool cpp = false;
};
AllocStackOptions allocStackOptions() {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  return {h.stack_alloc, h.cpp_frames};
}

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The calling thread's Python stack (taking the GIL, as CUDA's allocator does), or none on a
// thread Python has never run on: a stream worker must not wait for the GIL, which a thread
// synchronizing with its stream may hold.
Stack gatherStack(bool cpp) {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, cpp);
}

// The stack of the allocation this thread is making (AllocationScope), for the segment it may
// cause the allocator to obtain.
thread_local Stack t_allocation_stack;
thread_local bool t_in_allocation = false;

// The allocator's trace observer: runs under the device's lock, so it only copies a pointer
// and appends (no stack walk, no GIL).
void onAllocatorEvent(const npu::alloc::TraceEvent& event) {
  if (!recording()) return;
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  Entry entry{event.action, event.address, event.size,
              reinterpret_cast<uintptr_t>(event.stream), nowUs(), t_allocation_stack};
  entry.device_free = event.device_free;
  entry.pool_id = event.pool_id;
  if (!h.trace || event.device < 0) return;
  if (h.traces.size() <= static_cast<size_t>(event.device)) h.traces.resize(event.device + 1);
  std::deque<Entry>& trace = h.traces[static_cast<size_t>(event.device)];
  trace.push_back(std::move(entry));
  while (trace.size() > h.max_entries) trace.pop_front();
}

void append(History& h, int device, Entry entry) {
  if (!h.trace || device < 0) return;
  if (h.traces.size() <= static_cast<size_t>(device)) h.traces.resize(device + 1);
  std::deque<Entry>& trace = h.traces[static_cast<size_t>(device)];
  trace.push_back(std::move(entry));
  while (trace.size() > h.max_entries) trace.pop_front();
}

}  // namespace

void configure(const std::string& enabled, const std::string& context, const std::string& stacks,
               size_t max_entries, bool clear) {
  TORCH_CHECK(enabled.empty() || enabled == "state" || enabled == "all",
              "_record_memory_history: enabled must be None, 'state' or 'all', got '", enabled,
              "'");
  TORCH_CHECK(context.empty() || context == "state" || context == "alloc" || context == "all",
              "_record_memory_history: context must be None, 'state', 'alloc' or 'all', got '",
              context, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "_record_memory_history: stacks must be 'python' or 'all', got '", stacks, "'");
  torch::installCapturedTracebackPython();
  History& h = history();
  std::vector<Stack> dropped;  // released after the lock (their frames need the GIL, held here)
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.trace = enabled == "all";
    h.stack_alloc = !enabled.empty() && !context.empty();
    h.stack_free = !enabled.empty() && context == "all";
    h.cpp_frames = stacks == "all";
    h.max_entries = max_entries == 0 ? SIZE_MAX : max_entries;
    if (clear || enabled.empty()) {
      for (auto& trace : h.traces) {
        for (Entry& e : trace) dropped.push_back(std::move(e.stack));
      }
      h.traces.clear();
    }
    if (enabled.empty()) {
      for (auto& [addr, live] : h.live) dropped.push_back(std::move(live.stack));
      h.live.clear();
    }
    g_recording.store(!enabled.empty(), std::memory_order_release);
  }
  npu::alloc::CachingAllocator::setTraceObserver(enabled.empty() ? nullptr : &onAllocatorEvent);
}

bool recording() noexcept { return g_recording.load(std::memory_order_acquire); }

AllocationScope::AllocationScope() {
  const AllocStackOptions options = allocStackOptions();
  t_in_allocation = true;
  t_allocation_stack = options.with_stack ? gatherStack(options.cpp) : nullptr;
}

AllocationScope::~AllocationScope() {
  t_in_allocation = false;
  t_allocation_stack = nullptr;
}

void recordAlloc(void* ptr, int device, void* stream) {
  if (ptr == nullptr) return;
  size_t size = 0;
  npu::alloc::CachingAllocator::instance().findAllocation(ptr, nullptr, nullptr, &size);
  History& h = history();
  const AllocStackOptions options = allocStackOptions();
  // The scope's stack when there is one (taken before the allocator ran), else one now; both
  // outside the lock, as a walk may take the GIL.
  Stack stack = t_in_allocation       ? t_allocation_stack
                : options.with_stack ? gatherStack(options.cpp)
                                     : nullptr;
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  const auto s = reinterpret_cast<uintptr_t>(stream);
  std::lock_guard<std::mutex> lock(h.mutex);
  append(h, device, Entry{"alloc", addr, size, s, nowUs(), stack});
  h.live[addr] = Live{size, device, s, std::move(stack)};
}

void recordFree(void* ptr) {
  if (ptr == nullptr) return;
  History& h = history();
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  Live live{0, -1, 0, nullptr};
  bool known = false;
  bool with_stack = false;
  bool cpp = false;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    with_stack = h.stack_free;
    cpp = h.cpp_frames;
    auto found = h.live.find(addr);
    if (found != h.live.end()) {
      live = std::move(found->second);
      h.live.erase(found);
      known = true;
    }
  }
  if (!known) {  // allocated before recording began
    int device = -1;
    size_t size = 0;
    if (!npu::alloc::CachingAllocator::instance().findAllocation(ptr, &device, nullptr, &size)) {
      return;
    }
    live = Live{size, device, 0, nullptr};
  }
  Stack stack = with_stack ? gatherStack(cpp) : nullptr;
  std::lock_guard<std::mutex> lock(h.mutex);
  // The caching allocator reuses the block once the streams that used it are done; the
  // trace shows the request and the return to the cache at once, as a block with no pending
  // stream uses does on CUDA.
  const int64_t now = nowUs();
  append(h, live.device, Entry{"free_requested", addr, live.size, live.stream, now, stack});
  append(h, live.device, Entry{"free_completed", addr, live.size, live.stream, now, stack});
}

py::dict snapshot(int device_count) {
  History& h = history();
  std::vector<std::vector<Entry>> traces;
  std::vector<std::pair<uintptr_t, Stack>> blocks;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    for (const auto& trace : h.traces) traces.emplace_back(trace.begin(), trace.end());
    for (const auto& [addr, live] : h.live) {
      if (live.stack) blocks.emplace_back(addr, live.stack);
    }
  }
  traces.resize(std::max<size_t>(traces.size(), static_cast<size_t>(device_count)));
  // One symbolize call for every stack (frames shared between stacks are resolved once).
  std::vector<torch::CapturedTraceback*> to_symbolize;
  for (const auto& trace : traces) {
    for (const Entry& e : trace) {
      if (e.stack) to_symbolize.push_back(e.stack.get());
    }
  }
  for (const auto& [addr, stack] : blocks) to_symbolize.push_back(stack.get());
  const std::vector<py::object> frames = torch::py_symbolize(to_symbolize);
  size_t next = 0;
  py::list device_traces;
  for (const auto& trace : traces) {
    py::list entries;
    for (const Entry& e : trace) {
      py::dict d;
      d["action"] = e.action;
      d["addr"] = e.addr;
      d["size"] = e.size;
      d["stream"] = e.stream;
      d["time_us"] = e.time_us;
      d["frames"] = e.stack ? frames[next++] : py::list();
      if (std::string_view(e.action) == "oom") d["device_free"] = e.device_free;
      if (e.pool_id != 0) d["pool_id"] = py::make_tuple(0, e.pool_id);
      entries.append(d);
    }
    device_traces.append(entries);
  }
  py::dict block_frames;
  for (const auto& [addr, stack] : blocks) block_frames[py::int_(addr)] = frames[next++];
  py::dict result;
  result["device_traces"] = device_traces;
  result["block_frames"] = block_frames;
  return result;
}

}  // namespace torch_npu::memory_history
