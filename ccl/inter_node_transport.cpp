// The inter-node transport.
//
// How it works (m members, blocking send/recv from the caller):
//  - allreduce: a ring. The data is cut into m segments; m-1 reduce-scatter steps (send a
//    segment to the next member, receive one from the previous and fold it in), then m-1
//    allgather steps. Each member moves 2 (m-1)/m of the data, the bandwidth optimum.
//  - broadcast: a chain starting at the root.
//  - pairwise exchanges (alltoallv, send/recv) in one global order of pairs (lower rank
//    sends first), which blocking transports cannot deadlock on.
// Reductions here fold in ring order, not rank order: float results can differ from a
// rank-order fold in the last bits (integers and min/max are exact).
#include "inter_node_transport.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "reduce.h"

namespace npu::ccl {

Status InterNodeTransport::send(const void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  if (ctx.aborted && ctx.aborted->load(std::memory_order_acquire)) {
    return Status::error(HCCL_E_UNAVAIL,
                         ctx.description + ": the communicator was aborted (HcclCommAbort)");
  }
  char error[512] = {};
  HcclResult r;
  {
    std::lock_guard<std::mutex> lock(*lock_);
    r = ops_.send(ops_.ctx, buf, bytes, ranks_[peer], error, sizeof error);
  }
  if (r != HCCL_SUCCESS) {
    return Status::error(r, ctx.description + ": inter-node send of " + std::to_string(bytes) +
                                " bytes to rank " + std::to_string(ranks_[peer]) +
                                " failed (" + HcclGetErrorString(r) + ")" +
                                (error[0] ? std::string(": ") + error : std::string()));
  }
  return Status::success();
}

Status InterNodeTransport::recv(void* buf, uint64_t bytes, uint32_t peer, OpContext& ctx) {
  if (ctx.aborted && ctx.aborted->load(std::memory_order_acquire)) {
    return Status::error(HCCL_E_UNAVAIL,
                         ctx.description + ": the communicator was aborted (HcclCommAbort)");
  }
  char error[512] = {};
  HcclResult r;
  {
    std::lock_guard<std::mutex> lock(*lock_);
    r = ops_.recv(ops_.ctx, buf, bytes, ranks_[peer], error, sizeof error);
  }
  if (r != HCCL_SUCCESS) {
    return Status::error(r, ctx.description + ": inter-node receive of " +
                                std::to_string(bytes) + " bytes from rank " +
                                std::to_string(ranks_[peer]) + " failed (" +
                                HcclGetErrorString(r) + ")" +
                                (error[0] ? std::string(": ") + error : std::string()));
  }
  return Status::success();
}

Status InterNodeTransport::exchange(const void* sendBuf, uint64_t sendBytes, uint32_t to,
                                    void* recvBuf, uint64_t recvBytes, uint32_t from,
                                    OpContext& ctx) {
  if (me_ % 2 == 0) {
    if (Status s = send(sendBuf, sendBytes, to, ctx); !s.ok()) return s;
    return recv(recvBuf, recvBytes, from, ctx);
  }
  if (Status s = recv(recvBuf, recvBytes, from, ctx); !s.ok()) return s;
  return send(sendBuf, sendBytes, to, ctx);
}

Status InterNodeTransport::allReduce(const void* in, void* out, uint64_t count,
                                     HcclDataType dtype, HcclReduceOp op, uint32_t avgDivisor,
                                     OpContext& ctx) {
  const size_t es = dtypeSize(dtype);
  const uint32_t m = size();
  char* acc = static_cast<char*>(out);
  if (acc != in) std::memmove(acc, in, count * es);
  if (m > 1 && count > 0) {
    const HcclReduceOp fold = op == HCCL_REDUCE_AVG ? HCCL_REDUCE_SUM : op;
    const uint64_t per = (count + m - 1) / m;
    auto begin = [&](uint32_t s) { return std::min<uint64_t>(count, uint64_t(s) * per); };
    auto length = [&](uint32_t s) { return begin(s + 1 > m ? m : s + 1) - begin(s); };
    auto seg = [&](int64_t k) { return static_cast<uint32_t>(((k % m) + m) % m); };
    const uint32_t next = (me_ + 1) % m, prev = (me_ + m - 1) % m;
    std::vector<char> tmp(per * es);
    for (uint32_t k = 0; k + 1 < m; ++k) {
      const uint32_t s = seg(int64_t(me_) - k), r = seg(int64_t(me_) - k - 1);
      if (Status st = exchange(acc + begin(s) * es, length(s) * es, next, tmp.data(),
                               length(r) * es, prev, ctx);
          !st.ok()) {
        return st;
      }
      const void* parts[2] = {acc + begin(r) * es, tmp.data()};
      reduceInto(acc + begin(r) * es, parts, 2, length(r), dtype, fold, 1);
    }
    for (uint32_t k = 0; k + 1 < m; ++k) {
      const uint32_t s = seg(int64_t(me_) + 1 - k), r = seg(int64_t(me_) - k);
      if (Status st = exchange(acc + begin(s) * es, length(s) * es, next, acc + begin(r) * es,
                               length(r) * es, prev, ctx);
          !st.ok()) {
        return st;
      }
    }
  }
  if (op == HCCL_REDUCE_AVG) {
    const void* one[1] = {acc};
    reduceInto(acc, one, 1, count, dtype, HCCL_REDUCE_AVG, avgDivisor);
  }
  return Status::success();
}

Status InterNodeTransport::reduce(const void* in, void* out, uint64_t count, HcclDataType dtype,
                                  HcclReduceOp op, uint32_t avgDivisor, uint32_t root,
                                  OpContext& ctx) {
  std::vector<char> scratch;
  void* target = out;
  if (me_ != root) {
    scratch.resize(count * dtypeSize(dtype));
    target = scratch.data();
  }
  return allReduce(in, target, count, dtype, op, avgDivisor, ctx);
}

Status InterNodeTransport::broadcast(void* buf, uint64_t bytes, uint32_t root, OpContext& ctx) {
  const uint32_t m = size();
  const uint32_t pos = (me_ + m - root) % m;  // place in the chain that starts at the root
  if (pos > 0) {
    if (Status s = recv(buf, bytes, (me_ + m - 1) % m, ctx); !s.ok()) return s;
  }
  if (pos + 1 < m) return send(buf, bytes, (me_ + 1) % m, ctx);
  return Status::success();
}

Status InterNodeTransport::allGather(const void* in, void* out, uint64_t bytesPerRank,
                                     OpContext& ctx) {
  char* o = static_cast<char*>(out);
  if (o + me_ * bytesPerRank != in) std::memmove(o + me_ * bytesPerRank, in, bytesPerRank);
  for (uint32_t r = 0; r < size(); ++r) {
    if (Status s = broadcast(o + r * bytesPerRank, bytesPerRank, r, ctx); !s.ok()) return s;
  }
  return Status::success();
}

Status InterNodeTransport::reduceScatter(const void* in, void* out, uint64_t recvCount,
                                         HcclDataType dtype, HcclReduceOp op,
                                         uint32_t avgDivisor, OpContext& ctx) {
  const size_t es = dtypeSize(dtype);
  std::vector<char> all(recvCount * size() * es);
  if (Status s = allReduce(in, all.data(), recvCount * size(), dtype, op, avgDivisor, ctx);
      !s.ok()) {
    return s;
  }
  std::memcpy(out, all.data() + me_ * recvCount * es, recvCount * es);
  return Status::success();
}

Status InterNodeTransport::allToAllV(const void* in, const uint64_t* sendBytes,
                                     const uint64_t* sendOffsets, void* out,
                                     const uint64_t* recvBytes, const uint64_t* recvOffsets,
                                     OpContext& ctx) {
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::memmove(dst + recvOffsets[me_], src + sendOffsets[me_],
               std::min(sendBytes[me_], recvBytes[me_]));
  // Pairs in increasing order of (lower, higher) member: a global order, so no cycle of
  // blocked sends can form.
  for (uint32_t p = 0; p < size(); ++p) {
    if (p == me_) continue;
    Status s;
    if (p < me_) {
      s = recv(dst + recvOffsets[p], recvBytes[p], p, ctx);
      if (s.ok()) s = send(src + sendOffsets[p], sendBytes[p], p, ctx);
    } else {
      s = send(src + sendOffsets[p], sendBytes[p], p, ctx);
      if (s.ok()) s = recv(dst + recvOffsets[p], recvBytes[p], p, ctx);
    }
    if (!s.ok()) return s;
  }
  return Status::success();
}

Status InterNodeTransport::barrier(OpContext& ctx) {
  uint8_t token = 1;
  return allReduce(&token, &token, 1, HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_MAX, 1, ctx);
}

}  // namespace npu::ccl
