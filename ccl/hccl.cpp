// The C API of include/npu/hccl.h: argument checks, then the communicator does the work.
// Checks happen here, at enqueue time, so a bad call fails at once with HCCL_E_PARA and a
// message (HcclGetLastErrorMessage); only peer-dependent failures surface later on the stream.
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "communicator.h"
#include "npu/env.h"
#include "npu/hccl.h"
#include "reduce.h"

namespace npu::ccl {

namespace {

thread_local std::string t_lastError;

constexpr char kRootMagic[16] = "simnpu-hccl-v1";

// The environment variables: name, default, accepted range.
struct EnvSetting {
  const char* name;
  long long fallback, lo, hi;
  const char* unit;
};
constexpr EnvSetting kExecTimeout{"HCCL_EXEC_TIMEOUT", 1836, 0, 17340, "seconds (0 = no deadline)"};
constexpr EnvSetting kConnectTimeout{"HCCL_CONNECT_TIMEOUT", 120, 1, 7200, "seconds"};
constexpr EnvSetting kBufferSize{"HCCL_BUFFSIZE", 200, 1, 65536, "MB"};

std::string rangeText(const EnvSetting& e) {
  return "an integer from " + std::to_string(e.lo) + " to " + std::to_string(e.hi) + " (" +
         e.unit + ")";
}

HcclResult readEnv(const EnvSetting& e, long long* out) {
  const char* text = std::getenv(e.name);
  if (!text) {
    *out = e.fallback;
    return HCCL_SUCCESS;
  }
  if (!npu::env::parseInteger(text, e.lo, e.hi, out)) {
    return setLastError(HCCL_E_PARA, npu::env::invalid(e.name, text, rangeText(e)));
  }
  return HCCL_SUCCESS;
}

HcclResult checkConfig(const HcclCommConfig& c, const char* api) {
  auto bad = [&](const char* field, unsigned long long v, const EnvSetting& e) {
    return setLastError(HCCL_E_PARA, std::string(api) + ": config->" + field + " = " +
                                         std::to_string(v) + " is out of range: expected " +
                                         rangeText(e) + " (the default comes from " + e.name +
                                         ")");
  };
  if (c.execTimeoutSeconds > kExecTimeout.hi) {
    return bad("execTimeoutSeconds", c.execTimeoutSeconds, kExecTimeout);
  }
  if (c.connectTimeoutSeconds < kConnectTimeout.lo || c.connectTimeoutSeconds > kConnectTimeout.hi) {
    return bad("connectTimeoutSeconds", c.connectTimeoutSeconds, kConnectTimeout);
  }
  if (c.bufferSizeMB < static_cast<uint64_t>(kBufferSize.lo) ||
      c.bufferSizeMB > static_cast<uint64_t>(kBufferSize.hi)) {
    return bad("bufferSizeMB", c.bufferSizeMB, kBufferSize);
  }
  return HCCL_SUCCESS;
}

HcclResult para(const std::string& message) { return setLastError(HCCL_E_PARA, message); }

Communicator* asComm(HcclComm comm) { return static_cast<Communicator*>(comm); }

HcclResult checkDtype(HcclDataType t, const char* api, const char* arg = "dataType") {
  if (dtypeSize(t) == 0) {
    return para(std::string(api) + ": " + arg + " = " + std::to_string(static_cast<int>(t)) +
                " is not an HcclDataType (HCCL_DATA_TYPE_INT8 .. HCCL_DATA_TYPE_BOOL)");
  }
  return HCCL_SUCCESS;
}

HcclResult checkOp(HcclReduceOp op, HcclDataType t, const char* api) {
  if (op < HCCL_REDUCE_SUM || op >= HCCL_REDUCE_RESERVED) {
    return para(std::string(api) + ": op = " + std::to_string(static_cast<int>(op)) +
                " is not an HcclReduceOp (HCCL_REDUCE_SUM .. HCCL_REDUCE_AVG)");
  }
  if (!reduceSupported(t, op)) {
    return setLastError(HCCL_E_NOT_SUPPORT, std::string(api) + ": reduce op " +
                                                reduceOpName(op) + " is not supported for " +
                                                dtypeName(t));
  }
  return HCCL_SUCCESS;
}

// count elements of dtype, times `blocks`, must fit in uint64_t bytes.
HcclResult checkCount(uint64_t count, HcclDataType t, uint64_t blocks, const char* api,
                      const char* arg) {
  const uint64_t es = dtypeSize(t);
  if (count != 0 && (UINT64_MAX / es) / blocks < count) {
    return para(std::string(api) + ": " + arg + " = " + std::to_string(count) + " " +
                dtypeName(t) + " elements overflows the byte count");
  }
  return HCCL_SUCCESS;
}

HcclResult checkBuffer(const void* p, uint64_t count, const char* api, const char* arg) {
  if (!p && count > 0) {
    return para(std::string(api) + ": " + arg + " is NULL but the count is " +
                std::to_string(count));
  }
  return HCCL_SUCCESS;
}

HcclResult checkComm(HcclComm comm, const char* api) {
  if (!comm) return para(std::string(api) + ": comm is NULL");
  return HCCL_SUCCESS;
}

HcclResult checkRank(uint32_t r, HcclComm comm, const char* api, const char* arg) {
  const uint32_t n = asComm(comm)->size();
  if (r >= n) {
    return para(std::string(api) + ": " + arg + " = " + std::to_string(r) +
                " is out of range for a communicator of " + std::to_string(n) + " ranks");
  }
  return HCCL_SUCCESS;
}

std::string elements(uint64_t count, HcclDataType t) {
  return std::to_string(count) + " elements " + dtypeName(t);
}

#define HCCL_CHECK(expr)                               \
  do {                                                 \
    if (HcclResult hccl_check_ = (expr)) return hccl_check_; \
  } while (0)

HcclResult launch(HcclComm comm, npuStream_t stream, const char* api, const std::string& what,
                  std::function<Status(Communicator&, OpContext&)> body,
                  bool collective = true) {
  Communicator* c = asComm(comm);
  auto op = std::make_unique<PendingOp>();
  op->collective = collective;
  op->description = c->describe(api, what, &op->sequence);
  op->body = [c, body = std::move(body)](OpContext& ctx) { return body(*c, ctx); };
  return c->enqueue(stream, api, std::move(op));
}

HcclResult initCommon(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                      const uint32_t* nodeOfRank, const HcclInterNodeOps* interNode,
                      const HcclCommConfig* config, HcclComm* comm, const char* api) {
  if (!comm) return para(std::string(api) + ": comm (the output) is NULL");
  *comm = nullptr;
  if (!rootInfo) return para(std::string(api) + ": rootInfo is NULL");
  if (nRanks == 0) return para(std::string(api) + ": nRanks is 0");
  if (rank >= nRanks) {
    return para(std::string(api) + ": rank " + std::to_string(rank) +
                " is out of range for nRanks = " + std::to_string(nRanks));
  }
  RootInfoData root;
  std::memcpy(&root, rootInfo->internal, sizeof root);
  if (std::memcmp(root.magic, kRootMagic, sizeof kRootMagic) != 0) {
    return para(std::string(api) +
                ": rootInfo was not made by HcclGetRootInfo (pass rank 0's bytes unchanged)");
  }
  HcclCommConfig cfg;
  if (config) {
    cfg = *config;
  } else {
    HCCL_CHECK(HcclCommConfigInit(&cfg));
  }
  HCCL_CHECK(checkConfig(cfg, api));
  if (nodeOfRank) {
    uint32_t nNodes = 0;
    for (uint32_t r = 0; r < nRanks; ++r) {
      if (nodeOfRank[r] >= nRanks) {
        return para(std::string(api) + ": nodeOfRank[" + std::to_string(r) + "] = " +
                    std::to_string(nodeOfRank[r]) + " is not a node index below nRanks = " +
                    std::to_string(nRanks));
      }
      nNodes = std::max(nNodes, nodeOfRank[r] + 1);
    }
    if (nNodes > 1 && (!interNode || !interNode->send || !interNode->recv)) {
      return para(std::string(api) + ": the ranks span " + std::to_string(nNodes) +
                  " nodes, so interNode (with send and recv) is required");
    }
  }
  std::unique_ptr<Communicator> c;
  Status s = Communicator::create(nRanks, root, rank, nodeOfRank, interNode, cfg, api, &c);
  if (!s.ok()) return setLastError(s.code, s.message);
  *comm = c.release();
  return HCCL_SUCCESS;
}

}  // namespace

HcclResult setLastError(HcclResult code, const std::string& message) {
  t_lastError = message;
  return code;
}

}  // namespace npu::ccl

using namespace npu::ccl;

extern "C" {

HcclResult HcclCommConfigInit(HcclCommConfig* config) {
  if (!config) return para("HcclCommConfigInit: config is NULL");
  long long exec = 0, connect = 0, buffer = 0;
  HCCL_CHECK(readEnv(kExecTimeout, &exec));
  HCCL_CHECK(readEnv(kConnectTimeout, &connect));
  HCCL_CHECK(readEnv(kBufferSize, &buffer));
  config->execTimeoutSeconds = static_cast<uint32_t>(exec);
  config->connectTimeoutSeconds = static_cast<uint32_t>(connect);
  config->bufferSizeMB = static_cast<uint64_t>(buffer);
  return HCCL_SUCCESS;
}

HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo) {
  if (!rootInfo) return para("HcclGetRootInfo: rootInfo is NULL");
  std::memset(rootInfo, 0, sizeof *rootInfo);
  RootInfoData root{};
  std::memcpy(root.magic, kRootMagic, sizeof kRootMagic);
  std::random_device rd;
  for (size_t i = 0; i < sizeof root.id; i += 4) {
    const uint32_t v = rd();
    std::memcpy(root.id + i, &v, 4);
  }
  gethostname(root.host, sizeof root.host - 1);
  root.pid = static_cast<int32_t>(getpid());
  std::memcpy(rootInfo->internal, &root, sizeof root);
  return HCCL_SUCCESS;
}

HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                                HcclComm* comm) {
  return initCommon(nRanks, rootInfo, rank, nullptr, nullptr, nullptr, comm,
                    "HcclCommInitRootInfo");
}

HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo* rootInfo,
                                      uint32_t rank, const HcclCommConfig* config,
                                      HcclComm* comm) {
  return initCommon(nRanks, rootInfo, rank, nullptr, nullptr, config, comm,
                    "HcclCommInitRootInfoConfig");
}

HcclResult HcclCommInitMultiNode(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                                 const uint32_t* nodeOfRank, const HcclInterNodeOps* interNode,
                                 const HcclCommConfig* config, HcclComm* comm) {
  if (!nodeOfRank) return para("HcclCommInitMultiNode: nodeOfRank is NULL");
  return initCommon(nRanks, rootInfo, rank, nodeOfRank, interNode, config, comm,
                    "HcclCommInitMultiNode");
}

HcclResult HcclCommDestroy(HcclComm comm) {
  HCCL_CHECK(checkComm(comm, "HcclCommDestroy"));
  delete asComm(comm);
  return HCCL_SUCCESS;
}

HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize) {
  HCCL_CHECK(checkComm(comm, "HcclGetRankSize"));
  if (!rankSize) return para("HcclGetRankSize: rankSize is NULL");
  *rankSize = asComm(comm)->size();
  return HCCL_SUCCESS;
}

HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank) {
  HCCL_CHECK(checkComm(comm, "HcclGetRankId"));
  if (!rank) return para("HcclGetRankId: rank is NULL");
  *rank = asComm(comm)->rank();
  return HCCL_SUCCESS;
}

HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError) {
  HCCL_CHECK(checkComm(comm, "HcclGetCommAsyncError"));
  if (!asyncError) return para("HcclGetCommAsyncError: asyncError is NULL");
  *asyncError = asComm(comm)->asyncError();
  return HCCL_SUCCESS;
}

HcclResult HcclCommAbort(HcclComm comm) {
  HCCL_CHECK(checkComm(comm, "HcclCommAbort"));
  asComm(comm)->abort();
  return HCCL_SUCCESS;
}

HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType,
                         HcclReduceOp op, HcclComm comm, npuStream_t stream) {
  const char* api = "HcclAllReduce";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkOp(op, dataType, api));
  HCCL_CHECK(checkCount(count, dataType, 1, api, "count"));
  HCCL_CHECK(checkBuffer(sendBuf, count, api, "sendBuf"));
  HCCL_CHECK(checkBuffer(recvBuf, count, api, "recvBuf"));
  return launch(comm, stream, api, elements(count, dataType),
                [=](Communicator& c, OpContext& ctx) {
                  return c.allReduce(sendBuf, recvBuf, count, dataType, op, ctx);
                });
}

HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root,
                         HcclComm comm, npuStream_t stream) {
  const char* api = "HcclBroadcast";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkCount(count, dataType, 1, api, "count"));
  HCCL_CHECK(checkBuffer(buf, count, api, "buf"));
  HCCL_CHECK(checkRank(root, comm, api, "root"));
  const uint64_t bytes = count * dtypeSize(dataType);
  return launch(comm, stream, api, elements(count, dataType) + ", root " + std::to_string(root),
                [=](Communicator& c, OpContext& ctx) { return c.broadcast(buf, bytes, root, ctx); });
}

HcclResult HcclReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType,
                      HcclReduceOp op, uint32_t root, HcclComm comm, npuStream_t stream) {
  const char* api = "HcclReduce";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkOp(op, dataType, api));
  HCCL_CHECK(checkCount(count, dataType, 1, api, "count"));
  HCCL_CHECK(checkRank(root, comm, api, "root"));
  HCCL_CHECK(checkBuffer(sendBuf, count, api, "sendBuf"));
  if (asComm(comm)->rank() == root) HCCL_CHECK(checkBuffer(recvBuf, count, api, "recvBuf (on the root)"));
  return launch(comm, stream, api, elements(count, dataType) + ", root " + std::to_string(root),
                [=](Communicator& c, OpContext& ctx) {
                  return c.reduce(sendBuf, recvBuf, count, dataType, op, root, ctx);
                });
}

HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType,
                         HcclComm comm, npuStream_t stream) {
  const char* api = "HcclAllGather";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkCount(sendCount, dataType, asComm(comm)->size(), api, "sendCount"));
  HCCL_CHECK(checkBuffer(sendBuf, sendCount, api, "sendBuf"));
  HCCL_CHECK(checkBuffer(recvBuf, sendCount, api, "recvBuf"));
  const uint64_t bytes = sendCount * dtypeSize(dataType);
  return launch(comm, stream, api, elements(sendCount, dataType) + " per rank",
                [=](Communicator& c, OpContext& ctx) {
                  return c.allGather(sendBuf, recvBuf, bytes, ctx);
                });
}

HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount,
                             HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                             npuStream_t stream) {
  const char* api = "HcclReduceScatter";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkOp(op, dataType, api));
  HCCL_CHECK(checkCount(recvCount, dataType, asComm(comm)->size(), api, "recvCount"));
  HCCL_CHECK(checkBuffer(sendBuf, recvCount, api, "sendBuf"));
  HCCL_CHECK(checkBuffer(recvBuf, recvCount, api, "recvBuf"));
  return launch(comm, stream, api, elements(recvCount, dataType) + " per rank",
                [=](Communicator& c, OpContext& ctx) {
                  return c.reduceScatter(sendBuf, recvBuf, recvCount, dataType, op, ctx);
                });
}

HcclResult HcclAlltoAll(const void* sendBuf, uint64_t sendCount, HcclDataType sendType,
                        const void* recvBuf, uint64_t recvCount, HcclDataType recvType,
                        HcclComm comm, npuStream_t stream) {
  const char* api = "HcclAlltoAll";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(sendType, api, "sendType"));
  HCCL_CHECK(checkDtype(recvType, api, "recvType"));
  const uint32_t n = asComm(comm)->size();
  if (sendType != recvType || sendCount != recvCount) {
    return para(std::string(api) + ": sends " + elements(sendCount, sendType) +
                " per rank but receives " + elements(recvCount, recvType) +
                " (the counts and dtypes must be equal)");
  }
  HCCL_CHECK(checkCount(sendCount, sendType, n, api, "sendCount"));
  HCCL_CHECK(checkBuffer(sendBuf, sendCount, api, "sendBuf"));
  HCCL_CHECK(checkBuffer(recvBuf, recvCount, api, "recvBuf"));
  const uint64_t bytes = sendCount * dtypeSize(sendType);
  std::vector<uint64_t> sizes(n, bytes), offsets(n);
  for (uint32_t r = 0; r < n; ++r) offsets[r] = r * bytes;
  void* out = const_cast<void*>(recvBuf);
  return launch(comm, stream, api, elements(sendCount, sendType) + " per rank",
                [=](Communicator& c, OpContext& ctx) {
                  return c.allToAllV(sendBuf, sizes.data(), offsets.data(), out, sizes.data(),
                                     offsets.data(), ctx);
                });
}

HcclResult HcclAlltoAllV(const void* sendBuf, const void* sendCounts, const void* sdispls,
                         HcclDataType sendType, const void* recvBuf, const void* recvCounts,
                         const void* rdispls, HcclDataType recvType, HcclComm comm,
                         npuStream_t stream) {
  const char* api = "HcclAlltoAllV";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(sendType, api, "sendType"));
  HCCL_CHECK(checkDtype(recvType, api, "recvType"));
  if (sendType != recvType) {
    return para(std::string(api) + ": sendType " + dtypeName(sendType) + " differs from recvType " +
                dtypeName(recvType) + " (they must be equal)");
  }
  if (!sendCounts || !sdispls || !recvCounts || !rdispls) {
    return para(std::string(api) + ": sendCounts, sdispls, recvCounts and rdispls must not be NULL");
  }
  const uint32_t n = asComm(comm)->size();
  const uint64_t es = dtypeSize(sendType);
  std::vector<uint64_t> sb(n), so(n), rb(n), ro(n);
  auto take = [&](const void* counts, const void* displs, std::vector<uint64_t>& bytes,
                  std::vector<uint64_t>& offsets, const void* buf, const char* what) {
    const auto* c = static_cast<const uint64_t*>(counts);
    const auto* d = static_cast<const uint64_t*>(displs);
    for (uint32_t r = 0; r < n; ++r) {
      const std::string where = std::string(what) + "[" + std::to_string(r) + "]";
      HCCL_CHECK(checkCount(c[r], sendType, 1, api, (where + " count").c_str()));
      HCCL_CHECK(checkCount(d[r], sendType, 1, api, (where + " displacement").c_str()));
      if (c[r] > 0 && d[r] * es > UINT64_MAX - c[r] * es) {
        return para(std::string(api) + ": " + where + ": displacement + count overflows");
      }
      HCCL_CHECK(checkBuffer(buf, c[r], api, what));
      bytes[r] = c[r] * es;
      offsets[r] = d[r] * es;
    }
    return HCCL_SUCCESS;
  };
  HCCL_CHECK(take(sendCounts, sdispls, sb, so, sendBuf, "sendCounts"));
  HCCL_CHECK(take(recvCounts, rdispls, rb, ro, recvBuf, "recvCounts"));
  void* out = const_cast<void*>(recvBuf);
  return launch(comm, stream, api, std::string(dtypeName(sendType)) + " blocks",
                [=](Communicator& c, OpContext& ctx) {
                  return c.allToAllV(sendBuf, sb.data(), so.data(), out, rb.data(), ro.data(),
                                     ctx);
                });
}

HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                    HcclComm comm, npuStream_t stream) {
  const char* api = "HcclSend";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkCount(count, dataType, 1, api, "count"));
  HCCL_CHECK(checkBuffer(sendBuf, count, api, "sendBuf"));
  HCCL_CHECK(checkRank(destRank, comm, api, "destRank"));
  const uint64_t bytes = count * dtypeSize(dataType);
  return launch(comm, stream, api,
                elements(count, dataType) + " to rank " + std::to_string(destRank),
                [=](Communicator& c, OpContext& ctx) {
                  return c.send(sendBuf, bytes, destRank, ctx);
                }, /*collective=*/false);
}

HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                    HcclComm comm, npuStream_t stream) {
  const char* api = "HcclRecv";
  HCCL_CHECK(checkComm(comm, api));
  HCCL_CHECK(checkDtype(dataType, api));
  HCCL_CHECK(checkCount(count, dataType, 1, api, "count"));
  HCCL_CHECK(checkBuffer(recvBuf, count, api, "recvBuf"));
  HCCL_CHECK(checkRank(srcRank, comm, api, "srcRank"));
  const uint64_t bytes = count * dtypeSize(dataType);
  return launch(comm, stream, api,
                elements(count, dataType) + " from rank " + std::to_string(srcRank),
                [=](Communicator& c, OpContext& ctx) {
                  return c.recv(recvBuf, bytes, srcRank, ctx);
                }, /*collective=*/false);
}

HcclResult HcclBarrier(HcclComm comm, npuStream_t stream) {
  const char* api = "HcclBarrier";
  HCCL_CHECK(checkComm(comm, api));
  return launch(comm, stream, api, "",
                [](Communicator& c, OpContext& ctx) { return c.barrier(ctx); });
}

const char* HcclGetErrorString(HcclResult code) {
  switch (code) {
    case HCCL_SUCCESS: return "HCCL_SUCCESS: success";
    case HCCL_E_PARA: return "HCCL_E_PARA: invalid argument";
    case HCCL_E_PTR: return "HCCL_E_PTR: invalid pointer";
    case HCCL_E_MEMORY: return "HCCL_E_MEMORY: out of memory";
    case HCCL_E_INTERNAL: return "HCCL_E_INTERNAL: internal error";
    case HCCL_E_NOT_SUPPORT: return "HCCL_E_NOT_SUPPORT: not supported";
    case HCCL_E_NOT_FOUND: return "HCCL_E_NOT_FOUND: not found";
    case HCCL_E_UNAVAIL: return "HCCL_E_UNAVAIL: communicator unavailable";
    case HCCL_E_SYSCALL: return "HCCL_E_SYSCALL: system call failed";
    case HCCL_E_TIMEOUT: return "HCCL_E_TIMEOUT: a peer did not arrive before the deadline";
    case HCCL_E_OPEN_FILE_FAILURE: return "HCCL_E_OPEN_FILE_FAILURE: cannot open a file";
    case HCCL_E_TCP_CONNECT: return "HCCL_E_TCP_CONNECT: TCP connection failed";
    case HCCL_E_ROCE_CONNECT: return "HCCL_E_ROCE_CONNECT: RoCE connection failed";
    case HCCL_E_TCP_TRANSFER: return "HCCL_E_TCP_TRANSFER: inter-node transfer failed";
    case HCCL_E_ROCE_TRANSFER: return "HCCL_E_ROCE_TRANSFER: RoCE transfer failed";
    case HCCL_E_RUNTIME: return "HCCL_E_RUNTIME: the npu runtime refused";
    case HCCL_E_DRV: return "HCCL_E_DRV: driver error";
    case HCCL_E_PROFILING: return "HCCL_E_PROFILING: profiling error";
    case HCCL_E_CCE: return "HCCL_E_CCE: CCE error";
    case HCCL_E_NETWORK: return "HCCL_E_NETWORK: network error";
    case HCCL_E_AGAIN: return "HCCL_E_AGAIN: try again";
    case HCCL_E_REMOTE: return "HCCL_E_REMOTE: a peer failed the operation";
    default: return "HCCL_E_RESERVED: unknown result code";
  }
}

const char* HcclGetLastErrorMessage(void) { return t_lastError.c_str(); }

const char* HcclGetCommErrorMessage(HcclComm comm) {
  if (!comm) return "";
  return asComm(comm)->asyncErrorMessage();
}

}  // extern "C"
