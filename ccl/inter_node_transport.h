// The inter-node transport: collectives among ranks on different nodes, built from the
// caller's blocking send/recv (HcclInterNodeOps; ProcessGroupHCCL supplies Gloo over TCP).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "transport.h"

namespace npu::ccl {

class InterNodeTransport final : public Transport {
 public:
  // groupRanks[i] is the communicator rank of group member i; `me` is this rank's index.
  // `lock` serialises every call into ops for the communicator (the ops' contract).
  InterNodeTransport(const HcclInterNodeOps& ops, std::vector<uint32_t> groupRanks, uint32_t me,
                     std::mutex* lock)
      : ops_(ops), ranks_(std::move(groupRanks)), me_(me), lock_(lock) {}

  uint32_t size() const override { return static_cast<uint32_t>(ranks_.size()); }
  uint32_t rank() const override { return me_; }

  Status allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                   HcclReduceOp op, uint32_t avgDivisor, OpContext& ctx) override;
  Status reduce(const void* in, void* out, uint64_t count, HcclDataType dtype, HcclReduceOp op,
                uint32_t avgDivisor, uint32_t root, OpContext& ctx) override;
  Status broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) override;
  Status allGather(const void* in, void* out, uint64_t bytesPerRank, OpContext& ctx) override;
  Status reduceScatter(const void* in, void* out, uint64_t recvCount, HcclDataType dtype,
                       HcclReduceOp op, uint32_t avgDivisor, OpContext& ctx) override;
  Status allToAllV(const void* in, const uint64_t* sendBytes, const uint64_t* sendOffsets,
                   void* out, const uint64_t* recvBytes, const uint64_t* recvOffsets,
                   OpContext& ctx) override;
  Status send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) override;
  Status recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) override;
  Status barrier(OpContext& ctx) override;
  void markBroken(HcclResult) override {}  // the peers learn of it through their own ops

 private:
  // Sends to `to` and receives from `from` without deadlock on blocking ops: in a ring, even
  // members send first and odd members receive first, so every send meets a posted receive.
  Status exchange(const void* sendBuf, uint64_t sendBytes, uint32_t to, void* recvBuf,
                  uint64_t recvBytes, uint32_t from, OpContext& ctx);

  HcclInterNodeOps ops_;
  std::vector<uint32_t> ranks_;
  uint32_t me_;
  std::mutex* lock_;
};

}  // namespace npu::ccl
