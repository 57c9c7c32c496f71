// The stream sanitizer's engine (npu/runtime.h, "the stream sanitizer's engine").
//
// Vector clocks, one per stream and one for the host, in launch order: access k of stream s
// carries the clock value k of s; a stream (or the host) has seen it when its own clock's entry
// for s is at least k. The byte ranges live in one ordered map of disjoint segments, split where
// accesses begin and end, each holding its last write and the latest read of each clock owner
// since then: an access checks only the segments it covers.
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime_internal.h"

namespace npu::rt {

std::atomic<bool> g_san_on{false};

namespace {

using Clock = std::vector<uint64_t>;  // indexed by owner: 0 is the host

struct Access {
  uint32_t owner = 0;  // 0: none (a segment with no write yet); else owner index + 1
  uint64_t at = 0;
  bool write = false;
  uint64_t tag = 0;
};

struct Segment {
  uintptr_t end = 0;
  Access write;              // the last write
  std::vector<Access> reads;  // since the last write, the latest per owner
  bool unwritten = false;     // uninit tracking: allocated, nothing wrote it
  uint64_t alloc_tag = 0;
};

struct Owner {
  npuStream_st* stream = nullptr;  // nullptr: the host
  int device = -1, stream_id = -1;
  Clock clock;
};

struct Engine {
  std::mutex mutex;
  bool uninit = false;
  std::vector<Owner> owners{Owner{}};  // [0] is the host
  std::unordered_map<npuStream_st*, uint32_t> index;
  std::unordered_map<npuEvent_st*, Clock> events;  // the clock each event's last record saw
  std::map<uintptr_t, Segment> segments;           // by begin
  void (*retain)(uint64_t) = nullptr;
  void (*release)(uint64_t) = nullptr;
  // What each NPU graph's capture accessed, made again on the replay stream at each launch.
  struct Captured {
    uintptr_t begin, end;
    bool write;
    uint64_t tag;  // retained while the graph keeps it
  };
  std::unordered_map<npuGraph_st*, std::vector<Captured>> graphs;
};

Engine& engine() {
  static auto* e = new Engine();  // never destroyed: hooks may run during exit
  return *e;
}

thread_local std::vector<npuSanReport> t_reports;
thread_local uint64_t t_current_tag = 0;  // npuSanSetCurrentTag
thread_local bool t_observer = false;     // npuSanSetThreadObserver
thread_local std::vector<uint64_t> t_dropped;  // tags to release once the lock is gone

void join(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

uint32_t ownerOf(Engine& e, npuStream_st* s) {
  if (s == nullptr) return 0;
  auto it = e.index.find(s);
  if (it != e.index.end()) return it->second;
  Owner o;
  o.stream = s;
  npuStreamGetDevice(s, &o.device);
  npuStreamGetId(s, &o.stream_id);
  e.owners.push_back(std::move(o));
  const auto id = static_cast<uint32_t>(e.owners.size() - 1);
  e.index.emplace(s, id);
  return id;
}

Clock& clockOf(Engine& e, uint32_t owner) {
  Clock& c = e.owners[owner].clock;
  if (c.size() < e.owners.size()) c.resize(e.owners.size(), 0);
  return c;
}

// A stream's work comes after all the host has seen complete (it is launched after that).
void joinHost(Engine& e, uint32_t owner) {
  if (owner != 0) join(clockOf(e, owner), clockOf(e, 0));
}

bool seen(Engine& e, uint32_t by, const Access& a) {
  if (a.owner == 0) return true;
  const uint32_t of = a.owner - 1;
  if (of == by) return true;
  const Clock& c = clockOf(e, by);
  return of < c.size() && c[of] >= a.at;
}

npuSanSide side(Engine& e, const Access& a) {
  npuSanSide out{};
  const Owner& o = e.owners[a.owner - 1];
  out.device = o.device;
  out.stream_id = o.stream_id;
  out.write = a.write ? 1 : 0;
  out.tag = a.tag;
  return out;
}

void drop(const Access& a) {
  if (a.tag != 0) t_dropped.push_back(a.tag);
}
void dropSegment(const Segment& s) {
  drop(s.write);
  for (const Access& r : s.reads) drop(r);
  if (s.alloc_tag != 0) t_dropped.push_back(s.alloc_tag);
}

// The allocation's tag goes with the bytes' "unwritten" mark.
void markWritten(Segment& s) {
  if (s.alloc_tag != 0) t_dropped.push_back(s.alloc_tag);
  s.alloc_tag = 0;
  s.unwritten = false;
}

// Each copy of a tag the engine stores is retained, each it forgets released (npuSanSetTagHooks).
void keep(const Access& a) {
  void (*retain)(uint64_t) = engine().retain;
  if (a.tag != 0 && retain != nullptr) retain(a.tag);
}

// Splits the segment containing `at` (if any) so that a segment begins there.
void splitAt(Engine& e, uintptr_t at) {
  auto it = e.segments.upper_bound(at);
  if (it == e.segments.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment tail = it->second;
  it->second.end = at;
  keep(tail.write);
  for (const Access& r : tail.reads) keep(r);
  if (tail.alloc_tag != 0 && e.retain != nullptr) e.retain(tail.alloc_tag);
  e.segments.emplace(at, std::move(tail));
}

// Forgets the history of [lo, hi) (the caller holds the engine's lock).
void eraseRange(Engine& e, uintptr_t lo, uintptr_t hi) {
  splitAt(e, lo);
  splitAt(e, hi);
  for (auto it = e.segments.lower_bound(lo); it != e.segments.end() && it->first < hi;) {
    dropSegment(it->second);
    it = e.segments.erase(it);
  }
}

void report(npuSanKind kind, uintptr_t begin, uintptr_t end, npuSanSide previous,
            npuSanSide current) {
  npuSanReport r{};
  r.kind = kind;
  r.begin = begin;
  r.end = end;
  r.previous = previous;
  r.current = current;
  // The report holds both tags until its reader releases them (the access may drop them now).
  void (*retain)(uint64_t) = engine().retain;
  if (retain != nullptr) {
    if (previous.tag != 0) retain(previous.tag);
    if (current.tag != 0) retain(current.tag);
  }
  t_reports.push_back(r);
}

void releaseDropped() {
  if (t_dropped.empty()) return;
  std::vector<uint64_t> tags;
  tags.swap(t_dropped);
  void (*release)(uint64_t) = engine().release;
  if (release == nullptr) return;
  for (uint64_t tag : tags) release(tag);
}

}  // namespace

uint64_t sanCurrentTag() { return t_current_tag; }

void sanForget(const void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) return;
  Engine& e = engine();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    const auto lo = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t hi = lo + bytes;
    eraseRange(e, lo, hi);
  }
  releaseDropped();
}

void sanEventRecord(npuEvent_st* event, npuStream_st* s) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const uint32_t o = ownerOf(e, s);
  joinHost(e, o);
  e.events[event] = clockOf(e, o);
}

void sanStreamWait(npuStream_st* s, npuEvent_st* event) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const uint32_t o = ownerOf(e, s);
  joinHost(e, o);
  auto it = e.events.find(event);
  if (it != e.events.end()) join(clockOf(e, o), it->second);
}

void sanHostJoinEvent(npuEvent_st* event) {
  if (t_observer) return;
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.events.find(event);
  if (it != e.events.end()) join(clockOf(e, 0), it->second);
}

void sanHostJoinStream(npuStream_st* s) {
  if (t_observer) return;
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const uint32_t o = ownerOf(e, s);
  Clock stream_clock = clockOf(e, o);
  join(clockOf(e, 0), stream_clock);
}

void sanGraphLaunch(npuGraph_st* graph, npuStream_st* s) {
  std::vector<Engine::Captured> list;
  {
    Engine& e = engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.graphs.find(graph);
    if (it == e.graphs.end()) return;
    list = it->second;
    for (const Engine::Captured& c : list) keep(Access{0, 0, false, c.tag});  // held for the calls
  }
  for (const Engine::Captured& c : list) {
    npuSanAccess(s, reinterpret_cast<void*>(c.begin), c.end - c.begin, c.write ? 1 : 0, c.tag);
    if (c.tag != 0) t_dropped.push_back(c.tag);
  }
  releaseDropped();
}

void sanGraphForget(npuGraph_st* graph) {
  {
    Engine& e = engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.graphs.find(graph);
    if (it == e.graphs.end()) return;
    for (const Engine::Captured& c : it->second) {
      if (c.tag != 0) t_dropped.push_back(c.tag);
    }
    e.graphs.erase(it);
  }
  releaseDropped();
}

void sanHostJoinDevice(Device* dev) {
  std::vector<npuStream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(dev->streams_mutex);
    streams = dev->streams;
  }
  for (npuStream_st* s : streams) sanHostJoinStream(s);
}

}  // namespace npu::rt

using namespace npu::rt;

void npuSanEnable(int on, int uninit) {
  Engine& e = engine();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.uninit = on && uninit;
    if (!on) {
      for (auto& [begin, seg] : e.segments) dropSegment(seg);
      e.segments.clear();
      e.events.clear();
      for (auto& [graph, list] : e.graphs) {
        for (const Engine::Captured& c : list) {
          if (c.tag != 0) t_dropped.push_back(c.tag);
        }
      }
      e.graphs.clear();
      for (Owner& o : e.owners) o.clock.clear();
    }
    g_san_on.store(on != 0, std::memory_order_relaxed);
  }
  releaseDropped();
}

void npuSanSetThreadObserver(int on) { t_observer = on != 0; }

uint64_t npuSanSetCurrentTag(uint64_t tag) {
  const uint64_t previous = t_current_tag;
  t_current_tag = tag;
  return previous;
}

int npuSanEnabled(void) { return g_san_on.load(std::memory_order_relaxed) ? 1 : 0; }

void npuSanSetTagHooks(void (*retain)(uint64_t tag), void (*release)(uint64_t tag)) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.retain = retain;
  e.release = release;
}

int npuSanAccess(npuStream_t stream, const void* ptr, size_t bytes, int write, uint64_t tag) {
  if (!g_san_on.load(std::memory_order_relaxed) || ptr == nullptr || bytes == 0) return 0;
  const bool host = stream == NPU_SAN_HOST;
  npuStream_st* s = nullptr;
  if (!host && resolveStream(stream, &s) != npuSuccess) return 0;
  const auto lo = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t hi = lo + bytes;
  Engine& e = engine();
  if (!host) {
    if (npuGraph_st* graph = captureGraphOf(s)) {  // runs at each replay, not now
      std::lock_guard<std::mutex> lock(e.mutex);
      if (tag != 0 && e.retain != nullptr) e.retain(tag);
      e.graphs[graph].push_back(Engine::Captured{lo, hi, write != 0, tag});
      return 0;
    }
  }
  const size_t before = t_reports.size();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    const uint32_t o = ownerOf(e, s);
    joinHost(e, o);
    Clock& clock = clockOf(e, o);
    Access now;
    now.owner = o + 1;
    now.at = ++clock[o];
    now.write = write != 0;
    now.tag = tag;
    if (!host) {
      // Gaps in the range become segments of their own, so the access is kept everywhere.
      uintptr_t at = lo;
      auto it = e.segments.upper_bound(lo);
      if (it != e.segments.begin() && std::prev(it)->second.end > lo) at = std::prev(it)->second.end;
      while (at < hi) {
        auto next = e.segments.lower_bound(at);
        const uintptr_t gap_end = next == e.segments.end() ? hi : std::min(hi, next->first);
        if (gap_end > at) {
          Segment fresh;
          fresh.end = gap_end;
          e.segments.emplace(at, fresh);
        }
        if (next == e.segments.end() || next->first >= hi) break;
        at = next->second.end;
      }
    }
    splitAt(e, lo);
    splitAt(e, hi);
    bool reported = false;
    for (auto it = e.segments.lower_bound(lo); it != e.segments.end() && it->first < hi; ++it) {
      Segment& seg = it->second;
      if (!reported) {
        const npuSanSide current = side(e, now);
        if (!seen(e, o, seg.write)) {
          report(npuSanRace, it->first, seg.end, side(e, seg.write), current);
          reported = true;
        } else if (now.write) {
          for (const Access& r : seg.reads) {
            if (!seen(e, o, r)) {
              report(npuSanRace, it->first, seg.end, side(e, r), current);
              reported = true;
              break;
            }
          }
        }
        if (!reported && !now.write && seg.unwritten) {
          npuSanSide alloc{};
          alloc.device = current.device;
          alloc.stream_id = current.stream_id;
          alloc.write = 1;
          alloc.tag = seg.alloc_tag;
          report(npuSanUninitRead, it->first, seg.end, alloc, current);
          reported = true;
        }
      }
      keep(now);
      if (now.write) {
        dropSegment(seg);
        seg.reads.clear();
        seg.write = now;
        seg.alloc_tag = 0;  // released with the segment's history
        seg.unwritten = false;
      } else {
        markWritten(seg);  // reported once
        auto same = std::find_if(seg.reads.begin(), seg.reads.end(),
                                 [&](const Access& r) { return r.owner == now.owner; });
        if (same != seg.reads.end()) {
          drop(*same);
          *same = now;
        } else {
          seg.reads.push_back(now);
        }
      }
    }
  }
  releaseDropped();
  return static_cast<int>(t_reports.size() - before);
}

void npuSanAlloc(const void* ptr, size_t bytes, uint64_t tag) {
  if (!g_san_on.load(std::memory_order_relaxed) || ptr == nullptr || bytes == 0) return;
  if (tag == 0) tag = t_current_tag;
  Engine& e = engine();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    if (!e.uninit) return;
    const auto lo = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t hi = lo + bytes;
    eraseRange(e, lo, hi);
    Segment fresh;
    fresh.end = hi;
    fresh.unwritten = true;
    fresh.alloc_tag = tag;
    if (tag != 0 && e.retain != nullptr) e.retain(tag);  // released when the bytes are written
    e.segments.emplace(lo, fresh);
  }
  releaseDropped();
}

int npuSanFree(const void* ptr, size_t bytes, npuStream_t stream, const npuStream_t* recorded,
               size_t recorded_count, uint64_t tag) {
  if (!g_san_on.load(std::memory_order_relaxed) || ptr == nullptr || bytes == 0) return 0;
  npuStream_st* s = nullptr;
  if (resolveStream(stream, &s) != npuSuccess) return 0;
  const auto lo = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t hi = lo + bytes;
  Engine& e = engine();
  const size_t before = t_reports.size();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    const uint32_t o = ownerOf(e, s);
    joinHost(e, o);
    std::vector<uint32_t> excused;
    for (size_t i = 0; i < recorded_count; ++i) {
      npuStream_st* r = nullptr;
      if (resolveStream(recorded[i], &r) == npuSuccess) excused.push_back(ownerOf(e, r) + 1);
    }
    auto excusedOwner = [&](const Access& a) {
      return a.owner == 1 ||  // the host's own accesses are over when it frees
             std::find(excused.begin(), excused.end(), a.owner) != excused.end();
    };
    splitAt(e, lo);
    splitAt(e, hi);
    bool reported = false;
    npuSanSide current{};
    current.device = e.owners[o].device;
    current.stream_id = e.owners[o].stream_id;
    current.write = 1;
    current.tag = tag;
    for (auto it = e.segments.lower_bound(lo); it != e.segments.end() && it->first < hi;) {
      Segment& seg = it->second;
      if (!reported) {
        const Access* late = nullptr;
        if (!excusedOwner(seg.write) && !seen(e, o, seg.write)) late = &seg.write;
        for (const Access& r : seg.reads) {
          if (late == nullptr && !excusedOwner(r) && !seen(e, o, r)) late = &r;
        }
        if (late != nullptr) {
          report(npuSanFreeInUse, it->first, seg.end, side(e, *late), current);
          reported = true;
        }
      }
      dropSegment(seg);
      it = e.segments.erase(it);  // the bytes' history ends with the block
    }
  }
  releaseDropped();
  return static_cast<int>(t_reports.size() - before);
}

size_t npuSanTakeReports(npuSanReport* out, size_t max) {
  const size_t n = std::min(max, t_reports.size());
  if (out != nullptr) std::copy(t_reports.begin(), t_reports.begin() + n, out);
  t_reports.erase(t_reports.begin(), t_reports.begin() + n);
  return n;
}
