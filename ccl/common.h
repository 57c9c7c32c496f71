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

}  // namespace npu::ccl

namespace npu::ccl {
// Sets the message HcclGetLastErrorMessage returns on this thread; returns code.
HcclResult setLastError(HcclResult code, const std::string& message);
}  // namespace npu::ccl
