// Internal pieces shared by the collectives library: the outcome of an operation, the context
// a collective runs in (its name, sequence number and deadline, for messages), dtype facts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "npu/hccl.h"

namespace npu::ccl {

// What an operation ended with: HCCL_SUCCESS, or a code and the message that explains it.
struct Status {
  HcclResult code = HCCL_SUCCESS;
  std::string message;

  bool ok() const { return code == HCCL_SUCCESS; }
  static Status success() { return {}; }
  static Status error(HcclResult c, std::string m) { return {c, std::move(m)}; }
};

using Clock = std::chrono::steady_clock;

// One running collective as its waits see it: what to name in a message, when to give up, and
// the flag that HcclCommAbort raises.
struct OpContext {
  std::string description;  // "HcclAllReduce (sequence 17, 4096 elements float32) on
                            //  communicator 1a2b... rank 1/4"
  uint64_t sequence = 0;    // the operation's sequence number on its communicator
  Clock::time_point deadline = Clock::time_point::max();
  uint32_t timeoutSeconds = 0;  // 0: no deadline
  const std::atomic<bool>* aborted = nullptr;

  bool expired(Clock::time_point now) const { return now >= deadline; }
};

// Bytes of one element; 0 for a dtype we do not know.
inline size_t dtypeSize(HcclDataType t) {
  switch (t) {
    case HCCL_DATA_TYPE_INT8:
    case HCCL_DATA_TYPE_UINT8:
    case HCCL_DATA_TYPE_BOOL:
      return 1;
    case HCCL_DATA_TYPE_INT16:
    case HCCL_DATA_TYPE_UINT16:
    case HCCL_DATA_TYPE_FP16:
    case HCCL_DATA_TYPE_BFP16:
      return 2;
    case HCCL_DATA_TYPE_INT32:
    case HCCL_DATA_TYPE_UINT32:
    case HCCL_DATA_TYPE_FP32:
      return 4;
    case HCCL_DATA_TYPE_INT64:
    case HCCL_DATA_TYPE_UINT64:
    case HCCL_DATA_TYPE_FP64:
      return 8;
    default:
      return 0;
  }
}

inline const char* dtypeName(HcclDataType t) {
  switch (t) {
    case HCCL_DATA_TYPE_INT8: return "int8";
    case HCCL_DATA_TYPE_INT16: return "int16";
    case HCCL_DATA_TYPE_INT32: return "int32";
    case HCCL_DATA_TYPE_FP16: return "float16";
    case HCCL_DATA_TYPE_FP32: return "float32";
    case HCCL_DATA_TYPE_INT64: return "int64";
    case HCCL_DATA_TYPE_UINT64: return "uint64";
    case HCCL_DATA_TYPE_UINT8: return "uint8";
    case HCCL_DATA_TYPE_UINT16: return "uint16";
    case HCCL_DATA_TYPE_UINT32: return "uint32";
    case HCCL_DATA_TYPE_FP64: return "float64";
    case HCCL_DATA_TYPE_BFP16: return "bfloat16";
    case HCCL_DATA_TYPE_BOOL: return "bool";
    default: return "unknown dtype";
  }
}

inline const char* reduceOpName(HcclReduceOp op) {
  switch (op) {
    case HCCL_REDUCE_SUM: return "sum";
    case HCCL_REDUCE_PROD: return "prod";
    case HCCL_REDUCE_MAX: return "max";
    case HCCL_REDUCE_MIN: return "min";
    case HCCL_REDUCE_AVG: return "avg";
    default: return "unknown op";
  }
}

// What one rank called, as the collective-mismatch check compares it across ranks: the kind of
// collective and the arguments every rank must agree on (fields a kind does not use are 0).
// A plain 32-byte record: it lives in the shared segment, next to the rank's sync counter.
enum class CallKind : uint32_t {
  kNone = 0, kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll, kBarrier
};

struct CallPrint {
  CallKind kind = CallKind::kNone;
  uint32_t dtype = 0;     // HcclDataType (reductions)
  uint64_t count = 0;     // elements (reductions) or bytes (broadcast; all-gather per rank)
  uint32_t op = 0;        // HcclReduceOp (reductions)
  uint32_t root = 0;      // reduce, broadcast
  uint64_t sequence = 0;  // for messages only: ranks may number point-to-point calls apart

  bool sameCall(const CallPrint& o) const {
    return kind == o.kind && dtype == o.dtype && count == o.count && op == o.op &&
           root == o.root;
  }
  // "HcclAllReduce (sequence 2, 1024 elements float32, sum)"
  std::string text() const;
};
static_assert(sizeof(CallPrint) == 32, "CallPrint is a fixed record of the shared segment");

}  // namespace npu::ccl

namespace npu::ccl {
// Sets the message HcclGetLastErrorMessage returns on this thread; returns code.
HcclResult setLastError(HcclResult code, const std::string& message);
}  // namespace npu::ccl
