/*
 * SimNPU collective communication: the simulated counterpart of CANN's HCCL (hccl.h).
 *
 * A flat C API with HCCL's names, types and calling shapes, so code written against HCCL reads
 * the same here. No PyTorch in here or below (ccl/ is a core folder); the c10d backend
 * ProcessGroupHCCL in adapter/ adapts it to torch.distributed.
 *
 * Model:
 *  - A communicator is a group of nRanks ranks, usually one process per simulated device
 *    (torchrun starts one process per device). It is made from a root id shared out of band:
 *    rank 0 calls HcclGetRootInfo, sends the bytes to every rank (torch.distributed's store
 *    does this), and every rank calls HcclCommInitRootInfo with it.
 *  - Every collective is enqueued asynchronously on an npu stream, like any kernel: it returns
 *    at once, and runs on the stream's worker in stream order. Buffers are device memory of the
 *    calling process (npuMalloc) and must stay valid until the stream has run the task.
 *    Errors surface as stream errors (npuStreamSynchronize) and as the communicator's async
 *    error (HcclGetCommAsyncError).
 *  - Two transports behind one small interface:
 *      intra-node: POSIX shared memory between the rank processes of one host, lock-free
 *        flags, algorithm chosen by message size, chunked and pipelined;
 *      inter-node: an existing engine supplied by the caller (ProcessGroupHCCL gives Gloo over
 *        TCP) through HcclInterNodeOps, used only for the hops between hosts.
 *    A "node" is a host plus its NPU_SIM_RUNTIME_DIR, so two runtime dirs on one machine are
 *    two nodes (that is how the inter-node path is tested on one machine).
 *  - Every wait has a deadline (HCCL_CONNECT_TIMEOUT for init, HCCL_EXEC_TIMEOUT or the
 *    communicator's config for collectives): a peer that crashed or never arrives becomes
 *    HCCL_E_TIMEOUT with a message naming the operation, its sequence number and the ranks
 *    that did not arrive (HcclGetLastErrorMessage), never a hang.
 *  - Reductions of float16 and bfloat16 accumulate in float32 and round once.
 *
 * Environment (read at communicator creation; a bad value is HCCL_E_PARA with a message naming
 * the variable, its value and the accepted range):
 *   HCCL_CONNECT_TIMEOUT  seconds to wait for every rank to join (default 120, 120..7200 on
 *                         HCCL; here 1..7200 so tests can be short)
 *   HCCL_EXEC_TIMEOUT     seconds a collective may wait for its peers (default 1836, 1..17340;
 *                         0 means no deadline as on HCCL)
 *   HCCL_BUFFSIZE         MB of shared staging buffer per rank (default 200, 1..65536): bounds
 *                         the chunks collectives stage (at most 2 x 2 MB per rank) and sizes
 *                         the point-to-point rings (a rank's HCCL_BUFFSIZE shared among its
 *                         peers). Shared memory commits only the pages that are touched.
 *
 * Ordering rules (as NCCL's): every rank calls the collectives of a communicator in the same
 * order with matching counts; they run one at a time per communicator. Send and recv of a pair
 * match in order and count. A send within a node completes once its bytes are in the pair's
 * ring, so two ranks may both send before they receive while each message fits the ring; a
 * larger send waits for its receiver (receive on another stream, or order the calls). Between
 * nodes the inter-node ops' own blocking rules apply.
 *
 * A rank of the same node whose process exits is noticed within about 50 ms (HCCL_E_TIMEOUT,
 * "its process has exited"), without waiting for the deadline. A rank that gives up (an error
 * or HcclCommAbort) ends its node's peers' waits at once (HCCL_E_TIMEOUT naming the ranks that
 * did not arrive when it timed out, HCCL_E_REMOTE otherwise).
 */
#ifndef NPU_HCCL_H_
#define NPU_HCCL_H_

#include <stddef.h>
#include <stdint.h>

#include "npu/runtime.h"

#if defined(NPU_CCL_BUILD)
#define HCCL_API __attribute__((visibility("default")))
#else
#define HCCL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* HCCL's result codes, same values. */
typedef enum HcclResult {
  HCCL_SUCCESS = 0,
  HCCL_E_PARA = 1,        /* bad argument: null pointer, bad count, bad rank, bad env value */
  HCCL_E_PTR = 2,         /* null or invalid pointer */
  HCCL_E_MEMORY = 3,      /* out of (shared) memory */
  HCCL_E_INTERNAL = 4,
  HCCL_E_NOT_SUPPORT = 5, /* dtype/op combination or feature not supported */
  HCCL_E_NOT_FOUND = 6,
  HCCL_E_UNAVAIL = 7,     /* communicator unusable (destroyed, or broken by an earlier error) */
  HCCL_E_SYSCALL = 8,     /* shm_open / mmap / ... failed */
  HCCL_E_TIMEOUT = 9,     /* a peer did not arrive before the deadline */
  HCCL_E_OPEN_FILE_FAILURE = 10,
  HCCL_E_TCP_CONNECT = 11,
  HCCL_E_ROCE_CONNECT = 12,
  HCCL_E_TCP_TRANSFER = 13, /* the inter-node transport failed */
  HCCL_E_ROCE_TRANSFER = 14,
  HCCL_E_RUNTIME = 15,    /* the npu runtime refused (bad stream, launch failed) */
  HCCL_E_DRV = 16,
  HCCL_E_PROFILING = 17,
  HCCL_E_CCE = 18,
  HCCL_E_NETWORK = 19,
  HCCL_E_AGAIN = 20,
  HCCL_E_REMOTE = 21,     /* a peer reported an error (it failed the same collective) */
  HCCL_E_RESERVED
} HcclResult;

/* HCCL's data types, same values. */
typedef enum HcclDataType {
  HCCL_DATA_TYPE_INT8 = 0,
  HCCL_DATA_TYPE_INT16 = 1,
  HCCL_DATA_TYPE_INT32 = 2,
  HCCL_DATA_TYPE_FP16 = 3,
  HCCL_DATA_TYPE_FP32 = 4,
  HCCL_DATA_TYPE_INT64 = 5,
  HCCL_DATA_TYPE_UINT64 = 6,
  HCCL_DATA_TYPE_UINT8 = 7,
  HCCL_DATA_TYPE_UINT16 = 8,
  HCCL_DATA_TYPE_UINT32 = 9,
  HCCL_DATA_TYPE_FP64 = 10,
  HCCL_DATA_TYPE_BFP16 = 11,
  HCCL_DATA_TYPE_BOOL = 12, /* SimNPU: torch.bool (max = or, min = and, sum = or, prod = and) */
  HCCL_DATA_TYPE_RESERVED
} HcclDataType;

/* HCCL's reduce ops (same values) plus AVG, which HCCL lacks and c10d's ReduceOp.AVG needs. */
typedef enum HcclReduceOp {
  HCCL_REDUCE_SUM = 0,
  HCCL_REDUCE_PROD = 1,
  HCCL_REDUCE_MAX = 2,
  HCCL_REDUCE_MIN = 3,
  HCCL_REDUCE_AVG = 4, /* SimNPU: sum / nRanks, computed in the accumulation type */
  HCCL_REDUCE_RESERVED
} HcclReduceOp;

#define HCCL_ROOT_INFO_BYTES 4108 /* HCCL's size */
typedef struct HcclRootInfo {
  char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

typedef void* HcclComm;

/* Per-communicator settings (a subset of HCCL's HcclCommConfig). Initialise with
 * HcclCommConfigInit, then set what differs. */
typedef struct HcclCommConfig {
  uint32_t execTimeoutSeconds;    /* collective deadline; 0 = none; default from env */
  uint32_t connectTimeoutSeconds; /* init deadline; default from env */
  uint64_t bufferSizeMB;          /* shared staging per rank; default from HCCL_BUFFSIZE */
} HcclCommConfig;

/* The hops between hosts, supplied by the caller. Called from stream workers, possibly from
 * several threads for different communicators but never concurrently for one communicator.
 * Ranks are ranks of the communicator. Each call blocks until done or fails; it returns
 * HCCL_SUCCESS or an error (HCCL_E_TCP_TRANSFER, HCCL_E_TIMEOUT) and may leave a message in
 * `error` (at most errorLen bytes, NUL-terminated). */
typedef struct HcclInterNodeOps {
  void* ctx;
  HcclResult (*send)(void* ctx, const void* buf, uint64_t bytes, uint32_t peerRank, char* error,
                     size_t errorLen);
  HcclResult (*recv)(void* ctx, void* buf, uint64_t bytes, uint32_t peerRank, char* error,
                     size_t errorLen);
} HcclInterNodeOps;

/* ---- communicators ------------------------------------------------------------------------ */
HCCL_API HcclResult HcclCommConfigInit(HcclCommConfig* config); /* from the environment */
HCCL_API HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo);
/* All nRanks ranks on one node. Blocks until every rank has joined or the connect deadline. */
HCCL_API HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo,
                                         uint32_t rank, HcclComm* comm);
HCCL_API HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo* rootInfo,
                                               uint32_t rank, const HcclCommConfig* config,
                                               HcclComm* comm);
/* SimNPU: ranks spread over nodes. nodeOfRank[r] is the node index (0..nNodes-1) of rank r,
 * the same array on every rank; ranks of one node share memory, and interNode carries the hops
 * between nodes (required when there is more than one node, ignored otherwise). */
HCCL_API HcclResult HcclCommInitMultiNode(uint32_t nRanks, const HcclRootInfo* rootInfo,
                                          uint32_t rank, const uint32_t* nodeOfRank,
                                          const HcclInterNodeOps* interNode,
                                          const HcclCommConfig* config, HcclComm* comm);
/* Like HCCL, the caller synchronizes the streams that use the communicator first. Destroy
 * unmaps and unlinks the shared memory; safe on a broken communicator. */
HCCL_API HcclResult HcclCommDestroy(HcclComm comm);
HCCL_API HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize);
HCCL_API HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank);
/* HCCL_SUCCESS, or the first error a collective of this communicator hit (it stays). */
HCCL_API HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError);
/* Marks the communicator broken and wakes every waiter of it with HCCL_E_UNAVAIL (used by the
 * watchdog when it gives up, so a stream stuck in a collective is released). */
HCCL_API HcclResult HcclCommAbort(HcclComm comm);

/* ---- collectives (asynchronous on `stream`) ---------------------------------------------- */
HCCL_API HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count,
                                  HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                  npuStream_t stream);
HCCL_API HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType,
                                  uint32_t root, HcclComm comm, npuStream_t stream);
HCCL_API HcclResult HcclReduce(void* sendBuf, void* recvBuf, uint64_t count,
                               HcclDataType dataType, HcclReduceOp op, uint32_t root,
                               HcclComm comm, npuStream_t stream);
/* recvBuf holds nRanks * sendCount elements, rank r's block at r * sendCount. */
HCCL_API HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount,
                                  HcclDataType dataType, HcclComm comm, npuStream_t stream);
/* sendBuf holds nRanks * recvCount elements; rank r receives the reduction of block r. */
HCCL_API HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount,
                                      HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                      npuStream_t stream);
/* Equal blocks: sendBuf and recvBuf hold nRanks * count elements. */
HCCL_API HcclResult HcclAlltoAll(const void* sendBuf, uint64_t sendCount, HcclDataType sendType,
                                 const void* recvBuf, uint64_t recvCount, HcclDataType recvType,
                                 HcclComm comm, npuStream_t stream);
/* Counts and displacements are uint64_t arrays of nRanks elements, in elements. */
HCCL_API HcclResult HcclAlltoAllV(const void* sendBuf, const void* sendCounts,
                                  const void* sdispls, HcclDataType sendType,
                                  const void* recvBuf, const void* recvCounts,
                                  const void* rdispls, HcclDataType recvType, HcclComm comm,
                                  npuStream_t stream);
HCCL_API HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType,
                             uint32_t destRank, HcclComm comm, npuStream_t stream);
HCCL_API HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType,
                             uint32_t srcRank, HcclComm comm, npuStream_t stream);
HCCL_API HcclResult HcclBarrier(HcclComm comm, npuStream_t stream);

/* ---- errors ------------------------------------------------------------------------------- */
HCCL_API const char* HcclGetErrorString(HcclResult code); /* "HCCL_E_TIMEOUT: ..." */
/* The detailed message of the last failed call on this thread. */
HCCL_API const char* HcclGetLastErrorMessage(void);
/* The detailed message of the communicator's async error ("" if none); valid until destroy. */
HCCL_API const char* HcclGetCommErrorMessage(HcclComm comm);

#ifdef __cplusplus
}
#endif

#endif /* NPU_HCCL_H_ */
