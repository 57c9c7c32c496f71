// Allreduce latency and bus bandwidth of libnpu_ccl on 2 and 4 forked ranks of one node,
// float32 sum, 4 KiB .. 256 MiB, next to a single-process memcpy of the same size measured in
// the same run (the machine's copy speed, so figures from different machines compare as
// ratios).
//
// Bus bandwidth is NCCL's definition: bytes * 2 (n - 1) / n / time, the data each rank must
// move in a bandwidth-optimal allreduce. A plain program (ranks are processes, which Google
// Benchmark does not model); it accepts and ignores Google Benchmark's flags, so `make bench`
// runs it like the others. Usage: ccl_bench [--ranks=2,4] [--max-mib=256]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "npu/hccl.h"
#include "npu/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Shared with the parent: rank 0's time per allreduce for each size.
struct Results {
  double perCall[32];
  int ok;
};

std::vector<size_t> sizes(size_t maxBytes) {
  std::vector<size_t> s;
  for (size_t b = 4 << 10; b <= maxBytes; b *= 4) {
    s.push_back(b);
    if (b == (16u << 20) && maxBytes >= (32u << 20)) s.push_back(32u << 20);
  }
  return s;
}

// Repeats fn until ~budget seconds have passed (at least 3 times); returns seconds per call.
template <class Fn>
double timeCalls(Fn&& fn, double budget) {
  fn();  // warm-up: first-touch of buffers and staging pages
  int reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    const double t = seconds(t0, Clock::now());
    if (t >= budget || reps >= (1 << 20)) return t / reps;
    reps = t < budget / 16 ? reps * 8 : std::max(reps + 1, static_cast<int>(reps * budget / t));
  }
}

void runRank(uint32_t rank, uint32_t n, const HcclRootInfo& root, const std::vector<size_t>& ss,
             Results* out) {
  npuSetDevice(static_cast<int>(rank));
  npuStream_t stream;
  npuStreamCreate(&stream);
  HcclComm comm;
  if (HcclCommInitRootInfo(n, &root, rank, &comm) != HCCL_SUCCESS) {
    std::fprintf(stderr, "rank %u: %s\n", rank, HcclGetLastErrorMessage());
    _exit(1);
  }
  const size_t maxBytes = ss.back();
  void *send, *recv;
  npuMalloc(&send, maxBytes);
  npuMalloc(&recv, maxBytes);
  npuMemset(send, 0, maxBytes);
  npuMemset(recv, 0, maxBytes);
  for (size_t k = 0; k < ss.size(); ++k) {
    const uint64_t count = ss[k] / 4;
    // Every rank runs the same number of calls: rank 0 picks it and broadcasts it.
    int reps = 0;
    if (rank == 0) {
      const double t = timeCalls([&] {
        HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
        npuStreamSynchronize(stream);
      }, 0.0);  // one warm-up + one call
      reps = static_cast<int>(std::clamp(0.3 / std::max(t, 1e-7), 3.0, 20000.0));
    } else {
      for (int i = 0; i < 2; ++i) {
        HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
      }
    }
    void* repsBuf;
    npuMalloc(&repsBuf, sizeof(int));
    npuMemcpy(repsBuf, &reps, sizeof reps, npuMemcpyHostToDevice);
    HcclBroadcast(repsBuf, 1, HCCL_DATA_TYPE_INT32, 0, comm, stream);
    npuStreamSynchronize(stream);
    npuMemcpy(&reps, repsBuf, sizeof reps, npuMemcpyDeviceToHost);
    npuFree(repsBuf);
    HcclBarrier(comm, stream);
    npuStreamSynchronize(stream);
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
    }
    if (npuStreamSynchronize(stream) != npuSuccess) {
      std::fprintf(stderr, "rank %u: %s\n", rank, npuGetLastErrorMessage());
      _exit(1);
    }
    const double t = seconds(t0, Clock::now()) / reps;
    if (rank == 0) out->perCall[k] = t;
  }
  if (rank == 0) out->ok = 1;
  npuFree(send);
  npuFree(recv);
  HcclCommDestroy(comm);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint32_t> rankCounts = {2, 4};
  size_t maxBytes = 256u << 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) {
      rankCounts.clear();
      for (const char* p = argv[i] + 8; *p;) {
        rankCounts.push_back(static_cast<uint32_t>(std::strtoul(p, const_cast<char**>(&p), 10)));
        if (*p == ',') ++p;
      }
    } else if (std::strncmp(argv[i], "--max-mib=", 10) == 0) {
      maxBytes = std::strtoull(argv[i] + 10, nullptr, 10) << 20;
    }  // anything else (Google Benchmark's flags) is ignored
  }
  const std::vector<size_t> ss = sizes(maxBytes);

  // The machine's single-thread copy speed for each size, before any fork (no runtime here).
  std::vector<double> copyTime(ss.size());
  {
    std::vector<char> a(maxBytes, 1), b(maxBytes, 2);
    for (size_t k = 0; k < ss.size(); ++k) {
      copyTime[k] = timeCalls([&] { std::memcpy(b.data(), a.data(), ss[k]); }, 0.05);
    }
  }

  std::printf("allreduce float32 sum, libnpu_ccl shared memory; busbw = bytes*2(n-1)/n/time\n");
  std::printf("%5s %10s %12s %12s %14s\n", "ranks", "bytes", "latency_us", "busbw_GB/s",
              "memcpy_GB/s");
  for (uint32_t n : rankCounts) {
    auto* results = static_cast<Results*>(mmap(nullptr, sizeof(Results), PROT_READ | PROT_WRITE,
                                                MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    std::memset(results, 0, sizeof *results);
    HcclRootInfo root;
    HcclGetRootInfo(&root);
    std::vector<pid_t> pids;
    for (uint32_t r = 0; r < n; ++r) {
      const pid_t pid = fork();
      if (pid == 0) runRank(r, n, root, ss, results);
      pids.push_back(pid);
    }
    int failures = 0;
    for (pid_t p : pids) {
      int status = 0;
      waitpid(p, &status, 0);
      failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (failures || !results->ok) {
      std::fprintf(stderr, "%u ranks: %d rank(s) failed\n", n, failures);
      return 1;
    }
    for (size_t k = 0; k < ss.size(); ++k) {
      const double t = results->perCall[k];
      const double busbw = ss[k] * 2.0 * (n - 1) / n / t / 1e9;
      std::printf("%5u %10zu %12.1f %12.2f %14.2f\n", n, ss[k], t * 1e6, busbw,
                  ss[k] / copyTime[k] / 1e9);
    }
    std::fflush(stdout);
    munmap(results, sizeof(Results));
  }
  return 0;
}
