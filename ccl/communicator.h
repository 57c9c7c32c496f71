// A communicator: its identity, settings, transports, sequence numbers and async error.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common.h"
#include "inter_node_transport.h"
#include "shm_transport.h"

namespace npu::ccl {

// What HcclGetRootInfo puts in HcclRootInfo::internal.
struct RootInfoData {
  char magic[16];      // "simnpu-hccl-v1"
  uint8_t id[16];      // random
  char host[64];       // of the creator, for messages
  int32_t pid;
};
static_assert(sizeof(RootInfoData) <= HCCL_ROOT_INFO_BYTES);

class Communicator;

// One enqueued operation: its body runs on the stream's worker.
struct PendingOp {
  Communicator* comm = nullptr;
  std::string description;
  uint64_t sequence = 0;
  std::function<Status(OpContext&)> body;
  bool collective = true;  // false for send/recv, which may run beside a collective
  int device = 0;          // the launching stream's (NPU_SIM_FAULTS counts collectives per device)
};

class Communicator {
 public:
  // Joins the communicator; blocks until every rank has joined or the connect deadline.
  static Status create(uint32_t nRanks, const RootInfoData& root, uint32_t rank,
                       const uint32_t* nodeOfRank, const HcclInterNodeOps* interNode,
                       const HcclCommConfig& config, const char* apiName,
                       std::unique_ptr<Communicator>* out);
  ~Communicator();

  uint32_t size() const { return nRanks_; }
  uint32_t rank() const { return rank_; }
  const std::string& idText() const { return idHex_; }

  // "HcclAllReduce (sequence 17, 4096 elements float32) on communicator <id> rank 1/4"; takes
  // the next sequence number (stored in *sequence when given).
  std::string describe(const char* api, const std::string& what, uint64_t* sequence = nullptr);
  // Queues op on stream; returns the launch's result.
  HcclResult enqueue(npuStream_t stream, const char* api, std::unique_ptr<PendingOp> op);

  // The collectives over the whole communicator (run on a stream worker).
  Status allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                   HcclReduceOp op, OpContext& ctx);
  Status reduce(const void* in, void* out, uint64_t count, HcclDataType dtype, HcclReduceOp op,
                uint32_t root, OpContext& ctx);
  Status broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx);
  Status allGather(const void* in, void* out, uint64_t bytesPerRank, OpContext& ctx);
  Status reduceScatter(const void* in, void* out, uint64_t recvCount, HcclDataType dtype,
                       HcclReduceOp op, OpContext& ctx);
  Status allToAllV(const void* in, const uint64_t* sendBytes, const uint64_t* sendOffsets,
                   void* out, const uint64_t* recvBytes, const uint64_t* recvOffsets,
                   OpContext& ctx);
  Status send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx);
  Status recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx);
  Status barrier(OpContext& ctx);

  HcclResult asyncError() const;
  const char* asyncErrorMessage() const;
  void abort();

 private:
  Communicator() = default;
  static void runOp(void* arg);
  void fail(const Status& s);
  Status injectedLinkFault(int device, OpContext& ctx);  // NPU_SIM_FAULTS link_down

  // The collective-mismatch check of the call about to run (see communicator.cpp).
  Status expectCall(const CallPrint& call, OpContext& ctx);
  // Shadow execution (NPU_SIM_SHADOW=1): a collective over more than NPU_SIM_SHADOW_CARRY_BYTES
  // (tensor data, which does not exist) is a meeting of the ranks, checked as the call, that
  // moves no bytes; a smaller one (metadata) runs as usual.
  bool shadowed(uint64_t bytes) const { return shadow_ && bytes > NPU_SIM_SHADOW_CARRY_BYTES; }
  // With the simulated clock on, the meeting also moves every rank's clock to the latest of
  // theirs (a node's ranks), plus the modeled time of `kind` moving `bytes` (the output of
  // all-gathers, the input of the others).
  Status meet(OpContext& ctx, CallKind kind, uint64_t bytes);
  uint64_t modeledNs(CallKind kind, uint64_t bytes) const;
  bool multiNode() const { return leaders_.size() > 1; }
  bool isLeader() const { return local_.front() == rank_; }
  // Communicator rank -> index in this node's shared-memory group (-1: another node).
  int localIndex(uint32_t r) const { return localIndexOf_[r]; }
  Status allToAllVAcrossNodes(const char* in, const uint64_t* sendBytes,
                              const uint64_t* sendOffsets, char* out, const uint64_t* recvBytes,
                              const uint64_t* recvOffsets, OpContext& ctx);

  uint32_t nRanks_ = 0;
  uint32_t rank_ = 0;
  std::vector<uint32_t> nodeOf_;        // node of each rank
  std::vector<uint32_t> local_;         // ranks of this node, ascending (local_[0]: leader)
  std::vector<int> localIndexOf_;
  std::vector<uint32_t> leaders_;       // the leader of every non-empty node, in node order
  std::vector<std::vector<uint32_t>> nodeRanks_;  // ranks of each leaders_ entry's node
  std::mutex interLock_;                // one call into the inter-node ops at a time
  std::unique_ptr<InterNodeTransport> leaderRing_;  // leaders only
  std::unique_ptr<InterNodeTransport> world_;       // any rank to any rank on another node
  std::string idHex_;
  HcclCommConfig config_{};
  std::unique_ptr<ShmTransport> shm_;
  std::atomic<uint64_t> sequence_{0};
  std::atomic<bool> aborted_{false};
  bool shadow_ = false;                 // npuSimShadow(): collectives move no bytes

  mutable std::mutex errorMutex_;
  HcclResult asyncError_ = HCCL_SUCCESS;
  std::string asyncMessage_;  // set once, so HcclGetCommErrorMessage's pointer stays valid

  // Collectives run one at a time per communicator, whole (a multi-node collective is
  // several transport calls that must not interleave with another stream's collective).
  std::mutex collectiveMutex_;
  std::mutex pendingMutex_;
  std::set<PendingOp*> pending_;  // queued ops; a stream that skips them never frees them
};

}  // namespace npu::ccl
