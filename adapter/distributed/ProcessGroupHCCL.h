// ProcessGroupHCCL: the "hccl" backend of torch.distributed, a c10d::Backend over the collectives
// library of ccl/ (include/npu/hccl.h), as torch_npu's ProcessGroupHCCL adapts CANN's HCCL.
//
// How it works:
//  - One communicator, made lazily by the first collective (on the rank's device: a rank uses one
//    device, and a tensor on another is a clear error): rank 0
//    asks HcclGetRootInfo for a root id, puts its bytes in the c10d store under a key numbered
//    by the order in which this group creates communicators, and every rank builds the
//    communicator from it (HcclCommInitRootInfoConfig, or HcclCommInitMultiNode when the group
//    spans nodes: then a Gloo group made by the Python side carries the hops between nodes).
//  - Stream semantics are NCCL's: a collective runs on the group's own stream of the device,
//    after an event that makes it wait for the caller's current stream. Work::wait() makes the
//    caller's current stream wait for the collective's end event (the host does not block,
//    except for barrier and with HCCL_BLOCKING_WAIT=1). Tensors used by a collective are marked
//    used by the comm stream in the caching allocator (recordStream), so freeing them early is
//    safe; temporaries are allocated while the comm stream is current. A small collective
//    (up to 1 MiB, not point-to-point, one node) that finds the comm stream idle runs on the
//    calling thread as the stream's tasks (npuStreamBeginHostRun), with the same order and
//    errors and no hand-off between stream workers; its work is then complete on return.
//  - Every collective gets a sequence number. A watchdog thread polls the end events of the
//    works in flight; a collective that failed (the library's deadline, HCCL_EXEC_TIMEOUT or
//    init_process_group(timeout=), expired: a peer died or never arrived) or that is still
//    pending past its deadline plus a grace period becomes torch_npu's "Watchdog caught
//    collective operation timeout" error naming the collective, its sequence number and the
//    library's account of the missing ranks. TORCH_HCCL_ASYNC_ERROR_HANDLING picks what happens
//    next: 1 (default) aborts the communicators and takes the process down, as torch_npu does;
//    2 aborts the communicators and raises the error at the next wait / isCompleted; 3 takes the
//    process down without aborting; 0 only records the error on the work.
//  - Coalescing (startCoalescing / endCoalescing, the coalescing manager): collectives issued in
//    between are queued on the comm stream as they come; endCoalescing returns one work whose end
//    event follows all of them.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "NPUStream.h"
#include "distributed/FlightRecorderHCCL.h"
#include "npu/hccl.h"

namespace c10d {
struct ProcessGroupStatus;
}

namespace torch_npu {

// The watchdog's choices when a collective fails or times out (TORCH_HCCL_ASYNC_ERROR_HANDLING).
enum class AsyncErrorHandling : int {
  kNone = 0,          // record the error on the work; the program sees it at wait()
  kTearDown = 1,      // abort the communicators, print the error and abort the process
  kCleanUpOnly = 2,   // abort the communicators; wait() / isCompleted() raise the error
  kSkipCleanUp = 3,   // print the error and abort the process, communicators left as they are
};

// The inter-node hops of one communicator: the context of its HcclInterNodeOps callbacks.
struct InterNodeLink {
  c10::intrusive_ptr<c10d::Backend> gloo;
  int tag = 0;
  std::chrono::milliseconds timeout{0};
  std::atomic<uint64_t> bytesSent{0};      // SUM: bytes the library sent through Gloo
  std::atomic<uint64_t> bytesReceived{0};  // SUM: bytes it received
};

class ProcessGroupHCCL : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("hccl", timeout) {}
    // nodeOfRank[r]: the node (host + NPU_SIM_RUNTIME_DIR) of group rank r, numbered from 0 in
    // order of first appearance; empty means every rank on one node.
    std::vector<uint32_t> nodeOfRank;
    // The Gloo group (on the same store, under its own prefix) carrying the inter-node hops;
    // required when nodeOfRank names more than one node.
    c10::intrusive_ptr<c10d::Backend> interNodeBackend;
  };

  class WorkHCCL : public c10d::Work {
   public:
    WorkHCCL(int rank, c10d::OpType opType, uint64_t seq, c10::Device device,
             std::chrono::milliseconds timeout);
    ~WorkHCCL() override;

    bool isCompleted() override;
    bool isSuccess() const override;
    // Makes the current stream wait for the collective; blocks the host for barrier, with
    // HCCL_BLOCKING_WAIT=1, or when `timeout` is given. Raises the error the watchdog recorded.
    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    void synchronize() override;
    void abort() override;
    std::vector<at::Tensor> result() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    uint64_t getSequencenumber() const override { return seq_; }
    // The program dropped its last reference: the outputs and the future go now.
    void release_resources() override;

    // "WorkHCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000)"
    std::string describe() const;

   private:
    friend class ProcessGroupHCCL;

    // Throws the recorded error, if any (the watchdog's, or the one abort() left).
    void throwIfFailed() const;
    // Records `text` as the work's error unless one is recorded already.
    void setError(const std::string& text);
    std::string errorText() const;
    // The end event's state: npuSuccess, npuErrorNotReady or the failure of the collective.
    npuError_t queryEnd() const;
    // True when the work has failed; the first thread to see the failure of its end event
    // records the error (the library's account of it, in torch_npu's watchdog wording).
    bool checkFailed();
    // Whether the failure was the deadline expiring (rather than, say, a peer seen gone early).
    bool failedByTimeout() const;
    std::chrono::milliseconds ranFor() const;
    void blockCurrentStreamOnEnd();

    const uint64_t seq_;
    const c10::Device device_;
    const std::chrono::milliseconds timeout_;
    // When the work's deadline clock started: when it was issued, moved by the watchdog to when
    // the work before it was seen finished (nanoseconds of the steady clock).
    std::atomic<int64_t> watchStartNs_;
    std::atomic<bool> reported_{false};  // the watchdog has acted on its failure
    std::string errorText_;              // guarded by mutex_
    bool timedOutFailure_ = false;       // guarded by mutex_
    npuEvent_t ready_ = nullptr;  // owned; recorded on the caller's stream before the collective
    npuEvent_t end_ = nullptr;    // owned; recorded on the comm stream after the collective
    c10::Stream commStream_;
    HcclComm comm_ = nullptr;
    bool blockingWait_ = false;
    bool barrier_ = false;
    int64_t numelIn_ = 0;
    int64_t numelOut_ = 0;
    std::shared_ptr<std::vector<at::Tensor>> outputs_;
    // Host arrays an asynchronous call may still read (all-to-all counts), and tensors whose
    // memory the caching allocator does not own; released once the work has completed.
    std::vector<std::shared_ptr<void>> keepAlive_;
    std::vector<at::Tensor> stashed_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::mutex futureMutex_;
    // The flight recorder's entry and the events it polls (ready_ and end_).
    std::optional<size_t> traceId_;
    FlightRecorderEvent traceStart_, traceEnd_;
  };

  ProcessGroupHCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options);
  ~ProcessGroupHCCL() override;

  const std::string getBackendName() const override { return "hccl"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void setSequenceNumberForGroup() override {}  // every rank starts at 0
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
  void eagerConnectSingleDevice(at::Device device) override;

  // Test hook: the communicator of `device` (made if needed), as an integer handle.
  HcclComm commForTesting(c10::DeviceIndex device);
  // Bytes sent and received through the inter-node (Gloo) hops so far.
  std::pair<uint64_t, uint64_t> interNodeBytes();
  const std::vector<uint32_t>& nodeOfRank() const { return options_->nodeOfRank; }

 private:
  struct DeviceComm {
    HcclComm comm = nullptr;
    NPUStream stream;
    // Receives of a batch (batch_isend_irecv) run here, beside the sends on `stream`: a send
    // larger than the pair's ring waits for its receiver, so a ring of batched sends and
    // receives on one stream would wait for itself.
    NPUStream recvStream;
    // The end of the last collective that ran on its caller's stream instead of `stream` (see
    // launch), and that stream; owned. Later collectives on other streams wait for it first, so
    // the communicator's collectives still run one after another, in issue order.
    npuEvent_t offStreamEnd = nullptr;
    npuStream_t offStream = nullptr;
  };
  // What a collective's body gets: the communicator and the comm stream, which is current
  // while the body runs (so copies and temporaries belong to it).
  struct Launch {
    HcclComm comm;
    npuStream_t stream;
    c10::Device device;
  };
  using Body = std::function<void(const Launch&, WorkHCCL&)>;

  DeviceComm& commFor(c10::Device device);
  HcclComm createComm(c10::DeviceIndex device);
  // Runs `body` after the current stream's work (on the comm stream of `device`, or for a small
  // collective on the calling thread or the current stream), and returns its work.
  c10::intrusive_ptr<c10d::Work> launch(c10::Device device, c10d::OpType opType,
                                        const std::vector<at::Tensor>& inputs,
                                        const std::vector<at::Tensor>& outputs, const Body& body,
                                        std::chrono::milliseconds timeout,
                                        bool onRecvStream = false, int peer = -1);
  std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;
  // Whether a collective may run on the calling thread when its comm stream is idle (see
  // launch): small, collective (not point-to-point), within one node.
  bool hostRunEligible(c10d::OpType opType, bool onRecvStream,
                       const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& outputs) const;

  // Ends the watchdog after it retired the works in flight (interpreter exit; see
  // stopProcessGroupWatchdogsAtExit). The communicators stay until shutdown().
  void stopWatchdog();
  static std::mutex& liveGroupsMutex();
  static std::set<ProcessGroupHCCL*>& liveGroups();
  friend void stopProcessGroupWatchdogsAtExit();

  void watchdogLoop();
  // One pass over the works in flight; returns how long to sleep before the next.
  std::chrono::milliseconds watchdogPass();
  // Prints the work's error and applies TORCH_HCCL_ASYNC_ERROR_HANDLING.
  void handleFailure(WorkHCCL& work, bool timedOut);
  void abortComms();
  // The flight recorder (FlightRecorderHCCL.h): records a launched work; on a timeout with
  // TORCH_HCCL_DUMP_ON_TIMEOUT=1 dumps this rank, asks the others through the store and waits
  // (a few seconds at most) until they have dumped; the watchdog answers such requests and
  // writes to the debug pipe.
  void traceLaunch(WorkHCCL& work, const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs, int peer);
  void traceRetire(WorkHCCL& work);
  void dumpTrace(const char* why);
  void dumpOnTimeout();
  void pollDumpRequests();

  const c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  const AsyncErrorHandling asyncErrorHandling_;
  const bool blockingWait_;
  HcclCommConfig config_{};
  uint32_t envExecTimeoutSeconds_ = 0;  // HCCL_EXEC_TIMEOUT when set (0 = not set / none)

  std::mutex commMutex_;
  std::map<c10::DeviceIndex, DeviceComm> comms_;
  std::mutex offStreamMutex_;  // DeviceComm::offStreamEnd / offStream (launches from any thread)
  std::vector<std::unique_ptr<InterNodeLink>> links_;
  uint64_t commCounter_ = 0;
  c10::DeviceIndex lastDevice_ = -1;

  std::atomic<uint64_t> seq_{0};

  // Coalescing: collectives issued between startCoalescing and endCoalescing.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<WorkHCCL>> coalesced_;
  bool coalescedRecv_ = false;  // a coalesced receive ran on the receive stream

  // The watchdog and the works it watches (in issue order). Weak references, as NCCL's
  // watchdog keeps copies without the outputs: a work the program has dropped releases its
  // output tensors at once (release_resources), not when the watchdog sees it finish, while
  // its events and state stay for the watchdog until it retires the entry. The allocator's
  // record of the comm stream's use keeps those blocks safe meanwhile.
  std::mutex workMutex_;
  std::condition_variable workCv_;
  std::deque<c10::weak_intrusive_ptr<WorkHCCL>> inFlight_;
  bool stopping_ = false;  // the watchdog leaves once nothing is in flight
  bool shutDown_ = false;  // shutdown() ran: communicators destroyed
  std::atomic<bool> failed_{false};
  std::atomic<bool> timedOut_{false};
  std::thread watchdog_;

  // Flight recorder state (used only when it is on).
  const size_t traceGroupId_;
  std::shared_ptr<c10d::ProcessGroupStatus> traceStatus_;
  std::chrono::steady_clock::time_point nextDumpPoll_{};
  bool traceDumped_ = false;  // this rank answered a dump request of the group
  std::once_flag traceRanksRecorded_;
  int tracePipe_ = -1;        // the debug pipe, opened non-blocking for reading
};

// A process-wide id for each group made (the flight recorder's pg_id).
size_t nextTraceGroupId();

// Stops the watchdog of every live group (call without the GIL, before finalization).
void stopProcessGroupWatchdogsAtExit();

// torch_npu's error-code suffix: "\n[ERROR] <time> (PID:<pid>, Device:<d>, RankID:<r>). ERR02<code>
// DIST <text>", with codes 1 (invalid parameter), 7 (feature not supported), 11 (timeout
// error) and 200 (call hccl api failed).
std::string distErrorCode(int code, int rank);

}  // namespace torch_npu
