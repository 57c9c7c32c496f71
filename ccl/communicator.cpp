#include "communicator.h"

#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "reduce.h"

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

  // The ranks of every node, in rank order; node leaders are their lowest ranks.
  const uint32_t myNode = nodeOfRank ? nodeOfRank[rank] : 0;
  c->nodeOf_.assign(nRanks, 0);
  uint32_t maxNode = 0;
  for (uint32_t r = 0; r < nRanks; ++r) {
    c->nodeOf_[r] = nodeOfRank ? nodeOfRank[r] : 0;
    maxNode = std::max(maxNode, c->nodeOf_[r]);
  }
  c->localIndexOf_.assign(nRanks, -1);
  for (uint32_t node = 0; node <= maxNode; ++node) {
    std::vector<uint32_t> members;
    for (uint32_t r = 0; r < nRanks; ++r) {
      if (c->nodeOf_[r] == node) members.push_back(r);
    }
    if (members.empty()) continue;
    c->leaders_.push_back(members.front());
    c->nodeRanks_.push_back(members);
    if (node == myNode) {
      c->local_ = members;
      for (size_t i = 0; i < members.size(); ++i) c->localIndexOf_[members[i]] = static_cast<int>(i);
    }
  }
  ShmSetup setup;
  setup.name = "/simnpu-hccl-" + c->idHex_ + "-node" + std::to_string(myNode);
  setup.globalRanks = c->local_;
  setup.localRank = static_cast<uint32_t>(c->localIndexOf_[rank]);
  setup.slotBytes = config.bufferSizeMB << 20;
  setup.connectTimeoutSeconds = config.connectTimeoutSeconds;
  setup.connectDeadline = Clock::now() + std::chrono::seconds(config.connectTimeoutSeconds);
  setup.description = what;
  c->shadow_ = npuSimShadow() != 0;
  if (Status s = ShmTransport::connect(setup, &c->shm_); !s.ok()) return s;
  if (c->multiNode()) {
    std::vector<uint32_t> everyone(nRanks);
    for (uint32_t r = 0; r < nRanks; ++r) everyone[r] = r;
    c->world_ = std::make_unique<InterNodeTransport>(*interNode, everyone, rank, &c->interLock_);
    if (c->isLeader()) {
      const auto me = static_cast<uint32_t>(
          std::find(c->leaders_.begin(), c->leaders_.end(), rank) - c->leaders_.begin());
      c->leaderRing_ =
          std::make_unique<InterNodeTransport>(*interNode, c->leaders_, me, &c->interLock_);
    }
    // The leaders check the inter-node path; then their nodes learn that everyone is there.
    OpContext ctx;
    ctx.description = what;
    ctx.deadline = setup.connectDeadline;
    ctx.timeoutSeconds = config.connectTimeoutSeconds;
    ctx.aborted = &c->aborted_;
    if (c->leaderRing_) {
      if (Status s = c->leaderRing_->barrier(ctx); !s.ok()) return s;
    }
    if (Status s = c->shm_->barrier(ctx); !s.ok()) {
      s.message += " (HCCL_CONNECT_TIMEOUT applies while the communicator is created)";
      return s;
    }
  }
  *out = std::move(c);
  return Status::success();
}

Communicator::~Communicator() {
  for (PendingOp* op : pending_) delete op;
}

std::string Communicator::describe(const char* api, const std::string& what,
                                   uint64_t* sequence) {
  const uint64_t seq = ++sequence_;
  if (sequence != nullptr) *sequence = seq;
  return std::string(api) + " (sequence " + std::to_string(seq) +
         (what.empty() ? "" : ", " + what) + ") on communicator " + idHex_ + " rank " +
         std::to_string(rank_) + "/" + std::to_string(nRanks_);
}

HcclResult Communicator::enqueue(npuStream_t stream, const char* api,
                                 std::unique_ptr<PendingOp> op) {
  op->comm = this;
  if (npuStreamGetDevice(stream, &op->device) != npuSuccess) (void)npuGetDevice(&op->device);
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
  ctx.sequence = op->sequence;
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
  } else if (op->collective) {
    std::lock_guard<std::mutex> lock(c->collectiveMutex_);
    s = c->injectedLinkFault(op->device, ctx);
    if (s.ok()) s = op->body(ctx);
  } else {
    s = op->body(ctx);
  }
  if (!s.ok()) {
    c->fail(s);
    npuTaskFail(s.message.c_str());
  }
}

// NPU_SIM_FAULTS link_down@collective=N: the link fails under this collective. mode=error fails
// it at once (the peers learn it through the broken communicator); mode=hang keeps the rank away
// until the collective's deadline (HCCL_EXEC_TIMEOUT), so the peers time out as on a dead link.
Status Communicator::injectedLinkFault(int device, OpContext& ctx) {
  static const bool armed = npuSimFaultsArmed() != 0;
  npuSimFault fault;
  if (!armed || npuSimFaultTick(npuSimOnCollective, device, &fault) != npuSuccess ||
      fault.kind != npuSimFaultLinkDown) {
    return Status();
  }
  const std::string peer =
      fault.peer >= 0 ? "rank " + std::to_string(fault.peer) : std::string("its peers");
  if (fault.hang) {
    while (!ctx.expired(Clock::now()) && !ctx.aborted->load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Status::error(HCCL_E_TIMEOUT,
                         ctx.description + ": HCCS LINK ERROR: the link to " + peer +
                             " is down and the collective hung until its deadline (" +
                             std::to_string(ctx.timeoutSeconds) +
                             " s, HCCL_EXEC_TIMEOUT), error code is 507056 (NPU_SIM_FAULTS '" +
                             fault.text + "')");
  }
  return Status::error(HCCL_E_NETWORK, ctx.description + ": HCCS LINK ERROR: the link to " + peer +
                                           " is down, error code is 507056 (NPU_SIM_FAULTS '" +
                                           fault.text + "')");
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

// ---- the collectives ---------------------------------------------------------------------
// One node: the shared-memory transport does everything. Several nodes: a node's ranks
// reduce (or gather) to its leader through shared memory, the leaders combine through the
// inter-node transport, and each leader hands the result to its node through shared memory.
// Reductions spanning nodes run AVG as SUM with one division at the end, and float16/bfloat16
// in float32 with one rounding at the end.

namespace {

CallPrint callPrint(CallKind kind, const OpContext& ctx, uint64_t count = 0,
                    HcclDataType dtype = HCCL_DATA_TYPE_INT8, HcclReduceOp op = HCCL_REDUCE_SUM,
                    uint32_t root = 0) {
  CallPrint p;
  p.kind = kind;
  p.count = count;
  p.root = root;
  p.sequence = ctx.sequence;
  const bool reduction = kind == CallKind::kAllReduce || kind == CallKind::kReduce ||
                         kind == CallKind::kReduceScatter;
  p.dtype = reduction ? static_cast<uint32_t>(dtype) : 0;
  p.op = reduction ? static_cast<uint32_t>(op) : 0;
  return p;
}

}  // namespace

// Every collective first says what it is (expectCall): the node's ranks compare their calls at
// the shared-memory transport's first sync point (no extra round trip), and across nodes the
// leaders exchange their calls first (one small all-gather between the leaders, multi-node
// jobs only). A leader that finds another node's call different fails, and its node's ranks
// stop at their next sync point, naming it.
Status Communicator::expectCall(const CallPrint& call, OpContext& ctx) {
  shm_->expectCall(call);
  if (!leaderRing_) return Status::success();
  std::vector<CallPrint> calls(leaders_.size());
  if (Status s = leaderRing_->allGather(&call, calls.data(), sizeof(CallPrint), ctx); !s.ok()) {
    return s;
  }
  bool same = true;
  for (const CallPrint& other : calls) same = same && other.sameCall(call);
  if (same) return Status::success();
  std::string text;
  for (size_t k = 0; k < calls.size(); ++k) {
    text += (k ? "; rank " : "rank ") + std::to_string(leaders_[k]) + " (node " +
            std::to_string(nodeOf_[leaders_[k]]) + ") called " + calls[k].text();
  }
  return Status::error(HCCL_E_PARA,
                       ctx.description + ": the nodes called different collectives: " + text +
                           ". Every rank must call the same collectives in the same order, with "
                           "the same sizes, dtypes, reduce ops and roots");
}

// Shadow execution: one meeting of every rank stands for a large collective. It is the first sync
// point of the call, so the ranks' calls are compared there as for a real one, and it keeps the
// collective's deadline, abort and peer-failure checks; no byte moves.
Status Communicator::meet(OpContext& ctx, CallKind kind, uint64_t bytes) {
  uint64_t latest = 0;
  if (Status s = shm_->meetClocks(npuSimTaskClock(), &latest, ctx); !s.ok()) return s;
  if (multiNode()) {  // the clocks meet within each node only (docs/shadow.md)
    if (leaderRing_) {
      if (Status s = leaderRing_->barrier(ctx); !s.ok()) return s;
    }
    if (Status s = shm_->barrier(ctx); !s.ok()) return s;
  }
  npuSimTaskClockAdvanceTo(latest + modeledNs(kind, bytes));
  return Status::success();
}

// The collective's modeled time on its links (npuSimCostModel): the bus-bandwidth model of ring
// algorithms, steps x latency + the bytes each device sends / bandwidth. Inside a node HCCS;
// spanning nodes, RoCE's figures bound the whole collective.
uint64_t Communicator::modeledNs(CallKind kind, uint64_t bytes) const {
  npuSimCostModel m;
  if (npuSimGetCostModel(&m) != npuSuccess || nRanks_ < 2) return 0;
  const double gbps = multiNode() ? std::min(m.intra_gbps, m.inter_gbps) : m.intra_gbps;
  const double latency_ns = 1e3 * (multiNode() ? m.inter_latency_us : m.intra_latency_us);
  const double n = nRanks_, S = double(bytes);
  double steps = n - 1, sent = (n - 1) / n * S;  // all-gather, reduce-scatter, all-to-all
  switch (kind) {
    case CallKind::kAllReduce: steps = 2 * (n - 1), sent = 2 * (n - 1) / n * S; break;
    case CallKind::kBroadcast:
    case CallKind::kReduce: steps = std::ceil(std::log2(n)), sent = S; break;
    case CallKind::kBarrier: steps = std::ceil(std::log2(n)), sent = 0; break;
    default: break;
  }
  return static_cast<uint64_t>(steps * latency_ns + sent / gbps);
}

Status Communicator::allReduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                               HcclReduceOp op, OpContext& ctx) {
  if (Status s = expectCall(callPrint(CallKind::kAllReduce, ctx, count, dtype, op), ctx);
      !s.ok()) {
    return s;
  }
  if (shadowed(count * dtypeSize(dtype))) {
    return meet(ctx, CallKind::kAllReduce, count * dtypeSize(dtype));
  }
  if (!multiNode()) return shm_->allReduce(in, out, count, dtype, op, nRanks_, ctx);
  const bool half = dtype == HCCL_DATA_TYPE_FP16 || dtype == HCCL_DATA_TYPE_BFP16;
  const HcclDataType work = half ? HCCL_DATA_TYPE_FP32 : dtype;
  const HcclReduceOp fold = op == HCCL_REDUCE_AVG ? HCCL_REDUCE_SUM : op;
  std::vector<float> wide;
  const void* src = in;
  void* dst = out;
  if (half) {
    wide.resize(count);
    toFloat32(in, dtype, wide.data(), count);
    src = dst = wide.data();
  }
  if (Status s = shm_->reduce(src, dst, count, work, fold, 1, 0, ctx); !s.ok()) return s;
  if (leaderRing_) {
    if (Status s = leaderRing_->allReduce(dst, dst, count, work, fold, 1, ctx); !s.ok()) return s;
  }
  if (Status s = shm_->broadcast(dst, count * dtypeSize(work), 0, ctx); !s.ok()) return s;
  const uint32_t divisor = op == HCCL_REDUCE_AVG ? nRanks_ : 0;
  if (half) {
    fromFloat32(wide.data(), out, dtype, count, divisor);
  } else if (divisor) {
    const void* one[1] = {out};
    reduceInto(out, one, 1, count, dtype, HCCL_REDUCE_AVG, divisor);
  }
  return Status::success();
}

Status Communicator::reduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                            HcclReduceOp op, uint32_t root, OpContext& ctx) {
  if (!multiNode()) {
    if (Status s = expectCall(callPrint(CallKind::kReduce, ctx, count, dtype, op, root), ctx);
        !s.ok()) {
      return s;
    }
    if (shadowed(count * dtypeSize(dtype))) {
      return meet(ctx, CallKind::kReduce, count * dtypeSize(dtype));
    }
    return shm_->reduce(in, out, count, dtype, op, nRanks_, root, ctx);
  }
  // Checked as below, without the scratch buffer.
  if (shadowed(count * dtypeSize(dtype))) return allReduce(in, out, count, dtype, op, ctx);
  // Every rank computes the result (an all-reduce, checked as one); only the root keeps it.
  std::vector<char> scratch;
  void* target = out;
  if (rank_ != root) {
    scratch.resize(count * dtypeSize(dtype));
    target = scratch.data();
  }
  return allReduce(in, target, count, dtype, op, ctx);
}

Status Communicator::broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) {
  if (Status s = expectCall(callPrint(CallKind::kBroadcast, ctx, bytes, HCCL_DATA_TYPE_INT8,
                                      HCCL_REDUCE_SUM, root), ctx);
      !s.ok()) {
    return s;
  }
  if (shadowed(bytes)) return meet(ctx, CallKind::kBroadcast, bytes);
  if (!multiNode()) return shm_->broadcast(buf, bytes, root, ctx);
  const bool rootNode = nodeOf_[root] == nodeOf_[rank_];
  if (rootNode) {
    if (Status s = shm_->broadcast(buf, bytes, static_cast<uint32_t>(localIndex(root)), ctx); !s.ok()) return s;
  }
  if (leaderRing_) {
    uint32_t rootIndex = 0;
    for (uint32_t k = 0; k < nodeRanks_.size(); ++k) {
      if (nodeOf_[nodeRanks_[k].front()] == nodeOf_[root]) rootIndex = k;
    }
    if (Status s = leaderRing_->broadcast(buf, bytes, rootIndex, ctx); !s.ok()) return s;
  }
  if (!rootNode) return shm_->broadcast(buf, bytes, 0, ctx);
  return Status::success();
}

Status Communicator::allGather(const void* in, void* out, uint64_t bytesPerRank,
                               OpContext& ctx) {
  if (Status s = expectCall(callPrint(CallKind::kAllGather, ctx, bytesPerRank), ctx);
      !s.ok()) {
    return s;
  }
  if (shadowed(bytesPerRank * nRanks_)) {
    return meet(ctx, CallKind::kAllGather, bytesPerRank * nRanks_);
  }
  if (!multiNode()) return shm_->allGather(in, out, bytesPerRank, ctx);
  char* o = static_cast<char*>(out);
  std::vector<char> nodeBlocks(local_.size() * bytesPerRank);
  if (Status s = shm_->allGather(in, nodeBlocks.data(), bytesPerRank, ctx); !s.ok()) return s;
  if (leaderRing_) {
    // Node k's leader broadcasts its node's blocks; every leader puts them in rank order.
    std::vector<char> packed;
    for (uint32_t k = 0; k < nodeRanks_.size(); ++k) {
      const std::vector<uint32_t>& ranks = nodeRanks_[k];
      packed.resize(ranks.size() * bytesPerRank);
      if (ranks.front() == rank_) std::memcpy(packed.data(), nodeBlocks.data(), packed.size());
      if (Status s = leaderRing_->broadcast(packed.data(), packed.size(), k, ctx); !s.ok()) return s;
      for (size_t i = 0; i < ranks.size(); ++i) {
        std::memcpy(o + ranks[i] * bytesPerRank, packed.data() + i * bytesPerRank, bytesPerRank);
      }
    }
  }
  return shm_->broadcast(out, nRanks_ * bytesPerRank, 0, ctx);
}

Status Communicator::reduceScatter(const void* in, void* out, uint64_t recvCount,
                                   HcclDataType dtype, HcclReduceOp op, OpContext& ctx) {
  if (!multiNode()) {
    if (Status s = expectCall(callPrint(CallKind::kReduceScatter, ctx, recvCount, dtype, op), ctx);
        !s.ok()) {
      return s;
    }
    if (shadowed(recvCount * nRanks_ * dtypeSize(dtype))) {
      return meet(ctx, CallKind::kReduceScatter, recvCount * nRanks_ * dtypeSize(dtype));
    }
    return shm_->reduceScatter(in, out, recvCount, dtype, op, nRanks_, ctx);
  }
  if (shadowed(recvCount * nRanks_ * dtypeSize(dtype))) {
    return allReduce(in, out, recvCount * nRanks_, dtype, op, ctx);  // checked as below
  }
  const size_t es = dtypeSize(dtype);
  std::vector<char> all(recvCount * nRanks_ * es);
  if (Status s = allReduce(in, all.data(), recvCount * nRanks_, dtype, op, ctx); !s.ok()) return s;
  std::memcpy(out, all.data() + rank_ * recvCount * es, recvCount * es);
  return Status::success();
}

Status Communicator::allToAllV(const void* in, const uint64_t* sendBytes,
                               const uint64_t* sendOffsets, void* out,
                               const uint64_t* recvBytes, const uint64_t* recvOffsets,
                               OpContext& ctx) {
  if (Status s = expectCall(callPrint(CallKind::kAllToAll, ctx), ctx); !s.ok()) return s;
  // Shadow execution: always a meeting. Each rank's sizes differ, and whether to carry the bytes
  // must be one decision for all of them.
  if (shadow_) {
    uint64_t sent = 0;
    for (uint32_t r = 0; r < nRanks_; ++r) sent += sendBytes[r];
    return meet(ctx, CallKind::kAllToAll, sent * nRanks_ / std::max<uint32_t>(1, nRanks_ - 1));
  }
  if (!multiNode()) {
    return shm_->allToAllV(in, sendBytes, sendOffsets, out, recvBytes, recvOffsets, ctx);
  }
  // Peers on this node through shared memory, the others pairwise through the inter-node ops.
  const size_t n = local_.size();
  std::vector<uint64_t> sb(n), so(n), rb(n), ro(n);
  for (size_t i = 0; i < n; ++i) {
    sb[i] = sendBytes[local_[i]];
    so[i] = sendOffsets[local_[i]];
    rb[i] = recvBytes[local_[i]];
    ro[i] = recvOffsets[local_[i]];
  }
  if (Status s = shm_->allToAllV(in, sb.data(), so.data(), out, rb.data(), ro.data(), ctx); !s.ok()) return s;
  return allToAllVAcrossNodes(static_cast<const char*>(in), sendBytes, sendOffsets,
                              static_cast<char*>(out), recvBytes, recvOffsets, ctx);
}

Status Communicator::allToAllVAcrossNodes(const char* in, const uint64_t* sendBytes,
                                          const uint64_t* sendOffsets, char* out,
                                          const uint64_t* recvBytes,
                                          const uint64_t* recvOffsets, OpContext& ctx) {
  // Pairs in increasing order of (lower, higher) rank, the lower one sending first: one global
  // order, so blocking sends cannot form a cycle.
  for (uint32_t p = 0; p < nRanks_; ++p) {
    if (localIndex(p) >= 0) continue;
    Status s;
    if (p < rank_) {
      s = world_->recv(out + recvOffsets[p], recvBytes[p], p, ctx);
      if (s.ok()) s = world_->send(in + sendOffsets[p], sendBytes[p], p, ctx);
    } else {
      s = world_->send(in + sendOffsets[p], sendBytes[p], p, ctx);
      if (s.ok()) s = world_->recv(out + recvOffsets[p], recvBytes[p], p, ctx);
    }
    if (!s.ok()) return s;
  }
  return Status::success();
}

// Shadow execution: a large point-to-point pair still pairs up (one byte of the sender's stack),
// so its order and deadline hold.
Status Communicator::send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  const char token = 0;
  if (shadowed(bytes)) buf = &token, bytes = 1;
  if (localIndex(peer) >= 0) return shm_->send(buf, bytes, static_cast<uint32_t>(localIndex(peer)), ctx);
  return world_->send(buf, bytes, peer, ctx);
}

Status Communicator::recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  char token = 0;
  if (shadowed(bytes)) buf = &token, bytes = 1;
  if (localIndex(peer) >= 0) return shm_->recv(buf, bytes, static_cast<uint32_t>(localIndex(peer)), ctx);
  return world_->recv(buf, bytes, peer, ctx);
}

Status Communicator::barrier(OpContext& ctx) {
  if (Status s = expectCall(callPrint(CallKind::kBarrier, ctx), ctx); !s.ok()) return s;
  if (Status s = shm_->barrier(ctx); !s.ok() || !multiNode()) return s;
  if (leaderRing_) {
    if (Status s = leaderRing_->barrier(ctx); !s.ok()) return s;
  }
  return shm_->barrier(ctx);
}

}  // namespace npu::ccl
