// The intra-node transport: the ranks of one node share one POSIX shared-memory segment.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport.h"

namespace npu::ccl {

struct ShmSegmentLayout;
struct SegmentHeader;

struct ShmSetup {
  std::string name;                  // "/simnpu-hccl-<id>-node<k>"
  std::vector<uint32_t> globalRanks; // communicator rank of each local rank (for messages)
  uint32_t localRank = 0;
  uint64_t slotBytes = 0;            // staging per rank (the creator's value wins)
  Clock::time_point connectDeadline;
  uint32_t connectTimeoutSeconds = 0;
  std::string description;           // "HcclCommInitRootInfo on communicator <id> rank 1/4"
};

class ShmTransport final : public Transport {
 public:
  // Creates (local rank 0) or opens the segment and waits until every local rank has mapped
  // it; then the name is unlinked, so nothing outlives the processes.
  static Status connect(const ShmSetup& setup, std::unique_ptr<ShmTransport>* out);
  ~ShmTransport() override;

  uint32_t size() const override { return nLocal_; }
  uint32_t rank() const override { return me_; }
  uint64_t slotBytes() const { return slotBytes_; }

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
  // A barrier at which each rank also publishes `mine` (its simulated clock, shadow execution)
  // and learns the latest of the node's.
  Status meetClocks(uint64_t mine, uint64_t* latest, OpContext& ctx);
  void markBroken(HcclResult code) override;

  // The collective-mismatch check: the next collective's first sync point also publishes
  // `call` and compares it with every local rank's (no extra round trip); a difference fails
  // that collective on every rank with HCCL_E_PARA, naming each rank's call. Set by the
  // communicator before each collective it runs.
  void expectCall(const CallPrint& call);

 private:
  ShmTransport() = default;

  // Both halves of rank r's staging slot; a chunk uses half (epoch & 1).
  char* slot(uint32_t r, uint32_t half) const;
  uint32_t nextHalf() { return static_cast<uint32_t>(epoch_++ & 1); }
  // This rank has passed one more sync point; waits until every rank has (arrive), and at the
  // first sync point of a collective given to expectCall, checks the ranks' calls.
  Status arriveAndWait(OpContext& ctx);
  Status arrive(OpContext& ctx);
  // streamOut: write `out` with streaming stores (the whole collective's output is large).
  Status reduceChunk(const void* in, void* out, uint64_t count, HcclDataType dtype,
                     HcclReduceOp op, uint32_t avgDivisor, int root, bool streamOut,
                     OpContext& ctx);
  Status ringWrite(uint32_t peer, const void* data, uint64_t bytes, OpContext& ctx);
  Status ringRead(uint32_t peer, void* data, uint64_t bytes, OpContext& ctx);
  std::string rankList(const std::vector<uint32_t>& local) const;
  bool peerAlive(uint32_t r) const;
  SegmentHeader* header() const;  // false once local rank r's process has exited

  std::string name_;
  bool creator_ = false;
  bool unlinked_ = false;
  int fd_ = -1;  // kept open: it holds this rank's liveness lock
  char* base_ = nullptr;
  uint64_t mappedBytes_ = 0;
  uint32_t nLocal_ = 0;
  uint32_t me_ = 0;
  uint64_t slotBytes_ = 0;
  uint64_t halfBytes_ = 0;
  uint64_t ringBytes_ = 0;
  uint64_t arrivals_ = 0;  // sync points this rank has passed
  uint64_t epoch_ = 0;     // chunks staged so far
  CallPrint expected_;     // what this rank calls next (expectCall)
  bool checkNext_ = false;
  uint64_t checkedCalls_ = 0;  // collectives checked so far (picks the record's half)
  std::vector<uint32_t> globalRanks_;
  std::unique_ptr<std::mutex[]> sendLocks_, recvLocks_;  // one sender/receiver per ring
  std::mutex collectiveLock_;
};

}  // namespace npu::ccl
