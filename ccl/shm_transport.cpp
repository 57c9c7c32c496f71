// The intra-node transport.
//
// How it works:
//  - One segment per node, created by local rank 0 and opened by the others (retried until the
//    connect deadline). Layout: a header, one control block per rank (its sync counter, pid and
//    "broken" flag), one ring control per ordered pair, the staging slots (slotBytes per rank,
//    two halves), the point-to-point rings (one per ordered pair). tmpfs only commits pages
//    that are touched, so a 200 MB slot costs what the largest message used.
//  - Sync points: each rank counts the sync points it has passed in its control block
//    (release store) and waits until every rank's counter has reached its own (acquire loads).
//    Every rank runs the same sequence of chunks, so counters line up without any messages.
//  - A chunk is staged in half (chunk number & 1) of the slots. Writing half h for chunk c is
//    safe once every rank has passed a sync point of chunk c-1, which each passes only after it
//    has finished reading chunk c-2 (the last user of half h); so one sync per phase suffices.
//  - Reductions: small chunks are copied into the slots and every rank reduces all slots
//    itself (one sync); large chunks are reduce-scattered (rank r reduces slice r of every slot
//    into slice r of its own slot) and then gathered (every rank copies all slices out): two
//    syncs, each rank reducing 1/N of the data (DeepSpeed's shared-memory allreduce idea).
//  - Point-to-point: a byte ring per ordered pair (single producer, single consumer; head and
//    tail counters). A message is an 8-byte length then the data, padded to 8 bytes. A send
//    returns once its bytes are in the ring, so two ranks may both send before they receive
//    as long as each message fits the ring (ringBytes); a larger send waits for the receiver.
//  - Waits spin briefly, then yield, then sleep in short steps, checking the deadline, the
//    communicator's abort flag and the peers' broken flags.
#include "shm_transport.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "npu/kernels/thread_pool.h"
#include "npu/runtime.h"
#include "reduce.h"

namespace npu::ccl {

constexpr uint64_t kMagic = 0x53494d4e50554343ull;  // "SIMNPUCC"
constexpr uint64_t kPage = 4096;
// Chunks whose slots together are at most this large (they fit in L2) are reduced by every
// rank in full (one sync); larger ones are reduce-scattered and gathered (two syncs, 1/N of
// the reduction work each).
constexpr uint64_t kDirectReduceBytes = 256 * 1024;
// Copies and reductions above this size are split over the kernels' thread pool.
constexpr uint64_t kParallelBytes = 512 * 1024;
// A collective whose output takes at least this much writes it with streaming stores
// (copyStreaming): it does not stay in the caches for its reader anyway, and those stores skip
// the read of each line they overwrite. Smaller outputs stay in the caches for the next kernel.
constexpr uint64_t kStreamOutputBytes = 8 << 20;
// Largest chunk staged at once: small enough that a chunk written by one rank is still in the
// shared cache when the others read it, and that the phases of consecutive chunks overlap
// across ranks; large enough that the two syncs per chunk are a small cost.
constexpr uint64_t kMaxChunkBytes = 2 << 20;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // kMagic once the creator has filled in the rest
  uint32_t nLocal;
  uint32_t reserved;
  uint64_t slotBytes;
  uint64_t ringBytes;
  uint64_t totalBytes;
  std::atomic<uint32_t> unlinked;  // the creator has removed the name
  // The doorbell: waiters that have run out of spinning sleep on `bell` (a futex, shared
  // between processes) and count themselves in `sleepers`; whoever changes something a waiter
  // may wait for (an arrival, a ring's head or tail, a broken flag) increments `bell` and wakes
  // the sleepers, if any. So a sleeping waiter wakes when its peer arrives, not at the end of
  // a sleep, and spinning costs nothing once the ranks outnumber the cores.
  alignas(64) std::atomic<uint32_t> bell;
  std::atomic<uint32_t> sleepers;
};

struct alignas(128) RankControl {
  std::atomic<uint64_t> arrivals;  // sync points passed
  std::atomic<int32_t> pid;        // 0 until the rank has mapped the segment
  std::atomic<uint32_t> broken;    // the HcclResult with which the rank gave up, or 0
  // What the rank called, for its checked collectives in turn (double-buffered: a rank writes
  // the next one only after every rank has passed the current one's first sync point, which
  // each passes only after it has finished reading the previous one). Written before the
  // release store of `arrivals`, read after the acquire loads: no atomics needed.
  CallPrint calls[2];
  // Shadow execution's simulated clocks at a meeting (meetClocks), double-buffered by the
  // parity of the sync point for the same reason as `calls`.
  uint64_t clocks[2];
};

struct alignas(128) RingControl {
  std::atomic<uint64_t> head;  // bytes written (by the sender)
  alignas(64) std::atomic<uint64_t> tail;  // bytes read (by the receiver)
};

struct ShmSegmentLayout {
  uint64_t controls, rings, slots, ringData, total;

  ShmSegmentLayout(uint32_t n, uint64_t slotBytes, uint64_t ringBytes) {
    auto up = [](uint64_t v) { return (v + kPage - 1) / kPage * kPage; };
    controls = kPage;
    rings = up(controls + n * sizeof(RankControl));
    slots = up(rings + uint64_t(n) * n * sizeof(RingControl));
    ringData = slots + n * slotBytes;
    total = ringData + uint64_t(n) * n * ringBytes;
  }
};

namespace {

std::string errnoText() { return std::strerror(errno); }

RankControl* controls(char* base) {
  return reinterpret_cast<RankControl*>(base + kPage);
}

// The kernels' thread pool splits copies and reductions of at least kParallelBytes into
// `pieces` parts (the pool's threads shared among the node's ranks, so that N ranks do not
// start N times the machine's threads): one thread does not saturate memory bandwidth.
int g_pieces = 1;

// `stream`: the destination is a large collective's output (kStreamOutputBytes).
void copyBytes(void* dst, const void* src, uint64_t bytes, bool stream = false) {
  void (*const copy)(void*, const void*, uint64_t) =
      stream ? copyStreaming : [](void* d, const void* s, uint64_t n) { std::memcpy(d, s, n); };
  if (bytes < kParallelBytes || g_pieces <= 1) {
    copy(dst, src, bytes);
    return;
  }
  const int64_t grain = static_cast<int64_t>(std::max<uint64_t>(64 * 1024, bytes / g_pieces + 1));
  npu::kernels::parallel_for(0, static_cast<int64_t>(bytes), grain, [&](int64_t b, int64_t e) {
    copy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
  });
}

void reduceParallel(void* out, const std::vector<const void*>& in, uint64_t count,
                    HcclDataType dtype, HcclReduceOp op, uint32_t divisor,
                    void* copy = nullptr, bool streamCopy = false) {
  const size_t es = dtypeSize(dtype);
  if (count * es < kParallelBytes || g_pieces <= 1) {
    reduceInto(out, in.data(), static_cast<int>(in.size()), count, dtype, op, divisor, copy,
               streamCopy);
    return;
  }
  const int64_t grain = static_cast<int64_t>(std::max<uint64_t>(16 * 1024, count / g_pieces + 1));
  npu::kernels::parallel_for(0, static_cast<int64_t>(count), grain, [&](int64_t b, int64_t e) {
    std::vector<const void*> part(in.size());
    for (size_t j = 0; j < in.size(); ++j) part[j] = static_cast<const char*>(in[j]) + b * es;
    reduceInto(static_cast<char*>(out) + b * es, part.data(), static_cast<int>(part.size()),
               static_cast<uint64_t>(e - b), dtype, op, divisor,
               copy ? static_cast<char*>(copy) + b * es : nullptr, streamCopy);
  });
}

// Backs off in three stages: spinning (a peer that is a few microseconds behind), yielding
// (ranks share cores), then sleeping up to 1 ms (a peer that is seconds behind). Used while
// a communicator is created; collectives sleep on the doorbell instead (waitFor).
class Backoff {
 public:
  void pause() {
    ++n_;
    if (n_ < 256) {
      _mm_pause();
    } else if (n_ < 2048) {
      sched_yield();
    } else {
      const int us = static_cast<int>(std::min<uint64_t>(1000, (n_ - 2048) / 16 + 20));
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
  }

 private:
  uint64_t n_ = 0;
};

std::string secondsText(uint32_t s) { return std::to_string(s) + " s"; }

// Spins and yields this many times before a waiter sleeps on the doorbell.
constexpr int kSpins = 200;
constexpr int kYields = 50;

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  struct timespec ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void ringBell(SegmentHeader* h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the change before the bell
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->bell), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
  }
}

}  // namespace

char* ShmTransport::slot(uint32_t r, uint32_t half) const {
  ShmSegmentLayout layout(nLocal_, slotBytes_, ringBytes_);
  return base_ + layout.slots + r * slotBytes_ + half * halfBytes_;
}

std::string ShmTransport::rankList(const std::vector<uint32_t>& local) const {
  std::string s;
  for (size_t i = 0; i < local.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(globalRanks_[local[i]]);
  }
  return s;
}

Status ShmTransport::connect(const ShmSetup& setup, std::unique_ptr<ShmTransport>* out) {
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->name_ = setup.name;
  t->nLocal_ = static_cast<uint32_t>(setup.globalRanks.size());
  t->me_ = setup.localRank;
  t->globalRanks_ = setup.globalRanks;
  t->creator_ = setup.localRank == 0;
  const uint32_t n = t->nLocal_;
  const std::string& what = setup.description;
  auto timeoutText = [&] {
    return " within " + secondsText(setup.connectTimeoutSeconds) +
           "; raise HCCL_CONNECT_TIMEOUT if the other ranks are only slow to start";
  };

  int fd = -1;
  if (t->creator_) {
    // Collectives stage at most two chunks per rank; HCCL_BUFFSIZE bounds that and sizes the
    // point-to-point rings (a rank's HCCL_BUFFSIZE shared among its peers), which buffer
    // sends whose receiver has not arrived yet.
    const uint64_t slot = std::min<uint64_t>(2 * kMaxChunkBytes, setup.slotBytes) / 128 * 128;
    const uint64_t ring =
        std::max<uint64_t>(64 * 1024, setup.slotBytes / std::max<uint32_t>(1, n - 1)) / 64 * 64;
    ShmSegmentLayout layout(n, slot, ring);
    fd = shm_open(t->name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      return Status::error(HCCL_E_SYSCALL, what + ": shm_open(" + t->name_ +
                                               ") failed: " + errnoText() +
                                               " (was this root info used twice?)");
    }
    if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
      const std::string why = errnoText();
      close(fd);
      shm_unlink(t->name_.c_str());
      return Status::error(HCCL_E_MEMORY, what + ": cannot size the shared segment " +
                                              t->name_ + " to " +
                                              std::to_string(layout.total >> 20) +
                                              " MB: " + why + " (lower HCCL_BUFFSIZE)");
    }
    void* p = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                   fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errnoText();
      close(fd);
      shm_unlink(t->name_.c_str());
      return Status::error(HCCL_E_SYSCALL, what + ": mmap of " + t->name_ + " failed: " + why);
    }
    t->base_ = static_cast<char*>(p);
    t->mappedBytes_ = layout.total;
    auto* h = reinterpret_cast<SegmentHeader*>(t->base_);
    h->nLocal = n;
    h->slotBytes = slot;
    h->ringBytes = ring;
    h->totalBytes = layout.total;
    h->magic.store(kMagic, std::memory_order_release);
  } else {
    // Wait for the creator: the name appears, then its size, then the magic.
    Backoff backoff;
    for (;;) {
      fd = shm_open(t->name_.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(kPage)) {
          void* p = mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd, 0);
          if (p != MAP_FAILED) {
            auto* h = static_cast<SegmentHeader*>(p);
            const bool ready = h->magic.load(std::memory_order_acquire) == kMagic;
            const uint32_t nl = h->nLocal;
            const uint64_t total = h->totalBytes, slot = h->slotBytes, ring = h->ringBytes;
            munmap(p, kPage);
            if (ready) {
              if (nl != n) {
                close(fd);
                return Status::error(
                    HCCL_E_PARA, what + ": the communicator has " + std::to_string(nl) +
                                     " ranks on this node, but this rank was told " +
                                     std::to_string(n) +
                                     " (every rank must pass the same nRanks)");
              }
              void* all = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_NORESERVE, fd, 0);
              if (all == MAP_FAILED) {
                const std::string why = errnoText();
                close(fd);
                return Status::error(HCCL_E_SYSCALL,
                                     what + ": mmap of " + t->name_ + " failed: " + why);
              }
              t->base_ = static_cast<char*>(all);
              t->mappedBytes_ = total;
              t->slotBytes_ = slot;
              t->ringBytes_ = ring;
              break;
            }
          }
        }
        close(fd);
      } else if (errno != ENOENT) {
        return Status::error(HCCL_E_SYSCALL,
                             what + ": shm_open(" + t->name_ + ") failed: " + errnoText());
      }
      if (Clock::now() >= setup.connectDeadline) {
        return Status::error(HCCL_E_TIMEOUT, what + ": rank " +
                                                 std::to_string(setup.globalRanks[0]) +
                                                 " did not create the communicator" +
                                                 timeoutText());
      }
      backoff.pause();
    }
  }
  // Liveness: each rank holds a record lock on byte `rank` of the segment for as long as it
  // lives (the kernel drops it when the process dies, however it dies), so a waiting peer can
  // tell "slow" from "gone" without pids, which may belong to another pid namespace.
  t->fd_ = fd;
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = t->me_;
  lock.l_len = 1;
  if (fcntl(fd, F_SETLK, &lock) != 0) {
    return Status::error(HCCL_E_SYSCALL, what + ": cannot lock byte " + std::to_string(t->me_) +
                                             " of " + t->name_ + ": " + errnoText() +
                                             " (is another process using this rank?)");
  }
  auto* h = reinterpret_cast<SegmentHeader*>(t->base_);
  t->slotBytes_ = h->slotBytes;
  t->ringBytes_ = h->ringBytes;
  t->halfBytes_ = std::min<uint64_t>(kMaxChunkBytes, t->slotBytes_ / 2 / 64 * 64);
  g_pieces = std::max(1, npu::kernels::num_threads() / static_cast<int>(n));
  t->sendLocks_.reset(new std::mutex[n]);
  t->recvLocks_.reset(new std::mutex[n]);

  // Announce this rank, then wait for the others.
  RankControl* rc = controls(t->base_);
  int32_t expected = 0;
  if (!rc[t->me_].pid.compare_exchange_strong(expected, static_cast<int32_t>(getpid()))) {
    return Status::error(HCCL_E_PARA, what + ": rank " +
                                          std::to_string(setup.globalRanks[t->me_]) +
                                          " has already joined (pid " +
                                          std::to_string(expected) +
                                          "); every rank must pass a different rank number");
  }
  Backoff backoff;
  for (;;) {
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < n; ++r) {
      if (rc[r].pid.load(std::memory_order_acquire) == 0) missing.push_back(r);
    }
    if (missing.empty()) break;
    if (Clock::now() >= setup.connectDeadline) {
      return Status::error(HCCL_E_TIMEOUT, what + ": rank" + (missing.size() > 1 ? "s " : " ") +
                                               t->rankList(missing) + " did not join" +
                                               timeoutText());
    }
    backoff.pause();
  }
  // Every rank has mapped the segment: the name is no longer needed. The others wait for the
  // unlink, so that when init returns on any rank nothing is left to leak.
  if (t->creator_) {
    shm_unlink(t->name_.c_str());
    t->unlinked_ = true;
    h->unlinked.store(1, std::memory_order_release);
  }
  while (h->unlinked.load(std::memory_order_acquire) == 0) {
    if (Clock::now() >= setup.connectDeadline) {
      return Status::error(HCCL_E_TIMEOUT, what + ": rank " +
                                               std::to_string(setup.globalRanks[0]) +
                                               " stopped before it finished creating the "
                                               "communicator" + timeoutText());
    }
    backoff.pause();
  }
  *out = std::move(t);
  return Status::success();
}

ShmTransport::~ShmTransport() {
  if (creator_ && !unlinked_) shm_unlink(name_.c_str());
  if (base_) munmap(base_, mappedBytes_);
  if (fd_ >= 0) close(fd_);  // drops the liveness lock
}

SegmentHeader* ShmTransport::header() const { return reinterpret_cast<SegmentHeader*>(base_); }

bool ShmTransport::peerAlive(uint32_t r) const {
  struct flock probe = {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = r;
  probe.l_len = 1;
  if (fcntl(fd_, F_GETLK, &probe) != 0) return true;  // cannot tell: assume alive
  return probe.l_type != F_UNLCK;
}

void ShmTransport::markBroken(HcclResult code) {
  if (!base_) return;
  controls(base_)[me_].broken.store(code, std::memory_order_release);
  ringBell(header());
}

namespace {

// Waits until ready(); on the way out through an error, names the ranks missing() lists.
template <class Ready, class Missing, class Alive>
Status waitFor(Ready&& ready, Missing&& missing, Alive&& alive, SegmentHeader* header,
               RankControl* rc, uint32_t n, uint32_t me,
               const std::vector<uint32_t>& globalRanks, const OpContext& ctx,
               const char* verb) {
  Clock::time_point start{}, nextLiveness{};
  for (int round = 0;; ++round) {
    if (ready()) return Status::success();
    if (round < kSpins) {
      _mm_pause();
      continue;
    }
    if (round < kSpins + kYields) {
      sched_yield();
      continue;
    }
    // Sleep on the doorbell (at most 20 ms, to check the deadline, abort and liveness).
    header->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t bell = header->bell.load(std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready()) futexWait(&header->bell, bell, 20 * 1000 * 1000);
    header->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return Status::success();
    if (ctx.aborted && ctx.aborted->load(std::memory_order_acquire)) {
      return Status::error(HCCL_E_UNAVAIL,
                           ctx.description + ": the communicator was aborted (HcclCommAbort)");
    }
    // A peer that gave up ends this wait too. Name the first cause: an abort, else a timeout
    // (the peer timed out on the ranks this rank still waits for), else any failure.
    uint32_t culprit = n;
    auto rankOf = [&](uint32_t code) {
      for (uint32_t r = 0; r < n; ++r) {
        if (r != me && rc[r].broken.load(std::memory_order_acquire) == code) return r;
      }
      return n;
    };
    bool anyBroken = false;
    for (uint32_t r = 0; r < n && !anyBroken; ++r) {
      anyBroken = r != me && rc[r].broken.load(std::memory_order_acquire) != 0;
    }
    if (anyBroken) {
      if ((culprit = rankOf(HCCL_E_UNAVAIL)) < n) {
        return Status::error(HCCL_E_REMOTE, ctx.description + ": rank " +
                                                std::to_string(globalRanks[culprit]) +
                                                " aborted the communicator (HcclCommAbort)");
      }
      culprit = rankOf(HCCL_E_TIMEOUT);
      for (uint32_t r = 0; r < n && culprit == n; ++r) {
        if (r != me && rc[r].broken.load(std::memory_order_acquire) != 0) culprit = r;
      }
      const auto peerCode =
          static_cast<HcclResult>(rc[culprit].broken.load(std::memory_order_acquire));
      const std::vector<uint32_t> m = missing();
      std::string list;
      for (size_t i = 0; i < m.size(); ++i) list += (i ? ", " : "") + std::to_string(globalRanks[m[i]]);
      return Status::error(
          peerCode == HCCL_E_TIMEOUT ? HCCL_E_TIMEOUT : HCCL_E_REMOTE,
          ctx.description + ": rank" + (m.size() > 1 ? "s " : " ") + list + " did not " + verb +
              "; rank " + std::to_string(globalRanks[culprit]) + " gave up waiting (" +
              HcclGetErrorString(peerCode) +
              "), so this rank stops too; raise HCCL_EXEC_TIMEOUT if the peers are only slow");
    }
    // A wait that lasts checks every 50 ms whether the ranks it waits for still live.
    const Clock::time_point now = Clock::now();
    if (start == Clock::time_point{}) {
      start = now;
      nextLiveness = now + std::chrono::milliseconds(50);
    } else if (now >= nextLiveness) {
      nextLiveness = now + std::chrono::milliseconds(50);
      std::string dead;  // (after the broken flags: a rank that gave up, then exited, is named as such)
      for (uint32_t r : missing()) {
        if (!alive(r)) dead += (dead.empty() ? "" : ", ") + std::to_string(globalRanks[r]);
      }
      if (!dead.empty()) {
        const bool several = dead.find(',') != std::string::npos;
        return Status::error(
            HCCL_E_TIMEOUT,
            ctx.description + ": rank" + (several ? "s " : " ") + dead + " did not " + verb +
                ": " + (several ? "their processes have" : "its process has") +
                " exited or destroyed the communicator (seen before the deadline, after " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count()) +
                " ms of waiting)");
      }
    }
    if (ctx.expired(Clock::now())) {
      const std::vector<uint32_t> m = missing();
      std::string list;
      for (size_t i = 0; i < m.size(); ++i) list += (i ? ", " : "") + std::to_string(globalRanks[m[i]]);
      return Status::error(
          HCCL_E_TIMEOUT, ctx.description + ": rank" + (m.size() > 1 ? "s " : " ") + list +
                              " did not " + verb + " within " + std::to_string(ctx.timeoutSeconds) +
                              " s; raise HCCL_EXEC_TIMEOUT if the peers are only slow");
    }
  }
}

}  // namespace

std::string CallPrint::text() const {
  static const char* const kApi[] = {"(no collective)", "HcclAllReduce", "HcclReduce",
                                     "HcclBroadcast", "HcclAllGather", "HcclReduceScatter",
                                     "HcclAlltoAll(V)", "HcclBarrier"};
  const auto k = static_cast<uint32_t>(kind);
  std::string t = std::string(k < sizeof kApi / sizeof *kApi ? kApi[k] : "unknown") +
                  " (sequence " + std::to_string(sequence);
  const auto dt = static_cast<HcclDataType>(dtype);
  switch (kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduceScatter:
      t += ", " + std::to_string(count) + " elements " + dtypeName(dt) +
           (kind == CallKind::kReduceScatter ? " per rank" : "") + ", " +
           reduceOpName(static_cast<HcclReduceOp>(op));
      break;
    case CallKind::kReduce:
      t += ", " + std::to_string(count) + " elements " + dtypeName(dt) + ", " +
           reduceOpName(static_cast<HcclReduceOp>(op)) + ", root " + std::to_string(root);
      break;
    case CallKind::kBroadcast:
      t += ", " + std::to_string(count) + " bytes, root " + std::to_string(root);
      break;
    case CallKind::kAllGather:
      t += ", " + std::to_string(count) + " bytes per rank";
      break;
    default: break;
  }
  return t + ")";
}

void ShmTransport::expectCall(const CallPrint& call) {
  expected_ = call;
  checkNext_ = true;
}

Status ShmTransport::arriveAndWait(OpContext& ctx) {
  if (!checkNext_) return arrive(ctx);
  // The first sync point of a checked collective: publish what this rank called, and once
  // every rank has arrived, compare. Every rank sees every record, so all of them fail here
  // together, each naming every rank's call.
  checkNext_ = false;
  RankControl* rc = controls(base_);
  const uint32_t parity = static_cast<uint32_t>(checkedCalls_++ & 1);
  rc[me_].calls[parity] = expected_;
  if (Status s = arrive(ctx); !s.ok()) return s;
  bool same = true;
  for (uint32_t r = 1; r < nLocal_ && same; ++r) {
    same = rc[r].calls[parity].sameCall(rc[0].calls[parity]);
  }
  if (same) return Status::success();
  std::string calls;
  for (uint32_t r = 0; r < nLocal_; ++r) {
    calls += (r ? "; rank " : "rank ") + std::to_string(globalRanks_[r]) + " called " +
             rc[r].calls[parity].text();
  }
  return Status::error(
      HCCL_E_PARA,
      ctx.description + ": the ranks called different collectives: " + calls +
          ". Every rank must call the same collectives in the same order, with the same "
          "sizes, dtypes, reduce ops and roots: look for a collective that only some ranks run "
          "(under a condition on the rank or on data), or a tensor whose shape differs between "
          "ranks");
}

Status ShmTransport::arrive(OpContext& ctx) {
  RankControl* rc = controls(base_);
  const uint64_t target = ++arrivals_;
  // NPU_SIM_SCHEDULE=chaos: ranks arrive late by amounts drawn for (rank, arrival).
  npuSimSchedulePoint(0, (uint64_t(globalRanks_[me_]) << 40) ^ target);
  rc[me_].arrivals.store(target, std::memory_order_release);
  ringBell(header());
  return waitFor(
      [&] {
        for (uint32_t r = 0; r < nLocal_; ++r) {
          if (rc[r].arrivals.load(std::memory_order_acquire) < target) return false;
        }
        return true;
      },
      [&] {
        std::vector<uint32_t> m;
        for (uint32_t r = 0; r < nLocal_; ++r) {
          if (rc[r].arrivals.load(std::memory_order_acquire) < target) m.push_back(r);
        }
        return m;
      },
      [&](uint32_t r) { return peerAlive(r); }, header(), rc, nLocal_, me_, globalRanks_, ctx,
      "arrive");
}

// One chunk of a reduction. root < 0: every rank gets the result (allreduce).
Status ShmTransport::reduceChunk(const void* in, void* out, uint64_t count, HcclDataType dtype,
                                 HcclReduceOp op, uint32_t avgDivisor, int root, bool streamOut,
                                 OpContext& ctx) {
  const size_t es = dtypeSize(dtype);
  const uint32_t h = nextHalf();
  const char* src = static_cast<const char*>(in);
  if (count * es * nLocal_ <= kDirectReduceBytes) {
    copyBytes(slot(me_, h), in, count * es);
    if (Status s = arriveAndWait(ctx); !s.ok()) return s;
    if (root < 0 || static_cast<uint32_t>(root) == me_) {
      std::vector<const void*> slots(nLocal_);
      for (uint32_t r = 0; r < nLocal_; ++r) slots[r] = slot(r, h);
      reduceInto(out, slots.data(), static_cast<int>(nLocal_), count, dtype, op, avgDivisor);
    }
    return Status::success();
  }
  // Reduce-scatter: slice r (a multiple of 64 bytes, except the last) is rank r's. Only the
  // other ranks read a rank's input outside its own slice, so only that part is staged; the
  // rank reads its own slice from its input.
  const uint64_t align = std::max<uint64_t>(1, 64 / es);
  const uint64_t per = (count + nLocal_ - 1) / nLocal_;
  const uint64_t slice = (per + align - 1) / align * align;
  auto bounds = [&](uint32_t r) {
    const uint64_t b = std::min(count, r * slice);
    return std::pair<uint64_t, uint64_t>(b, std::min(count, b + slice));
  };
  const auto [myB, myE] = bounds(me_);
  copyBytes(slot(me_, h), src, myB * es);
  copyBytes(slot(me_, h) + myE * es, src + myE * es, (count - myE) * es);
  if (Status s = arriveAndWait(ctx); !s.ok()) return s;
  if (myE > myB) {
    std::vector<const void*> parts(nLocal_);
    for (uint32_t r = 0; r < nLocal_; ++r) {
      parts[r] = r == me_ ? src + myB * es : slot(r, h) + myB * es;
    }
    // This rank's slice goes to the others through its slot and straight to its output.
    reduceParallel(slot(me_, h) + myB * es, parts, myE - myB, dtype, op, avgDivisor,
                   out ? static_cast<char*>(out) + myB * es : nullptr, streamOut);
  }
  if (Status s = arriveAndWait(ctx); !s.ok()) return s;
  if (root < 0 || static_cast<uint32_t>(root) == me_) {
    for (uint32_t r = 0; r < nLocal_; ++r) {
      if (r == me_) continue;
      auto [b, e] = bounds(r);
      if (e > b) {
        copyBytes(static_cast<char*>(out) + b * es, slot(r, h) + b * es, (e - b) * es, streamOut);
      }
    }
  }
  return Status::success();
}

Status ShmTransport::allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                               HcclReduceOp op, uint32_t avgDivisor, OpContext& ctx) {
  return reduce(in, out, count, dtype, op, avgDivisor, UINT32_MAX, ctx);
}

Status ShmTransport::reduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                            HcclReduceOp op, uint32_t avgDivisor, uint32_t root,
                            OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  const size_t es = dtypeSize(dtype);
  const int rootIndex = root == UINT32_MAX ? -1 : static_cast<int>(root);
  if (nLocal_ == 1) {
    if (rootIndex < 0 || root == me_) {
      const void* one[1] = {in};
      reduceInto(out, one, 1, count, dtype, op, avgDivisor);
    }
    return Status::success();
  }
  const uint64_t chunk = std::max<uint64_t>(1, halfBytes_ / es);
  const bool streamOut = count * es >= kStreamOutputBytes;
  for (uint64_t b = 0; b < count; b += chunk) {
    const uint64_t m = std::min(chunk, count - b);
    void* o = (rootIndex < 0 || root == me_) ? static_cast<char*>(out) + b * es : nullptr;
    if (Status s = reduceChunk(static_cast<const char*>(in) + b * es, o, m, dtype, op,
                               avgDivisor, rootIndex, streamOut, ctx);
        !s.ok()) {
      return s;
    }
  }
  return Status::success();
}

Status ShmTransport::broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  if (nLocal_ == 1) return Status::success();
  for (uint64_t b = 0; b < bytes; b += halfBytes_) {
    const uint64_t m = std::min(halfBytes_, bytes - b);
    const uint32_t h = nextHalf();
    if (me_ == root) copyBytes(slot(root, h), static_cast<char*>(buf) + b, m);
    if (Status s = arriveAndWait(ctx); !s.ok()) return s;
    if (me_ != root) {
      copyBytes(static_cast<char*>(buf) + b, slot(root, h), m, bytes >= kStreamOutputBytes);
    }
  }
  return Status::success();
}

Status ShmTransport::allGather(const void* in, void* out, uint64_t bytesPerRank,
                               OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  char* o = static_cast<char*>(out);
  if (nLocal_ == 1) {
    if (o != in) std::memmove(o, in, bytesPerRank);
    return Status::success();
  }
  for (uint64_t b = 0; b < bytesPerRank; b += halfBytes_) {
    const uint64_t m = std::min(halfBytes_, bytesPerRank - b);
    const uint32_t h = nextHalf();
    copyBytes(slot(me_, h), static_cast<const char*>(in) + b, m);
    if (Status s = arriveAndWait(ctx); !s.ok()) return s;
    for (uint32_t r = 0; r < nLocal_; ++r) {
      copyBytes(o + r * bytesPerRank + b, slot(r, h), m,
                bytesPerRank * nLocal_ >= kStreamOutputBytes);
    }
  }
  return Status::success();
}

Status ShmTransport::reduceScatter(const void* in, void* out, uint64_t recvCount,
                                   HcclDataType dtype, HcclReduceOp op, uint32_t avgDivisor,
                                   OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  const size_t es = dtypeSize(dtype);
  const char* src = static_cast<const char*>(in);
  if (nLocal_ == 1) {
    const void* one[1] = {in};
    reduceInto(out, one, 1, recvCount, dtype, op, avgDivisor);
    return Status::success();
  }
  // A chunk stages the same element range of every block: nLocal pieces of m elements.
  const uint64_t chunk = std::max<uint64_t>(1, halfBytes_ / (es * nLocal_));
  for (uint64_t b = 0; b < recvCount; b += chunk) {
    const uint64_t m = std::min(chunk, recvCount - b);
    const uint32_t h = nextHalf();
    for (uint32_t j = 0; j < nLocal_; ++j) {
      copyBytes(slot(me_, h) + j * m * es, src + (j * recvCount + b) * es, m * es);
    }
    if (Status s = arriveAndWait(ctx); !s.ok()) return s;
    std::vector<const void*> parts(nLocal_);
    for (uint32_t r = 0; r < nLocal_; ++r) parts[r] = slot(r, h) + me_ * m * es;
    reduceParallel(static_cast<char*>(out) + b * es, parts, m, dtype, op, avgDivisor);
  }
  return Status::success();
}

Status ShmTransport::allToAllV(const void* in, const uint64_t* sendBytes,
                               const uint64_t* sendOffsets, void* out,
                               const uint64_t* recvBytes, const uint64_t* recvOffsets,
                               OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (nLocal_ == 1) {
    if (sendBytes[0] != recvBytes[0]) {
      return Status::error(HCCL_E_PARA, ctx.description + ": rank sends " +
                                            std::to_string(sendBytes[0]) +
                                            " bytes to itself but expects " +
                                            std::to_string(recvBytes[0]));
    }
    std::memmove(dst + recvOffsets[0], src + sendOffsets[0], sendBytes[0]);
    return Status::success();
  }
  // First every rank publishes its send sizes, so all agree on the number of rounds and each
  // receiver can check the sizes it expects.
  const uint32_t h0 = nextHalf();
  std::memcpy(slot(me_, h0), sendBytes, nLocal_ * sizeof(uint64_t));
  if (Status s = arriveAndWait(ctx); !s.ok()) return s;
  const uint64_t per = std::max<uint64_t>(64, halfBytes_ / nLocal_ / 64 * 64);
  uint64_t rounds = 0;
  std::string mismatch;
  for (uint32_t r = 0; r < nLocal_; ++r) {
    const auto* sizes = reinterpret_cast<const uint64_t*>(slot(r, h0));
    for (uint32_t q = 0; q < nLocal_; ++q) rounds = std::max(rounds, (sizes[q] + per - 1) / per);
    if (sizes[me_] != recvBytes[r] && mismatch.empty()) {
      mismatch = ctx.description + ": rank " + std::to_string(globalRanks_[r]) + " sends " +
                 std::to_string(sizes[me_]) + " bytes to this rank, but it expects " +
                 std::to_string(recvBytes[r]) + " (recvCounts must match the peers' sendCounts)";
    }
  }
  for (uint64_t k = 0; k < rounds; ++k) {
    const uint32_t h = nextHalf();
    for (uint32_t q = 0; q < nLocal_; ++q) {
      const uint64_t b = k * per;
      if (b < sendBytes[q]) {
        copyBytes(slot(me_, h) + q * per, src + sendOffsets[q] + b,
                  std::min(per, sendBytes[q] - b));
      }
    }
    if (Status s = arriveAndWait(ctx); !s.ok()) return s;
    if (!mismatch.empty()) continue;  // keep the rounds in step, then report
    for (uint32_t r = 0; r < nLocal_; ++r) {
      const uint64_t b = k * per;
      if (b < recvBytes[r]) {
        copyBytes(dst + recvOffsets[r] + b, slot(r, h) + me_ * per,
                  std::min(per, recvBytes[r] - b));
      }
    }
  }
  if (!mismatch.empty()) return Status::error(HCCL_E_PARA, mismatch);
  return Status::success();
}

Status ShmTransport::barrier(OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  if (nLocal_ == 1) return Status::success();
  return arriveAndWait(ctx);
}

Status ShmTransport::meetClocks(uint64_t mine, uint64_t* latest, OpContext& ctx) {
  std::lock_guard<std::mutex> lock(collectiveLock_);
  *latest = mine;
  if (nLocal_ == 1) return Status::success();
  RankControl* rc = controls(base_);
  const uint32_t parity = static_cast<uint32_t>((arrivals_ + 1) & 1);  // of the coming arrival
  rc[me_].clocks[parity] = mine;
  if (Status s = arriveAndWait(ctx); !s.ok()) return s;
  for (uint32_t r = 0; r < nLocal_; ++r) *latest = std::max(*latest, rc[r].clocks[parity]);
  return Status::success();
}

Status ShmTransport::ringWrite(uint32_t peer, const void* data, uint64_t bytes, OpContext& ctx) {
  ShmSegmentLayout layout(nLocal_, slotBytes_, ringBytes_);
  auto* rc = reinterpret_cast<RingControl*>(base_ + layout.rings) + me_ * nLocal_ + peer;
  char* ring = base_ + layout.ringData + (uint64_t(me_) * nLocal_ + peer) * ringBytes_;
  uint64_t head = rc->head.load(std::memory_order_relaxed);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    uint64_t tail = rc->tail.load(std::memory_order_acquire);
    if (head - tail == ringBytes_) {
      Status s = waitFor(
          [&] {
            tail = rc->tail.load(std::memory_order_acquire);
            return head - tail < ringBytes_;
          },
          [&] { return std::vector<uint32_t>{peer}; }, [&](uint32_t r) { return peerAlive(r); },
          header(), controls(base_), nLocal_, me_,
          globalRanks_, ctx, "receive");
      if (!s.ok()) return s;
    }
    const uint64_t pos = head % ringBytes_;
    const uint64_t k = std::min({bytes, ringBytes_ - (head - tail), ringBytes_ - pos});
    copyBytes(ring + pos, p, k);
    p += k;
    bytes -= k;
    head += k;
    rc->head.store(head, std::memory_order_release);
    ringBell(header());
  }
  return Status::success();
}

Status ShmTransport::ringRead(uint32_t peer, void* data, uint64_t bytes, OpContext& ctx) {
  ShmSegmentLayout layout(nLocal_, slotBytes_, ringBytes_);
  auto* rc = reinterpret_cast<RingControl*>(base_ + layout.rings) + peer * nLocal_ + me_;
  const char* ring = base_ + layout.ringData + (uint64_t(peer) * nLocal_ + me_) * ringBytes_;
  uint64_t tail = rc->tail.load(std::memory_order_relaxed);
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    uint64_t head = rc->head.load(std::memory_order_acquire);
    if (head == tail) {
      Status s = waitFor(
          [&] {
            head = rc->head.load(std::memory_order_acquire);
            return head != tail;
          },
          [&] { return std::vector<uint32_t>{peer}; }, [&](uint32_t r) { return peerAlive(r); },
          header(), controls(base_), nLocal_, me_,
          globalRanks_, ctx, "send");
      if (!s.ok()) return s;
    }
    const uint64_t pos = tail % ringBytes_;
    const uint64_t k = std::min({bytes, head - tail, ringBytes_ - pos});
    if (p) {
      copyBytes(p, ring + pos, k);
      p += k;
    }
    bytes -= k;
    tail += k;
    rc->tail.store(tail, std::memory_order_release);
    ringBell(header());
  }
  return Status::success();
}

Status ShmTransport::send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  std::lock_guard<std::mutex> lock(sendLocks_[peer]);
  const uint64_t header = bytes;
  if (Status s = ringWrite(peer, &header, sizeof header, ctx); !s.ok()) return s;
  if (Status s = ringWrite(peer, buf, bytes, ctx); !s.ok()) return s;
  static const char kZeros[8] = {};
  return ringWrite(peer, kZeros, (8 - bytes % 8) % 8, ctx);
}

Status ShmTransport::recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  std::lock_guard<std::mutex> lock(recvLocks_[peer]);
  uint64_t header = 0;
  if (Status s = ringRead(peer, &header, sizeof header, ctx); !s.ok()) return s;
  if (header != bytes) {
    return Status::error(HCCL_E_PARA, ctx.description + ": rank " +
                                          std::to_string(globalRanks_[peer]) + " sent " +
                                          std::to_string(header) + " bytes, but " +
                                          std::to_string(bytes) +
                                          " were expected (send and recv counts and dtypes "
                                          "must match)");
  }
  if (Status s = ringRead(peer, buf, bytes, ctx); !s.ok()) return s;
  return ringRead(peer, nullptr, (8 - bytes % 8) % 8, ctx);
}

}  // namespace npu::ccl
