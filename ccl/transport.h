// The transport interface: the collectives among the ranks of one group, as the communicator
// composes them. Two implementations:
//   ShmTransport        the ranks of one node, through a POSIX shared-memory segment
//   InterNodeTransport  ranks on different nodes, through the caller's HcclInterNodeOps
// Ranks here are indices in the transport's group (0..size()-1), not communicator ranks.
// Every method blocks until its part is done, or fails with a Status whose message already
// names the operation (ctx.description), the ranks that did not arrive and the fix. Every
// rank of the group calls the same methods in the same order with matching sizes.
#pragma once

#include <cstdint>

#include "common.h"

namespace npu::ccl {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual uint32_t size() const = 0;
  virtual uint32_t rank() const = 0;

  // out = reduction over the group of in (count elements). AVG divides by avgDivisor.
  // in may equal out.
  virtual Status allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                           HcclReduceOp op, uint32_t avgDivisor, OpContext& ctx) = 0;
  // Like allReduce, but only `root` gets the result (out is not touched elsewhere).
  virtual Status reduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                        HcclReduceOp op, uint32_t avgDivisor, uint32_t root,
                        OpContext& ctx) = 0;
  virtual Status broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) = 0;
  // out holds size() blocks of bytesPerRank; rank r's `in` lands in block r.
  virtual Status allGather(const void* in, void* out, uint64_t bytesPerRank,
                           OpContext& ctx) = 0;
  // in holds size() blocks of recvCount elements; out = reduction of block rank().
  virtual Status reduceScatter(const void* in, void* out, uint64_t recvCount,
                               HcclDataType dtype, HcclReduceOp op, uint32_t avgDivisor,
                               OpContext& ctx) = 0;
  // Byte counts and offsets per peer; sendBytes[q] of rank r equals recvBytes[r] of rank q.
  virtual Status allToAllV(const void* in, const uint64_t* sendBytes,
                           const uint64_t* sendOffsets, void* out, const uint64_t* recvBytes,
                           const uint64_t* recvOffsets, OpContext& ctx) = 0;
  virtual Status send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) = 0;
  virtual Status recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) = 0;
  virtual Status barrier(OpContext& ctx) = 0;

  // This rank gave up on the group (an error or an abort): peers waiting for it stop waiting.
  virtual void markBroken(HcclResult code) = 0;
};

}  // namespace npu::ccl
