// Helpers of the collectives tests: ranks as forked processes, deterministic inputs and an
// exact reference.
//
// Every rank is a fork()ed child that makes its own runtime state (the parent never touches
// the runtime before forking). A child reports its failed checks through a pipe; the parent
// turns them into test failures. Inputs are a hash of (seed, rank, index), so every rank can
// compute every other rank's input and hence the exact expected result on its own.
#pragma once

#include <gtest/gtest.h>
#include <immintrin.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "npu/hccl.h"
#include "npu/runtime.h"

namespace ccltest {

// One rank's view inside its child process.
struct Rank {
  uint32_t rank = 0;
  uint32_t n = 0;
  HcclRootInfo root{};
  HcclComm comm = nullptr;
  npuStream_t stream = nullptr;
  std::string errors;

  void fail(const std::string& what) {
    if (errors.size() < 4000) errors += "rank " + std::to_string(rank) + ": " + what + "\n";
  }
  bool check(bool ok, const std::string& what) {
    if (!ok) fail(what);
    return ok;
  }
  bool ok(HcclResult r, const char* call) {
    if (r != HCCL_SUCCESS) {
      fail(std::string(call) + " returned " + HcclGetErrorString(r) + ": " +
           HcclGetLastErrorMessage());
    }
    return r == HCCL_SUCCESS;
  }
  bool sync(const char* what) {
    const npuError_t e = npuStreamSynchronize(stream);
    if (e != npuSuccess) {
      fail(std::string(what) + ": npuStreamSynchronize: " + npuGetErrorName(e) + ": " +
           npuGetLastErrorMessage());
    }
    return e == npuSuccess;
  }
};

struct RunOptions {
  std::vector<std::pair<std::string, std::string>> env;  // set in every child
  bool init = true;        // make the communicator before calling fn
  int limitSeconds = 60;   // the parent kills children still running after this
};

// Runs fn in n forked ranks; returns each rank's failures ("" when it passed).
inline std::vector<std::string> runRanks(uint32_t n, const std::function<void(Rank&)>& fn,
                                         const RunOptions& options = {}) {
  HcclRootInfo root;
  if (HcclGetRootInfo(&root) != HCCL_SUCCESS) return {"HcclGetRootInfo failed"};
  std::vector<pid_t> pids(n);
  std::vector<int> pipes(n);
  for (uint32_t r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return {"pipe failed"};
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      Rank me;
      me.rank = r;
      me.n = n;
      me.root = root;
      npuSetDevice(static_cast<int>(r % 8));
      if (npuStreamCreate(&me.stream) != npuSuccess) me.fail("npuStreamCreate failed");
      if (options.init) me.ok(HcclCommInitRootInfo(n, &root, r, &me.comm), "HcclCommInitRootInfo");
      if (me.errors.empty()) fn(me);
      if (me.comm) HcclCommDestroy(me.comm);
      const std::string& e = me.errors;
      if (!e.empty() && write(fds[1], e.data(), e.size()) < 0) _exit(3);
      close(fds[1]);
      _exit(e.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
  }
  std::vector<std::string> out(n);
  std::vector<bool> done(n, false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.limitSeconds);
  uint32_t left = n;
  while (left > 0) {
    for (uint32_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        char buf[4096];
        ssize_t k;
        while ((k = read(pipes[r], buf, sizeof buf)) > 0) out[r].append(buf, k);
        close(pipes[r]);
        if (!WIFEXITED(status)) {
          out[r] += "rank " + std::to_string(r) + " died (signal " +
                    std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : -1) + ")\n";
        } else if (WEXITSTATUS(status) != 0 && out[r].empty()) {
          out[r] = "rank " + std::to_string(r) + " exited with " +
                   std::to_string(WEXITSTATUS(status)) + "\n";
        }
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (uint32_t r = 0; r < n; ++r) {
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          close(pipes[r]);
          out[r] += "rank " + std::to_string(r) + " hung: killed after " +
                    std::to_string(options.limitSeconds) + " s\n";
          done[r] = true;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return out;
}

#define EXPECT_RANKS_PASS(results)                                   \
  do {                                                               \
    const auto& results_ = (results);                                \
    for (size_t r_ = 0; r_ < results_.size(); ++r_) {                \
      EXPECT_EQ(results_[r_], "") << "rank " << r_ << " failed";     \
    }                                                                \
  } while (0)

// ---- data --------------------------------------------------------------------------------

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline const HcclDataType kAllDtypes[] = {
    HCCL_DATA_TYPE_INT8,   HCCL_DATA_TYPE_INT16,  HCCL_DATA_TYPE_INT32, HCCL_DATA_TYPE_FP16,
    HCCL_DATA_TYPE_FP32,   HCCL_DATA_TYPE_INT64,  HCCL_DATA_TYPE_UINT64, HCCL_DATA_TYPE_UINT8,
    HCCL_DATA_TYPE_UINT16, HCCL_DATA_TYPE_UINT32, HCCL_DATA_TYPE_FP64,  HCCL_DATA_TYPE_BFP16,
    HCCL_DATA_TYPE_BOOL};
inline const HcclReduceOp kAllOps[] = {HCCL_REDUCE_SUM, HCCL_REDUCE_PROD, HCCL_REDUCE_MAX,
                                       HCCL_REDUCE_MIN, HCCL_REDUCE_AVG};

inline size_t sizeOf(HcclDataType t) {
  switch (t) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: case HCCL_DATA_TYPE_BOOL: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16: case HCCL_DATA_TYPE_FP16:
    case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32: case HCCL_DATA_TYPE_FP32: return 4;
    default: return 8;
  }
}

// Conversions written here, apart from the library's: F16C for float16, bit arithmetic for
// bfloat16 (round to nearest even).
__attribute__((target("f16c"))) inline float halfToFloat(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) inline uint16_t floatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}
inline float bf16ToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
inline uint16_t floatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (f != f) return 0x7fc0;
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

// A float input: multiples of 1/64 in [-4, 4] (products stay finite: [0.5, 2] for prod).
// Exact mode: every fold order gives the same bits (sums of multiples of 1/64 and products of
// powers of two are exact), for paths that do not fold in rank order (several nodes).
inline bool g_exactFloats = false;

inline double floatValue(uint64_t h, HcclReduceOp op) {
  if (op == HCCL_REDUCE_PROD && g_exactFloats) return (h % 3 == 0) ? 0.5 : (h % 3 == 1) ? 1.0 : 2.0;
  if (op == HCCL_REDUCE_PROD) return 0.5 + (h % 97) / 64.0;
  return (static_cast<int64_t>(h % 513) - 256) / 64.0;
}

// Element i of rank r's input, written as dtype t into dst.
inline void storeInput(HcclDataType t, HcclReduceOp op, uint64_t seed, uint32_t r, uint64_t i,
                       void* dst) {
  const uint64_t h = mix(seed * 1000003 + r * 7919 + mix(i));
  switch (t) {
    case HCCL_DATA_TYPE_FP32: { float v = static_cast<float>(floatValue(h, op)); std::memcpy(dst, &v, 4); break; }
    case HCCL_DATA_TYPE_FP64: { double v = floatValue(h, op) + (g_exactFloats ? 0 : (h >> 40) * 1e-12); std::memcpy(dst, &v, 8); break; }
    case HCCL_DATA_TYPE_FP16: { uint16_t v = floatToHalf(static_cast<float>(floatValue(h, op))); std::memcpy(dst, &v, 2); break; }
    case HCCL_DATA_TYPE_BFP16: { uint16_t v = floatToBf16(static_cast<float>(floatValue(h, op) * 1.37)); std::memcpy(dst, &v, 2); break; }
    case HCCL_DATA_TYPE_BOOL: { uint8_t v = (h >> 7) & 1; std::memcpy(dst, &v, 1); break; }
    default: std::memcpy(dst, &h, sizeOf(t)); break;  // integers: any bits (sums wrap)
  }
}

inline std::vector<uint8_t> makeInput(HcclDataType t, HcclReduceOp op, uint64_t seed,
                                      uint32_t r, uint64_t count) {
  std::vector<uint8_t> v(count * sizeOf(t) + 1);
  for (uint64_t i = 0; i < count; ++i) storeInput(t, op, seed, r, i, v.data() + i * sizeOf(t));
  return v;
}

template <class T, class A>
A foldOne(A a, A b, HcclReduceOp op) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case HCCL_REDUCE_SUM: case HCCL_REDUCE_AVG: return static_cast<A>(U(a) + U(b));
      case HCCL_REDUCE_PROD: return static_cast<A>(static_cast<U>(uint64_t(U(a)) * uint64_t(U(b))));
      case HCCL_REDUCE_MAX: return std::max(a, b);
      default: return std::min(a, b);
    }
  } else {
    switch (op) {
      case HCCL_REDUCE_SUM: case HCCL_REDUCE_AVG: return a + b;
      case HCCL_REDUCE_PROD: return a * b;
      case HCCL_REDUCE_MAX: return std::max(a, b);
      default: return std::min(a, b);
    }
  }
}

// Element i of the reduction over ranks 0..n-1 (folded in rank order), into dst.
inline void referenceElement(HcclDataType t, HcclReduceOp op, uint64_t seed, uint32_t n,
                             uint64_t i, void* dst) {
  uint8_t raw[8];
  auto input = [&](uint32_t r) {
    storeInput(t, op, seed, r, i, raw);
    return raw;
  };
  auto integer = [&](auto zero) {
    using A = decltype(zero);
    A acc;
    std::memcpy(&acc, input(0), sizeof(A));
    for (uint32_t r = 1; r < n; ++r) {
      A x;
      std::memcpy(&x, input(r), sizeof(A));
      acc = foldOne<A, A>(acc, x, op);
    }
    if (op == HCCL_REDUCE_AVG) acc = static_cast<A>(acc / static_cast<A>(n));
    std::memcpy(dst, &acc, sizeof(A));
  };
  auto floating = [&](auto zero, auto load, auto store) {
    using A = decltype(zero);
    A acc = load(input(0));
    for (uint32_t r = 1; r < n; ++r) acc = foldOne<A, A>(acc, load(input(r)), op);
    if (op == HCCL_REDUCE_AVG) acc = acc / static_cast<A>(n);
    store(acc);
  };
  switch (t) {
    case HCCL_DATA_TYPE_INT8: return integer(int8_t{});
    case HCCL_DATA_TYPE_INT16: return integer(int16_t{});
    case HCCL_DATA_TYPE_INT32: return integer(int32_t{});
    case HCCL_DATA_TYPE_INT64: return integer(int64_t{});
    case HCCL_DATA_TYPE_UINT8: return integer(uint8_t{});
    case HCCL_DATA_TYPE_UINT16: return integer(uint16_t{});
    case HCCL_DATA_TYPE_UINT32: return integer(uint32_t{});
    case HCCL_DATA_TYPE_UINT64: return integer(uint64_t{});
    case HCCL_DATA_TYPE_BOOL: {
      bool acc = input(0)[0] != 0;
      for (uint32_t r = 1; r < n; ++r) {
        const bool x = input(r)[0] != 0;
        acc = (op == HCCL_REDUCE_SUM || op == HCCL_REDUCE_MAX) ? (acc || x) : (acc && x);
      }
      *static_cast<uint8_t*>(dst) = acc;
      return;
    }
    case HCCL_DATA_TYPE_FP32:
      return floating(float{}, [](const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; },
                      [&](float v) { std::memcpy(dst, &v, 4); });
    case HCCL_DATA_TYPE_FP64:
      return floating(double{}, [](const uint8_t* p) { double v; std::memcpy(&v, p, 8); return v; },
                      [&](double v) { std::memcpy(dst, &v, 8); });
    case HCCL_DATA_TYPE_FP16:
      return floating(float{}, [](const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return halfToFloat(v); },
                      [&](float v) { uint16_t h = floatToHalf(v); std::memcpy(dst, &h, 2); });
    case HCCL_DATA_TYPE_BFP16:
      return floating(float{}, [](const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return bf16ToFloat(v); },
                      [&](float v) { uint16_t h = floatToBf16(v); std::memcpy(dst, &h, 2); });
    default:
      return;
  }
}

inline std::vector<uint8_t> reference(HcclDataType t, HcclReduceOp op, uint64_t seed,
                                      uint32_t n, uint64_t count) {
  std::vector<uint8_t> v(count * sizeOf(t) + 1);
  for (uint64_t i = 0; i < count; ++i) referenceElement(t, op, seed, n, i, v.data() + i * sizeOf(t));
  return v;
}

// "" when equal, else where they first differ.
inline std::string compareBytes(const void* got, const void* want, uint64_t count, size_t es) {
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  for (uint64_t i = 0; i < count; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) != 0) {
      uint64_t gv = 0, wv = 0;
      std::memcpy(&gv, g + i * es, es);
      std::memcpy(&wv, w + i * es, es);
      char text[160];
      std::snprintf(text, sizeof text, "element %llu of %llu: got bits 0x%llx, want 0x%llx",
                    static_cast<unsigned long long>(i), static_cast<unsigned long long>(count),
                    static_cast<unsigned long long>(gv), static_cast<unsigned long long>(wv));
      return text;
    }
  }
  return "";
}

// Device buffers of one rank, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0 && npuMalloc(&ptr, n) != npuSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { npuFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const void* src, size_t n) { if (n) npuMemcpy(ptr, src, n, npuMemcpyHostToDevice); }
  std::vector<uint8_t> download(size_t n) const {
    std::vector<uint8_t> v(n + 1);
    if (n) npuMemcpy(v.data(), ptr, n, npuMemcpyDeviceToHost);
    return v;
  }
};

inline std::string caseName(HcclDataType t, HcclReduceOp op, uint64_t count) {
  static const char* const kOps[] = {"sum", "prod", "max", "min", "avg"};
  static const char* const kTypes[] = {"int8", "int16", "int32", "float16", "float32", "int64",
                                       "uint64", "uint8", "uint16", "uint32", "float64",
                                       "bfloat16", "bool"};
  return std::string(kTypes[t]) + " " + kOps[op] + " x" + std::to_string(count);
}

inline bool supported(HcclDataType t, HcclReduceOp op) {
  return !(t == HCCL_DATA_TYPE_BOOL && op == HCCL_REDUCE_AVG);
}

}  // namespace ccltest
