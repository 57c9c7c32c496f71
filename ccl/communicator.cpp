#include "communicator.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace npu::ccl {

namespace {

std::string hex(const uint8_t* bytes, size_t n) {
  static const char* const kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kHex[bytes[i] >> 4];
    s += kHex[bytes[i] & 15];
  }
  return s;
}

}  // namespace

Status Communicator::create(uint32_t nRanks, const RootInfoData& root, uint32_t rank,
                            const uint32_t* nodeOfRank, const HcclInterNodeOps* interNode,
                            const HcclCommConfig& config, const char* apiName,
                            std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->nRanks_ = nRanks;
  c->rank_ = rank;
  c->config_ = config;
  c->idHex_ = hex(root.id, sizeof root.id);
  const std::string what = std::string(apiName) + " on communicator " + c->idHex_ + " (made by " +
                           std::string(root.host, strnlen(root.host, sizeof root.host)) +
                           " pid " + std::to_string(root.pid) + ") rank " +
                           std::to_string(rank) + "/" + std::to_string(nRanks);

  // The ranks of this rank's node, in rank order.
  const uint32_t myNode = nodeOfRank ? nodeOfRank[rank] : 0;
  std::vector<uint32_t> local;
  uint32_t nNodes = 1;
  for (uint32_t r = 0; r < nRanks; ++r) {
    const uint32_t node = nodeOfRank ? nodeOfRank[r] : 0;
    nNodes = std::max(nNodes, node + 1);
    if (node == myNode) local.push_back(r);
  }
  if (nNodes > 1) {
    (void)interNode;
    return Status::error(HCCL_E_NOT_SUPPORT,
                         what + ": communicators spanning " + std::to_string(nNodes) +
                             " nodes are not implemented yet (only one node)");
  }
  ShmSetup setup;
  setup.name = "/simnpu-hccl-" + c->idHex_ + "-node" + std::to_string(myNode);
  setup.globalRanks = local;
  for (uint32_t i = 0; i < local.size(); ++i) {
    if (local[i] == rank) setup.localRank = i;
  }
  setup.slotBytes = config.bufferSizeMB << 20;
  setup.connectTimeoutSeconds = config.connectTimeoutSeconds;
  setup.connectDeadline = Clock::now() + std::chrono::seconds(config.connectTimeoutSeconds);
  setup.description = what;
  if (Status s = ShmTransport::connect(setup, &c->shm_); !s.ok()) return s;
  *out = std::move(c);
  return Status::success();
}

Communicator::~Communicator() {
  for (PendingOp* op : pending_) delete op;
}

std::string Communicator::describe(const char* api, const std::string& what) {
  const uint64_t seq = ++sequence_;
  return std::string(api) + " (sequence " + std::to_string(seq) +
         (what.empty() ? "" : ", " + what) + ") on communicator " + idHex_ + " rank " +
         std::to_string(rank_) + "/" + std::to_string(nRanks_);
}

HcclResult Communicator::enqueue(npuStream_t stream, const char* api,
                                 std::unique_ptr<PendingOp> op) {
  op->comm = this;
  PendingOp* raw = op.release();
  {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    pending_.insert(raw);
  }
  const npuError_t e = npuLaunchTask(stream, api, &Communicator::runOp, raw);
  if (e == npuSuccess) return HCCL_SUCCESS;
  if (e == npuErrorLaunchFailure) {
    // ASCEND_LAUNCH_BLOCKING=1: the task ran (and freed itself) and failed.
    return setLastError(asyncError() == HCCL_SUCCESS ? HCCL_E_RUNTIME : asyncError(),
                        asyncErrorMessage());
  }
  const std::string why = npuGetLastErrorMessage();
  {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    pending_.erase(raw);
  }
  delete raw;
  return setLastError(HCCL_E_RUNTIME, std::string(api) + ": the runtime refused the launch: " +
                                          npuGetErrorName(e) + ": " + why);
}

void Communicator::runOp(void* arg) {
  std::unique_ptr<PendingOp> op(static_cast<PendingOp*>(arg));
  Communicator* c = op->comm;
  {
    std::lock_guard<std::mutex> lock(c->pendingMutex_);
    c->pending_.erase(op.get());
  }
  OpContext ctx;
  ctx.description = op->description;
  ctx.aborted = &c->aborted_;
  ctx.timeoutSeconds = c->config_.execTimeoutSeconds;
  if (ctx.timeoutSeconds > 0) {
    ctx.deadline = Clock::now() + std::chrono::seconds(ctx.timeoutSeconds);
  }
  Status s;
  if (c->aborted_.load(std::memory_order_acquire)) {
    s = Status::error(HCCL_E_UNAVAIL,
                      ctx.description + ": the communicator was aborted (HcclCommAbort)");
  } else if (c->asyncError() != HCCL_SUCCESS) {
    s = Status::error(HCCL_E_UNAVAIL, ctx.description +
                                          ": the communicator is broken by an earlier error: " +
                                          c->asyncErrorMessage());
  } else {
    s = op->body(ctx);
  }
  if (!s.ok()) {
    c->fail(s);
    npuTaskFail(s.message.c_str());
  }
}

void Communicator::fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (asyncError_ != HCCL_SUCCESS) return;  // the first error is the one to tell the peers
    asyncError_ = s.code;
    asyncMessage_ = s.message;
  }
  if (shm_) shm_->markBroken(s.code);
}

HcclResult Communicator::asyncError() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return asyncError_;
}

const char* Communicator::asyncErrorMessage() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return asyncMessage_.c_str();
}

void Communicator::abort() {
  aborted_.store(true, std::memory_order_release);
  fail(Status::error(HCCL_E_UNAVAIL, "communicator " + idHex_ + " rank " +
                                         std::to_string(rank_) + "/" + std::to_string(nRanks_) +
                                         " was aborted (HcclCommAbort)"));
}

// ---- the collectives: one node -----------------------------------------------------------

Status Communicator::allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                               HcclReduceOp op, OpContext& ctx) {
  return shm_->allReduce(in, out, count, dtype, op, nRanks_, ctx);
}

Status Communicator::reduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                            HcclReduceOp op, uint32_t root, OpContext& ctx) {
  return shm_->reduce(in, out, count, dtype, op, nRanks_, root, ctx);
}

Status Communicator::broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) {
  return shm_->broadcast(buf, bytes, root, ctx);
}

Status Communicator::allGather(const void* in, void* out, uint64_t bytesPerRank,
                               OpContext& ctx) {
  return shm_->allGather(in, out, bytesPerRank, ctx);
}

Status Communicator::reduceScatter(const void* in, void* out, uint64_t recvCount,
                                   HcclDataType dtype, HcclReduceOp op, OpContext& ctx) {
  return shm_->reduceScatter(in, out, recvCount, dtype, op, nRanks_, ctx);
}

Status Communicator::allToAllV(const void* in, const uint64_t* sendBytes,
                               const uint64_t* sendOffsets, void* out,
                               const uint64_t* recvBytes, const uint64_t* recvOffsets,
                               OpContext& ctx) {
  return shm_->allToAllV(in, sendBytes, sendOffsets, out, recvBytes, recvOffsets, ctx);
}

Status Communicator::send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  return shm_->send(buf, bytes, peer, ctx);
}

Status Communicator::recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  return shm_->recv(buf, bytes, peer, ctx);
}

Status Communicator::barrier(OpContext& ctx) { return shm_->barrier(ctx); }

}  // namespace npu::ccl
