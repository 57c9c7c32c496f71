// ProcessGroupHCCL: see ProcessGroupHCCL.h for how it works.
#include "distributed/ProcessGroupHCCL.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "NPUAllocator.h"
#include "NPUException.h"
#include "NPUFunctions.h"
#include "Sanitizer.h"

namespace torch_npu {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

// torch_npu's ErrCode values used here.
constexpr int kErrParam = 1;
constexpr int kErrNotSupport = 7;
constexpr int kErrTimeout = 11;
constexpr int kErrHccl = 200;

const char* errCodeText(int code) {
  switch (code) {
    case kErrParam: return "invalid parameter";
    case kErrNotSupport: return "feature not supported";
    case kErrTimeout: return "timeout error";
    default: return "call hccl api failed";
  }
}

int errCodeOf(HcclResult result) {
  switch (result) {
    case HCCL_E_PARA: return kErrParam;
    case HCCL_E_NOT_SUPPORT: return kErrNotSupport;
    case HCCL_E_TIMEOUT: return kErrTimeout;
    default: return kErrHccl;
  }
}

std::exception_ptr distError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message));
}

[[noreturn]] void throwHccl(HcclResult result, const char* call, int rank) {
  const char* detail = HcclGetLastErrorMessage();
  const std::string function(call, std::strcspn(call, "("));  // "HcclAllReduce(...)" -> name
  const std::string message =
      c10::str("HCCL function call failed: ", function, " returned ", HcclGetErrorString(result),
               (detail && *detail) ? c10::str(": ", detail) : std::string(),
               distErrorCode(errCodeOf(result), rank));
  if (result == HCCL_E_PARA) C10_THROW_ERROR(ValueError, message);
  if (result == HCCL_E_NOT_SUPPORT) C10_THROW_ERROR(NotImplementedError, message);
  C10_THROW_ERROR(DistBackendError, message);
}

#define HCCL_CALL(rank, expr)                                        \
  do {                                                               \
    const HcclResult hccl_call_result_ = (expr);                     \
    if (C10_UNLIKELY(hccl_call_result_ != HCCL_SUCCESS)) {           \
      throwHccl(hccl_call_result_, #expr, (rank));                   \
    }                                                                \
  } while (0)

// ---- environment ---------------------------------------------------------------------------

// An integer environment variable in [lo, hi], or `fallback` when unset; anything else is a
// clear error naming the variable, its value and the range.
int64_t envInt(const char* name, int64_t fallback, int64_t lo, int64_t hi, const char* meaning) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(raw, &end, 10);
  TORCH_CHECK_VALUE(errno == 0 && end != raw && *end == '\0' && value >= lo && value <= hi,
                    name, "=", raw, " is not valid: ", meaning, "; expected an integer from ",
                    lo, " to ", hi, ". Fix or unset it.", distErrorCode(kErrParam, -1));
  return value;
}

AsyncErrorHandling asyncErrorHandlingFromEnv() {
  return static_cast<AsyncErrorHandling>(envInt(
      "TORCH_HCCL_ASYNC_ERROR_HANDLING", 1, 0, 3,
      "TORCH_HCCL_ASYNC_ERROR_HANDLING says what a failed or timed-out collective does: 0 "
      "nothing (wait() raises), 1 abort the communicators and take the process down (default), "
      "2 abort the communicators only, 3 take the process down only"));
}

bool blockingWaitFromEnv() {
  const int64_t torch_name = envInt("TORCH_HCCL_BLOCKING_WAIT", -1, 0, 1,
                                    "TORCH_HCCL_BLOCKING_WAIT=1 makes wait() block the host");
  if (torch_name >= 0) return torch_name == 1;
  return envInt("HCCL_BLOCKING_WAIT", 0, 0, 1, "HCCL_BLOCKING_WAIT=1 makes wait() block the host") ==
         1;
}

// ---- tensors -------------------------------------------------------------------------------

struct HcclType {
  HcclDataType type;
  int64_t count_scale;  // complex numbers reduce as pairs of reals
};

HcclType reductionType(const at::Tensor& t, const char* opName) {
  switch (t.scalar_type()) {
    case at::kFloat: return {HCCL_DATA_TYPE_FP32, 1};
    case at::kHalf: return {HCCL_DATA_TYPE_FP16, 1};
    case at::kBFloat16: return {HCCL_DATA_TYPE_BFP16, 1};
    case at::kDouble: return {HCCL_DATA_TYPE_FP64, 1};
    case at::kChar: return {HCCL_DATA_TYPE_INT8, 1};
    case at::kShort: return {HCCL_DATA_TYPE_INT16, 1};
    case at::kInt: return {HCCL_DATA_TYPE_INT32, 1};
    case at::kLong: return {HCCL_DATA_TYPE_INT64, 1};
    case at::kByte: return {HCCL_DATA_TYPE_UINT8, 1};
    case at::kUInt16: return {HCCL_DATA_TYPE_UINT16, 1};
    case at::kUInt32: return {HCCL_DATA_TYPE_UINT32, 1};
    case at::kUInt64: return {HCCL_DATA_TYPE_UINT64, 1};
    case at::kBool: return {HCCL_DATA_TYPE_BOOL, 1};
    case at::kComplexFloat: return {HCCL_DATA_TYPE_FP32, 2};
    case at::kComplexDouble: return {HCCL_DATA_TYPE_FP64, 2};
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "ProcessGroupHCCL ", opName, ": dtype ", t.scalar_type(),
                              " is not supported for reductions (float32/16, bfloat16, float64, "
                              "int8/16/32/64, uint8/16/32/64, bool are). Cast the tensor first.",
                              distErrorCode(kErrNotSupport, -1));
}

// PREMUL_SUM scales each rank's tensor by a factor before the sum. As in NCCL's backend the
// factor is a scalar of the data's arithmetic type: half for float16, float for float32 and
// bfloat16 (and complex64), double for float64 (and complex128). Integer and bool tensors are
// refused (a fractional factor has no integer result).
at::ScalarType premulFactorType(at::ScalarType data) {
  switch (data) {
    case at::kHalf: return at::kHalf;
    case at::kFloat:
    case at::kBFloat16:
    case at::kComplexFloat: return at::kFloat;
    case at::kDouble:
    case at::kComplexDouble: return at::kDouble;
    default: return at::ScalarType::Undefined;
  }
}

// A floating factor of dtype `from` converts to `to` without rounding (every value of `from`
// is a value of `to`).
bool convertsExactly(at::ScalarType from, at::ScalarType to) {
  if (from == to) return true;
  switch (to) {
    case at::kFloat: return from == at::kHalf || from == at::kBFloat16;
    case at::kDouble: return from == at::kHalf || from == at::kBFloat16 || from == at::kFloat;
    default: return false;
  }
}

void checkPremulSum(const c10d::ReduceOp& op, const at::Tensor& t, const char* opName) {
  const at::ScalarType factorType = premulFactorType(t.scalar_type());
  TORCH_CHECK_TYPE(factorType != at::ScalarType::Undefined, "ProcessGroupHCCL ", opName,
                   ": PreMulSum Data type must be half, float, bfloat16 or double, got ",
                   t.scalar_type(), ". Scale an integer tensor yourself and use ReduceOp.SUM.",
                   distErrorCode(kErrNotSupport, -1));
  auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK_VALUE(supplement != nullptr, "ProcessGroupHCCL ", opName,
                    ": PREMUL_SUM without its factor; make the op with "
                    "torch.distributed._make_nccl_premul_sum(factor)",
                    distErrorCode(kErrParam, -1));
  const at::Tensor& factor = supplement->tensor_factor;  // one element (PreMulSumSupplement)
  if (!factor.defined()) return;
  TORCH_CHECK_TYPE(convertsExactly(factor.scalar_type(), factorType), "ProcessGroupHCCL ",
                   opName, ": the PREMUL_SUM factor is a ", factor.scalar_type(),
                   " tensor, but a ", t.scalar_type(), " tensor is scaled by a ", factorType,
                   " factor (as in NCCL's backend), and ", factor.scalar_type(), " -> ",
                   factorType, " would round it. Make the factor a ", factorType, " tensor.",
                   distErrorCode(kErrParam, -1));
}

HcclReduceOp hcclOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* opName) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return HCCL_REDUCE_SUM;
    case c10d::ReduceOp::PREMUL_SUM:
      checkPremulSum(op, t, opName);
      return HCCL_REDUCE_SUM;  // premultiplied by the caller
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_TYPE(t.scalar_type() != at::kBool, "ProcessGroupHCCL ", opName,
                       ": Cannot use ReduceOp.AVG with boolean inputs",
                       distErrorCode(kErrNotSupport, -1));
      return HCCL_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT: return HCCL_REDUCE_PROD;
    case c10d::ReduceOp::MIN: return HCCL_REDUCE_MIN;
    case c10d::ReduceOp::MAX: return HCCL_REDUCE_MAX;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (t.scalar_type() == at::kBool) {
        // On booleans the bitwise ops are the logical ones, which the library has.
        if (op.op_ == c10d::ReduceOp::BAND) return HCCL_REDUCE_MIN;
        if (op.op_ == c10d::ReduceOp::BOR) return HCCL_REDUCE_MAX;
      }
      break;
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "ProcessGroupHCCL ", opName, ": ReduceOp ",
                              static_cast<int>(op.op_),
                              " is not supported (SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM are; "
                              "BAND/BOR on bool). Use the gloo backend on CPU tensors for "
                              "bitwise reductions.",
                              distErrorCode(kErrNotSupport, -1));
}

// Every tensor of a collective: a dense, contiguous npu tensor on `device`.
void checkTensor(const at::Tensor& t, const c10::Device& device, const char* opName,
                 const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "ProcessGroupHCCL ", opName, ": ", what, " is undefined");
  TORCH_CHECK_VALUE(t.device().type() == kNPU, "ProcessGroupHCCL ", opName, ": ", what,
                    " is on ", t.device(),
                    ", but the hccl backend only takes npu tensors. Move it with .npu(), or use "
                    "a gloo group for CPU tensors (init_process_group('cpu:gloo,npu:hccl')).",
                    distErrorCode(kErrParam, -1));
  TORCH_CHECK_VALUE(t.device() == device, "ProcessGroupHCCL ", opName, ": ", what, " is on ",
                    t.device(), " but the collective's first tensor is on ", device,
                    "; every tensor of one collective must be on the same npu device.",
                    distErrorCode(kErrParam, -1));
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "ProcessGroupHCCL ", opName, ": ", what,
                    " has layout ", t.layout(), "; only dense tensors are supported.",
                    distErrorCode(kErrParam, -1));
  TORCH_CHECK_VALUE(t.is_non_overlapping_and_dense() && t.is_contiguous(), "ProcessGroupHCCL ",
                    opName, ": ", what,
                    " is not contiguous. Tensors must be contiguous; pass .contiguous().",
                    distErrorCode(kErrParam, -1));
}

c10::Device deviceOf(const std::vector<at::Tensor>& tensors, const char* opName) {
  TORCH_CHECK_VALUE(!tensors.empty(), "ProcessGroupHCCL ", opName, ": no tensors given");
  TORCH_CHECK_VALUE(tensors[0].defined() && tensors[0].device().type() == kNPU,
                    "ProcessGroupHCCL ", opName, ": the tensor is on ",
                    tensors[0].defined() ? tensors[0].device() : c10::Device(at::kCPU),
                    ", but the hccl backend only takes npu tensors. Move it with .npu(), or use "
                    "a gloo group for CPU tensors (init_process_group('cpu:gloo,npu:hccl')).",
                    distErrorCode(kErrParam, -1));
  return tensors[0].device();
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* opName) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "ProcessGroupHCCL ", opName,
                    " takes exactly one tensor per call (one device per process), got ",
                    tensors.size(), distErrorCode(kErrParam, -1));
}

void* ptr(const at::Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// PREMUL_SUM: the factor is applied to `input` before a sum. Returns the tensor to reduce (a
// scaled copy with `input`'s dtype, or `input` itself for the other ops); hcclOp checked the
// op. The product is computed in the factor's type (bfloat16 data in float32) and rounded once
// to the data's dtype, as NCCL's backend scales.
at::Tensor premultiplied(const at::Tensor& input, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return input;
  auto* supplement = static_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  const at::ScalarType factorType = premulFactorType(input.scalar_type());
  const at::Tensor factor =
      supplement->tensor_factor.defined()
          ? supplement->tensor_factor.reshape({}).to(input.device(), factorType)
          : at::scalar_tensor(supplement->double_factor,
                              at::TensorOptions().dtype(factorType).device(input.device()));
  if (input.scalar_type() == at::kBFloat16) {
    return (input.to(at::kFloat) * factor).to(at::kBFloat16);
  }
  at::Tensor scaled = input * factor;
  TORCH_INTERNAL_ASSERT(scaled.scalar_type() == input.scalar_type(),
                        "PREMUL_SUM: the scaled copy is ", scaled.scalar_type(), " for ",
                        input.scalar_type(), " data (a bug in ProcessGroupHCCL)");
  return scaled;
}

std::string opName(c10d::OpType type) { return c10d::opTypeToString(type); }

int64_t totalNumel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// ---- inter-node hops over Gloo ---------------------------------------------------------------

HcclResult glooTransfer(void* ctx, void* buf, uint64_t bytes, uint32_t peer, char* error,
                        size_t errorLen, bool sending) {
  auto* link = static_cast<InterNodeLink*>(ctx);
  if (bytes == 0) return HCCL_SUCCESS;
  try {
    // npu memory is host-addressable: Gloo reads and writes it through a CPU tensor view.
    std::vector<at::Tensor> view{at::from_blob(buf, {static_cast<int64_t>(bytes)},
                                               at::TensorOptions().dtype(at::kByte))};
    auto work = sending ? link->gloo->send(view, static_cast<int>(peer), link->tag)
                        : link->gloo->recv(view, static_cast<int>(peer), link->tag);
    work->wait(link->timeout);
    (sending ? link->bytesSent : link->bytesReceived) += bytes;
    return HCCL_SUCCESS;
  } catch (const std::exception& e) {
    if (error != nullptr && errorLen > 0) {
      std::snprintf(error, errorLen, "gloo %s %s rank %u failed: %s", sending ? "send" : "recv",
                    sending ? "to" : "from", peer, e.what());
    }
    const std::string what = e.what();
    return what.find("imeout") != std::string::npos ? HCCL_E_TIMEOUT : HCCL_E_TCP_TRANSFER;
  }
}

HcclResult glooSend(void* ctx, const void* buf, uint64_t bytes, uint32_t peer, char* error,
                    size_t errorLen) {
  return glooTransfer(ctx, const_cast<void*>(buf), bytes, peer, error, errorLen, true);
}

HcclResult glooRecv(void* ctx, void* buf, uint64_t bytes, uint32_t peer, char* error,
                    size_t errorLen) {
  return glooTransfer(ctx, buf, bytes, peer, error, errorLen, false);
}


}  // namespace

std::string distErrorCode(int code, int rank) {
  int device = -1;
  (void)npuGetDevice(&device);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "ERR02%03d DIST ", code);
  return c10::str("\n[ERROR] ", errorTimestamp(), " (PID:", getpid(), ", Device:", device,
                  ", RankID:", rank, "). ", buffer, errCodeText(code));
}

// ---- WorkHCCL --------------------------------------------------------------------------------

namespace {
int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

ProcessGroupHCCL::WorkHCCL::WorkHCCL(int rank, c10d::OpType opType, uint64_t seq,
                                     c10::Device device, milliseconds timeout)
    : c10d::Work(rank, opType),
      seq_(seq),
      device_(device),
      timeout_(timeout),
      watchStartNs_(nowNs()),
      commStream_(c10::Stream::DEFAULT, device) {}

ProcessGroupHCCL::WorkHCCL::~WorkHCCL() {
  flightRecorderRetire(traceId_);  // before its events go: the recorder must not poll them
  if (ready_ != nullptr) (void)npuEventDestroy(ready_);
  if (end_ != nullptr) (void)npuEventDestroy(end_);
}

std::string ProcessGroupHCCL::WorkHCCL::describe() const {
  return c10::str("WorkHCCL(SeqNum=", seq_, ", OpType=", opName(opType_), ", NumelIn=", numelIn_,
                  ", NumelOut=", numelOut_, ", Timeout(ms)=", timeout_.count(), ")");
}

milliseconds ProcessGroupHCCL::WorkHCCL::ranFor() const {
  return milliseconds((nowNs() - watchStartNs_.load()) / 1000000);
}

npuError_t ProcessGroupHCCL::WorkHCCL::queryEnd() const {
  return end_ == nullptr ? npuSuccess : npuEventQuery(end_);
}

void ProcessGroupHCCL::WorkHCCL::setError(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) return;
  errorText_ = text;
  exception_ = distError(text);
  completed_ = true;
  cv_.notify_all();
}

std::string ProcessGroupHCCL::WorkHCCL::errorText() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return errorText_;
}

void ProcessGroupHCCL::WorkHCCL::throwIfFailed() const {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = exception_;
  }
  if (error) std::rethrow_exception(error);
}

bool ProcessGroupHCCL::WorkHCCL::failedByTimeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timedOutFailure_;
}

bool ProcessGroupHCCL::WorkHCCL::checkFailed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return true;
  }
  const npuError_t state = queryEnd();
  if (state == npuSuccess || state == npuErrorNotReady) return false;
  // The collective failed on its stream: the library's message says which deadline expired and
  // which ranks it waited for (or that a peer's process is gone, which it sees early).
  const char* comm_detail = comm_ != nullptr ? HcclGetCommErrorMessage(comm_) : "";
  std::string detail =
      (comm_detail && *comm_detail) ? comm_detail : std::string(npuGetLastErrorMessage());
  if (!detail.empty() && detail.back() != '.') detail += '.';
  HcclResult async = HCCL_SUCCESS;
  if (comm_ != nullptr) (void)HcclGetCommAsyncError(comm_, &async);
  const milliseconds ran = ranFor();
  // The library's deadline counts from when the collective started on its stream; ours from
  // when it was seen waiting: a failure well before the deadline was not the deadline.
  const bool timed_out = async == HCCL_E_TIMEOUT && ran + milliseconds(500) >= timeout_;
  if (timed_out) {
    setError(c10::str(
        "[Rank ", rank_, "] Watchdog caught collective operation timeout: ", describe(),
        " ran for ", ran.count(), " milliseconds before timing out. ", detail,
        " A rank that died, is stuck, or issues collectives in another order leaves its peers "
        "waiting; if the collective is only slow, raise the deadline: init_process_group("
        "timeout=timedelta(seconds=...)) or HCCL_EXEC_TIMEOUT (seconds).",
        distErrorCode(kErrTimeout, rank_)));
  } else {
    setError(c10::str("[Rank ", rank_, "] Watchdog caught collective operation failure: ",
                      describe(), " failed after ", ran.count(), " milliseconds: ", detail,
                      distErrorCode(kErrHccl, rank_)));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  timedOutFailure_ = timed_out;
  return true;
}

bool ProcessGroupHCCL::WorkHCCL::isCompleted() {
  if (checkFailed()) return true;
  return queryEnd() == npuSuccess;
}

bool ProcessGroupHCCL::WorkHCCL::isSuccess() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return false;
  }
  return queryEnd() == npuSuccess;
}

void ProcessGroupHCCL::WorkHCCL::blockCurrentStreamOnEnd() {
  if (end_ == nullptr) return;
  const NPUStream current = getCurrentNPUStream(device_.index());
  if (current.unwrap() == commStream_) return;
  NPU_CHECK(npuStreamWaitEvent(current.handle(), end_, 0));
}

bool ProcessGroupHCCL::WorkHCCL::wait(milliseconds timeout) {
  throwIfFailed();
  blockCurrentStreamOnEnd();
  if (barrier_ || blockingWait_ || timeout != kNoTimeout) {
    const milliseconds limit = timeout != kNoTimeout ? timeout : milliseconds(0);
    const auto deadline = Clock::now() + limit;
    // The library's deadline (or the watchdog's backstop) ends a collective that cannot
    // finish, so this loop ends too; `timeout` only shortens it. The polls back off from 50 us
    // to 2 ms: a rank waiting long for a late peer costs ~500 wake-ups a second, not 20,000,
    // and the waiter learns of the end at most ~1/8 of its wait late (capped at 2 ms).
    auto pause = std::chrono::microseconds(50);
    while (!isCompleted()) {
      if (limit.count() > 0 && Clock::now() > deadline) {
        C10_THROW_ERROR(DistBackendError,
                        c10::str("[Rank ", rank_, "] ", describe(), " did not complete within ",
                                 limit.count(), " ms of wait(timeout)",
                                 distErrorCode(kErrTimeout, rank_)));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 9 / 8, std::chrono::microseconds(2000));
    }
    throwIfFailed();
  }
  return true;
}

void ProcessGroupHCCL::WorkHCCL::synchronize() { blockCurrentStreamOnEnd(); }

void ProcessGroupHCCL::WorkHCCL::abort() {
  reported_ = true;  // the program's own choice: not the watchdog's to act on
  if (comm_ != nullptr) (void)HcclCommAbort(comm_);
  setError(c10::str("[Rank ", rank_, "] ", describe(), " was aborted by Work.abort()"));
}

void ProcessGroupHCCL::WorkHCCL::release_resources() {
  outputs_.reset();
  std::lock_guard<std::mutex> lock(futureMutex_);
  future_.reset();
}

std::vector<at::Tensor> ProcessGroupHCCL::WorkHCCL::result() {
  return outputs_ ? *outputs_ : std::vector<at::Tensor>();
}

c10::intrusive_ptr<c10::ivalue::Future> ProcessGroupHCCL::WorkHCCL::getFuture() {
  std::lock_guard<std::mutex> lock(futureMutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device_});
    // Marked complete with the comm stream current: the future's own event then follows the
    // collective, and a waiter's stream waits for it, as NCCL's futures do.
    c10::StreamGuard on_comm_stream(commStream_);
    future_->markCompleted(c10::IValue(result()));
  }
  return future_;
}

// ---- the process group -----------------------------------------------------------------------

ProcessGroupHCCL::ProcessGroupHCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size),
      store_(store),
      options_(std::move(options)),
      asyncErrorHandling_(asyncErrorHandlingFromEnv()),
      blockingWait_(blockingWaitFromEnv()),
      traceGroupId_(nextTraceGroupId()),
      traceStatus_(std::make_shared<c10d::ProcessGroupStatus>()) {
  TORCH_CHECK_VALUE(options_, "ProcessGroupHCCL: options must not be None");
  // HCCL_WHITELIST_DISABLE is accepted for scripts written for real clusters; nothing here
  // filters peers by address.
  (void)envInt("HCCL_WHITELIST_DISABLE", 1, 0, 1,
               "HCCL_WHITELIST_DISABLE=1 disables HCCL's trusted-peer list");
  // The library reads HCCL_CONNECT_TIMEOUT, HCCL_EXEC_TIMEOUT and HCCL_BUFFSIZE; reading them
  // here makes a bad value an error of init_process_group rather than of the first collective.
  const HcclResult config = HcclCommConfigInit(&config_);
  if (config != HCCL_SUCCESS) {
    const char* detail = HcclGetLastErrorMessage();
    C10_THROW_ERROR(ValueError,
                    c10::str("ProcessGroupHCCL: ", (detail && *detail) ? detail : "bad HCCL_* "
                             "environment variable", distErrorCode(kErrParam, rank)));
  }
  if (std::getenv("HCCL_EXEC_TIMEOUT") != nullptr) envExecTimeoutSeconds_ = config_.execTimeoutSeconds;
  if (!options_->nodeOfRank.empty()) {
    TORCH_CHECK_VALUE(options_->nodeOfRank.size() == static_cast<size_t>(size),
                      "ProcessGroupHCCL: nodeOfRank has ", options_->nodeOfRank.size(),
                      " entries for ", size, " ranks");
    const uint32_t nodes =
        *std::max_element(options_->nodeOfRank.begin(), options_->nodeOfRank.end()) + 1;
    TORCH_CHECK_VALUE(nodes == 1 || options_->interNodeBackend,
                      "ProcessGroupHCCL: the group spans ", nodes,
                      " nodes but no inter-node (gloo) backend was given");
  }
  init();
  if (flightRecorderEnabled()) {
    const std::string& pipe = flightRecorderSettings().pipeFileStem;
    if (!pipe.empty()) {
      const std::string path = pipe + std::to_string(rank) + ".pipe";
      TORCH_CHECK_VALUE((::mkfifo(path.c_str(), 0600) == 0 || errno == EEXIST) &&
                            (tracePipe_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK)) >= 0,
                        "TORCH_HCCL_DEBUG_INFO_PIPE_FILE: cannot make the named pipe ", path,
                        ": ", std::strerror(errno), distErrorCode(kErrParam, rank));
    }
  }
  watchdog_ = std::thread([this] { watchdogLoop(); });
  std::lock_guard<std::mutex> lock(liveGroupsMutex());
  liveGroups().insert(this);
}

ProcessGroupHCCL::~ProcessGroupHCCL() {
  {
    std::lock_guard<std::mutex> lock(liveGroupsMutex());
    liveGroups().erase(this);
  }
  shutdown();
  if (tracePipe_ >= 0) ::close(tracePipe_);  // the watchdog, its reader, has stopped
}

std::mutex& ProcessGroupHCCL::liveGroupsMutex() {
  static std::mutex mutex;
  return mutex;
}

std::set<ProcessGroupHCCL*>& ProcessGroupHCCL::liveGroups() {
  static std::set<ProcessGroupHCCL*> groups;
  return groups;
}

void ProcessGroupHCCL::stopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(workMutex_);
    stopping_ = true;
  }
  workCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void stopProcessGroupWatchdogsAtExit() {
  // The watchdog retires finished works on its own thread, dropping their tensors; one that
  // Python created decrements its Python object, which takes the GIL, and a thread asking for
  // the GIL once finalization began is ended by pthread_exit, aborting the process (see
  // AtExit.cpp). A group the program never destroyed is stopped here, before finalization:
  // the watchdog retires what is in flight (the caller released the GIL) and leaves.
  std::lock_guard<std::mutex> lock(ProcessGroupHCCL::liveGroupsMutex());
  for (ProcessGroupHCCL* group : ProcessGroupHCCL::liveGroups()) group->stopWatchdog();
}

void ProcessGroupHCCL::shutdown() {
  {
    std::lock_guard<std::mutex> lock(workMutex_);
    if (shutDown_) return;
    shutDown_ = true;
    stopping_ = true;
  }
  workCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // As HCCL asks: the streams that used a communicator are drained before it is destroyed.
  std::lock_guard<std::mutex> lock(commMutex_);
  for (auto& [device, entry] : comms_) {
    if (!failed_) {
      (void)npuStreamSynchronize(entry.stream.handle());
      (void)npuStreamSynchronize(entry.recvStream.handle());
      if (entry.offStreamEnd != nullptr) (void)npuEventSynchronize(entry.offStreamEnd);
    }
    if (entry.offStreamEnd != nullptr) (void)npuEventDestroy(entry.offStreamEnd);
    (void)HcclCommDestroy(entry.comm);
  }
  comms_.clear();
}

void ProcessGroupHCCL::abort() {
  failed_ = true;
  abortComms();
}

void ProcessGroupHCCL::abortComms() {
  std::lock_guard<std::mutex> lock(commMutex_);
  for (auto& [device, entry] : comms_) (void)HcclCommAbort(entry.comm);
}

void ProcessGroupHCCL::setTimeout(milliseconds timeout) { options_->timeout = timeout; }

c10d::ErrorType ProcessGroupHCCL::getError() {
  if (timedOut_) return c10d::ErrorType::TIMEOUT;
  if (failed_) return c10d::ErrorType::COMM_ERROR;
  return c10d::ErrorType::SUCCESS;
}

milliseconds ProcessGroupHCCL::timeoutOf(milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? options_->timeout : requested;
}

HcclComm ProcessGroupHCCL::createComm(c10::DeviceIndex device) {
  // Every rank creates its communicators in the same order, so the n-th key names the same
  // communicator everywhere. torchrun's restarts (--max-restarts) may keep the agent's store,
  // which still holds the failed attempt's keys: the attempt is part of the key.
  static const std::string attempt = [] {
    const char* v = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return std::string(v && *v ? v : "0");
  }();
  const std::string key = c10::str("hccl_root_info/", attempt, "/", commCounter_++);
  HcclRootInfo info{};
  if (rank_ == 0) {
    HCCL_CALL(rank_, HcclGetRootInfo(&info));
    const auto* bytes = reinterpret_cast<const uint8_t*>(&info);
    store_->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(info)));
  } else {
    std::vector<uint8_t> bytes;
    try {
      bytes = store_->get(key);
    } catch (const std::exception& e) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("[Rank ", rank_, "] ProcessGroupHCCL: rank 0 did not publish the "
                               "HCCL root info (store key '", key, "') in time: ", e.what(),
                               ". Rank 0 must make its first collective on this group too; raise "
                               "init_process_group(timeout=...) if it starts late.",
                               distErrorCode(kErrTimeout, rank_)));
    }
    TORCH_INTERNAL_ASSERT(bytes.size() == sizeof(info), "bug: HCCL root info of ", bytes.size(),
                          " bytes in the store, expected ", sizeof(info));
    std::memcpy(&info, bytes.data(), sizeof(info));
  }

  HcclCommConfig config = config_;
  // The collective deadline: init_process_group(timeout=), shortened by HCCL_EXEC_TIMEOUT when
  // that is set (HCCL's own 0 = "no deadline" leaves the group's timeout in charge).
  const int64_t group_seconds =
      std::max<int64_t>(1, (options_->timeout.count() + 999) / 1000);
  int64_t seconds = std::min<int64_t>(group_seconds, UINT32_MAX);
  if (envExecTimeoutSeconds_ > 0) seconds = std::min<int64_t>(seconds, envExecTimeoutSeconds_);
  config.execTimeoutSeconds = static_cast<uint32_t>(seconds);

  DeviceSwitch on_device(device);
  HcclComm comm = nullptr;
  const auto& nodes = options_->nodeOfRank;
  const bool multi_node =
      !nodes.empty() && *std::max_element(nodes.begin(), nodes.end()) > 0;
  if (multi_node) {
    // One communicator per group (one device per rank), so one tag: both ends of a hop must
    // use the same one. Gloo's wait gets the collective deadline, as the library cannot
    // interrupt a callback that blocks.
    auto link = std::make_unique<InterNodeLink>();
    link->gloo = options_->interNodeBackend;
    link->tag = 0;
    link->timeout = milliseconds(static_cast<int64_t>(config.execTimeoutSeconds) * 1000);
    HcclInterNodeOps ops{link.get(), &glooSend, &glooRecv};
    HCCL_CALL(rank_, HcclCommInitMultiNode(static_cast<uint32_t>(size_), &info,
                                           static_cast<uint32_t>(rank_), nodes.data(), &ops,
                                           &config, &comm));
    links_.push_back(std::move(link));
  } else {
    HCCL_CALL(rank_, HcclCommInitRootInfoConfig(static_cast<uint32_t>(size_), &info,
                                                static_cast<uint32_t>(rank_), &config, &comm));
  }
  return comm;
}

ProcessGroupHCCL::DeviceComm& ProcessGroupHCCL::commFor(c10::Device device) {
  std::lock_guard<std::mutex> lock(commMutex_);
  auto it = comms_.find(device.index());
  if (it != comms_.end()) return it->second;
  // One device per rank, as torchrun runs it: a second device would need every other rank to
  // make a second communicator too, and a rank that does so alone would wait for the others
  // until the connect deadline. A clear error now instead.
  TORCH_CHECK_VALUE(comms_.empty(), "ProcessGroupHCCL: rank ", rank_, " runs its collectives on ",
                    c10::Device(kNPU, comms_.begin()->first), " (its first collective ran there), "
                    "but got a tensor on ", device, ". Each rank uses one device: call "
                    "torch.npu.set_device(local_rank) before init_process_group and keep the "
                    "tensors of collectives on it.", distErrorCode(kErrParam, rank_));
  TORCH_CHECK(!failed_, "[Rank ", rank_, "] ProcessGroupHCCL: the group was aborted after an "
              "earlier failure; create a new process group.", distErrorCode(kErrHccl, rank_));
  lazyInit();
  HcclComm comm = createComm(device.index());
  // A stream of its own from the high-priority pool: user streams come from the normal pool,
  // so collectives rarely share a queue with compute.
  const NPUStream stream = getStreamFromPool(-1, device.index());
  DeviceComm entry{comm, stream, getStreamFromPool(-1, device.index())};
  lastDevice_ = device.index();
  return comms_.emplace(device.index(), entry).first->second;
}

HcclComm ProcessGroupHCCL::commForTesting(c10::DeviceIndex device) {
  return commFor(c10::Device(kNPU, device)).comm;
}

std::pair<uint64_t, uint64_t> ProcessGroupHCCL::interNodeBytes() {
  std::lock_guard<std::mutex> lock(commMutex_);
  uint64_t sent = 0, received = 0;
  for (const auto& link : links_) {
    sent += link->bytesSent;
    received += link->bytesReceived;
  }
  return {sent, received};
}

void ProcessGroupHCCL::eagerConnectSingleDevice(at::Device device) {
  if (device.type() == kNPU) (void)commFor(device);
}

namespace {

// Collectives whose inputs and whose outputs each take at most this many bytes may run on the
// calling thread.
constexpr int64_t kHostRunMaxBytes = 1 << 20;

// A host run of a comm stream (npuStreamBeginHostRun) for one collective, if the stream is idle;
// ended by end() or, on an exception, by the destructor.
class HostRun {
 public:
  explicit HostRun(npuStream_t stream) {
    if (stream != nullptr && npuStreamBeginHostRun(stream) == npuSuccess) stream_ = stream;
  }
  ~HostRun() {
    if (stream_ != nullptr) (void)npuStreamEndHostRun(stream_);
  }
  void end() {
    if (stream_ != nullptr) NPU_CHECK(npuStreamEndHostRun(stream_));
    stream_ = nullptr;
  }
  HostRun(const HostRun&) = delete;
  HostRun& operator=(const HostRun&) = delete;

 private:
  npuStream_t stream_ = nullptr;
};

// Whether nothing is queued or running on `stream`, without taking its error (npuStreamQuery
// would report and clear it): a host run can begin there. Off with NPU_SIM_INLINE_TASKS=0.
bool streamIdle(npuStream_t stream) {
  if (npuStreamBeginHostRun(stream) != npuSuccess) return false;
  NPU_CHECK(npuStreamEndHostRun(stream));
  return true;
}

}  // namespace

bool ProcessGroupHCCL::hostRunEligible(c10d::OpType opType, bool onRecvStream,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& outputs) const {
  if (onRecvStream || opType == c10d::OpType::SEND || opType == c10d::OpType::RECV) return false;
  const auto& nodes = options_->nodeOfRank;
  if (!nodes.empty() && *std::max_element(nodes.begin(), nodes.end()) > 0) return false;
  auto bytes = [](const std::vector<at::Tensor>& list) {
    int64_t n = 0;
    for (const auto& t : list) n += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
    return n;
  };
  return std::max(bytes(inputs), bytes(outputs)) <= kHostRunMaxBytes;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::launch(c10::Device device, c10d::OpType opType,
                                                        const std::vector<at::Tensor>& inputs,
                                                        const std::vector<at::Tensor>& outputs,
                                                        const Body& body, milliseconds timeout,
                                                        bool onRecvStream, int peer) {
  DeviceComm& entry = commFor(device);
  const NPUStream comm_stream = onRecvStream ? entry.recvStream : entry.stream;
  DeviceSwitch on_device(device.index());
  const NPUStream current = getCurrentNPUStream(device.index());
  // Sequence numbers start at 1, as NCCL's and the library's do.
  auto work = c10::make_intrusive<WorkHCCL>(rank_, opType, ++seq_, device, timeout);
  work->comm_ = entry.comm;
  work->blockingWait_ = blockingWait_;
  work->numelIn_ = totalNumel(inputs);
  work->numelOut_ = totalNumel(outputs);

  // Where the collective runs, after everything already queued on the caller's stream:
  //  - a small one (hostRunEligible) that finds the caller's stream busy and the comm stream
  //    idle runs on the caller's stream, behind that work. Through the comm stream it would
  //    take two hand-offs between stream workers (the comm stream's worker wakes when the
  //    caller's stream passes the collective's start, the caller's stream waits for its end),
  //    each a wake-up that costs more than the collective itself when ranks share cores; the
  //    caller's stream would wait for it anyway (DDP's last bucket, a loss's allreduce).
  //  - a small one that finds both streams idle runs on this thread (a host run, below);
  //  - anything else runs on the comm stream once it has waited for the caller's stream.
  const bool small = hostRunEligible(opType, onRecvStream, inputs, outputs) && !coalescing_;
  NPUStream stream = comm_stream;
  if (current != comm_stream) {
    NPU_CHECK(npuEventCreateWithFlags(&work->ready_, npuEventDisableTiming));
    NPU_CHECK(npuEventRecord(work->ready_, current.handle()));
    npuStreamCaptureStatus capturing = npuStreamCaptureStatusNone;
    NPU_CHECK(npuStreamIsCapturing(current.handle(), &capturing));
    // Not under the stream sanitizer, which checks the program as a card runs it: there the
    // collective is on the comm stream, and an output read before work.wait() is a race.
    if (small && capturing == npuStreamCaptureStatusNone && !npuSanEnabled() &&
        npuEventQuery(work->ready_) == npuErrorNotReady && streamIdle(comm_stream.handle())) {
      stream = current;
    } else {
      NPU_CHECK(npuStreamWaitEvent(comm_stream.handle(), work->ready_, 0));
    }
  }
  {  // After the last collective that ran on another caller's stream (queues nothing once done).
    std::lock_guard<std::mutex> lock(offStreamMutex_);
    if (entry.offStreamEnd != nullptr && entry.offStream != stream.handle()) {
      NPU_CHECK(npuStreamWaitEvent(stream.handle(), entry.offStreamEnd, 0));
    }
  }
  work->commStream_ = stream.unwrap();
  // The caller may free its tensors as soon as we return: the allocator keeps their blocks
  // until the collective's stream has passed this point.
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& t : *list) {
      if (t.defined() && t.numel() > 0) {
        recordDataPtrOnStream(t.storage().data_ptr(), stream.unwrap());
        if (t.storage().data_ptr().get_deleter() != getNPUDeviceAllocator()->raw_deleter()) {
          work->stashed_.push_back(t);  // not the caching allocator's: keep it ourselves
        }
      }
    }
  }
  // A small collective that finds its comm stream idle (the caller's stream had nothing queued
  // either, or the wait for it would be queued there) runs on this thread, as the comm stream's
  // tasks (a host run): the same order and the same errors, without the hand-offs. The host is
  // then busy for the collective, which for these sizes is shorter than a launch round trip.
  // Not for point-to-point (a send may wait for a receive the caller has yet to post) nor
  // across nodes (their hops block on Gloo).
  if (npuSanEnabled()) sanitizeCollective(stream.handle(), opName(opType), inputs, outputs);
  HostRun host_run(small && stream == comm_stream ? stream.handle() : nullptr);
  {
    c10::StreamGuard on_comm_stream(stream.unwrap());
    body(Launch{entry.comm, stream.handle(), device}, *work);
  }
  NPU_CHECK(npuEventCreateWithFlags(&work->end_, npuEventDisableTiming));
  NPU_CHECK(npuEventRecord(work->end_, stream.handle()));
  host_run.end();
  if (flightRecorderEnabled()) traceLaunch(*work, inputs, outputs, peer);
  if (stream != comm_stream) {
    std::lock_guard<std::mutex> lock(offStreamMutex_);
    if (entry.offStreamEnd == nullptr) {
      NPU_CHECK(npuEventCreateWithFlags(&entry.offStreamEnd, npuEventDisableTiming));
    }
    NPU_CHECK(npuEventRecord(entry.offStreamEnd, stream.handle()));
    entry.offStream = stream.handle();
  }
  work->outputs_ = std::make_shared<std::vector<at::Tensor>>(outputs);

  if (coalescing_) coalesced_.push_back(work);
  {
    std::lock_guard<std::mutex> lock(workMutex_);
    inFlight_.emplace_back(work);
  }
  return work;
}

// ---- collectives -------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  const c10::Device device = deviceOf(tensors, "allreduce");
  at::Tensor tensor = tensors[0];
  checkTensor(tensor, device, "allreduce", "tensor");
  const HcclType type = reductionType(tensor, "allreduce");
  const HcclReduceOp op = hcclOp(opts.reduceOp, tensor, "allreduce");
  const c10d::ReduceOp reduceOp = opts.reduceOp;
  return launch(device, c10d::OpType::ALLREDUCE, tensors, tensors,
                [&](const Launch& l, WorkHCCL&) {
                  if (tensor.numel() == 0) return;
                  at::Tensor source = premultiplied(tensor, reduceOp);
                  HCCL_CALL(rank_, HcclAllReduce(ptr(source), ptr(tensor),
                                                 tensor.numel() * type.count_scale, type.type,
                                                 op, l.comm, l.stream));
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const c10::Device device = deviceOf(tensors, "allreduce_coalesced");
  std::vector<HcclType> types;
  for (const auto& t : tensors) {
    checkTensor(t, device, "allreduce_coalesced", "tensor");
    types.push_back(reductionType(t, "allreduce_coalesced"));
    hcclOp(opts.reduceOp, t, "allreduce_coalesced");  // the op's checks, for every dtype
  }
  const HcclReduceOp op = hcclOp(opts.reduceOp, tensors[0], "allreduce_coalesced");
  const c10d::ReduceOp reduceOp = opts.reduceOp;
  return launch(device, c10d::OpType::ALLREDUCE_COALESCED, tensors, tensors,
                [&](const Launch& l, WorkHCCL&) {
                  for (size_t i = 0; i < tensors.size(); ++i) {
                    const at::Tensor& t = tensors[i];
                    if (t.numel() == 0) continue;
                    at::Tensor source = premultiplied(t, reduceOp);
                    HCCL_CALL(rank_, HcclAllReduce(ptr(source), ptr(t),
                                                   t.numel() * types[i].count_scale,
                                                   types[i].type, op, l.comm, l.stream));
                  }
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  const c10::Device device = deviceOf(tensors, "broadcast");
  at::Tensor tensor = tensors[0];
  checkTensor(tensor, device, "broadcast", "tensor");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "ProcessGroupHCCL broadcast: "
                    "root rank ", opts.rootRank, " is not in [0, ", size_, ")");
  const uint32_t root = static_cast<uint32_t>(opts.rootRank);
  return launch(device, c10d::OpType::BROADCAST, tensors, tensors,
                [&](const Launch& l, WorkHCCL&) {
                  if (tensor.numel() == 0) return;
                  HCCL_CALL(rank_, HcclBroadcast(ptr(tensor), tensor.nbytes(),
                                                 HCCL_DATA_TYPE_UINT8, root, l.comm, l.stream));
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  const c10::Device device = deviceOf(tensors, "reduce");
  at::Tensor tensor = tensors[0];
  checkTensor(tensor, device, "reduce", "tensor");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "ProcessGroupHCCL reduce: "
                    "root rank ", opts.rootRank, " is not in [0, ", size_, ")");
  const HcclType type = reductionType(tensor, "reduce");
  const HcclReduceOp op = hcclOp(opts.reduceOp, tensor, "reduce");
  const c10d::ReduceOp reduceOp = opts.reduceOp;
  const uint32_t root = static_cast<uint32_t>(opts.rootRank);
  return launch(device, c10d::OpType::REDUCE, tensors, tensors,
                [&](const Launch& l, WorkHCCL&) {
                  if (tensor.numel() == 0) return;
                  at::Tensor source = premultiplied(tensor, reduceOp);
                  HCCL_CALL(rank_, HcclReduce(ptr(source), ptr(tensor),
                                              tensor.numel() * type.count_scale, type.type, op,
                                              root, l.comm, l.stream));
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ProcessGroupHCCL ", name, ": ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  const c10::Device device = deviceOf(inputs, name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], device, name, "input");
    checkTensor(outputs[i], device, name, "output");
    TORCH_CHECK_VALUE(inputs[i].scalar_type() == outputs[i].scalar_type(), "ProcessGroupHCCL ",
                      name, ": input is ", inputs[i].scalar_type(), " but output is ",
                      outputs[i].scalar_type(), "; they must have the same dtype");
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, "ProcessGroupHCCL ", name,
                      ": output has ", outputs[i].numel(), " elements; it must have world size (",
                      size_, ") x input (", inputs[i].numel(), ") = ",
                      inputs[i].numel() * size_, distErrorCode(kErrParam, rank_));
  }
  return launch(device, c10d::OpType::_ALLGATHER_BASE, inputs, outputs,
                [&](const Launch& l, WorkHCCL&) {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    if (inputs[i].numel() == 0) continue;
                    // In place (the input is this rank's block of the output, as FSDP does):
                    // the library reads from a copy.
                    at::Tensor source =
                        overlaps(inputs[i], outputs[i]) ? inputs[i].clone() : inputs[i];
                    HCCL_CALL(rank_, HcclAllGather(ptr(source), ptr(outputs[i]),
                                                   source.nbytes(), HCCL_DATA_TYPE_UINT8,
                                                   l.comm, l.stream));
                  }
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1, "ProcessGroupHCCL allgather takes one output list, got ",
                    outputs.size());
  const c10::Device device = deviceOf(inputs, "allgather");
  at::Tensor input = inputs[0];
  checkTensor(input, device, "allgather", "input");
  std::vector<at::Tensor>& list = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(list.size()) == size_, "ProcessGroupHCCL allgather: the "
                    "output list has ", list.size(), " tensors; it must have one per rank (",
                    size_, ")", distErrorCode(kErrParam, rank_));
  for (const auto& out : list) {
    checkTensor(out, device, "allgather", "output");
    TORCH_CHECK_VALUE(out.numel() == input.numel() && out.scalar_type() == input.scalar_type(),
                      "ProcessGroupHCCL allgather: an output tensor is ", out.scalar_type(), " ",
                      out.sizes(), " but the input is ", input.scalar_type(), " ", input.sizes(),
                      "; every output must match the input", distErrorCode(kErrParam, rank_));
  }
  return launch(device, c10d::OpType::ALLGATHER, inputs, list,
                [&](const Launch& l, WorkHCCL&) {
                  if (input.numel() == 0) return;
                  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
                  HCCL_CALL(rank_, HcclAllGather(ptr(input), ptr(flat), input.nbytes(),
                                                 HCCL_DATA_TYPE_UINT8, l.comm, l.stream));
                  for (int r = 0; r < size_; ++r) {
                    list[r].copy_(flat.narrow(0, r * input.numel(), input.numel())
                                      .view(list[r].sizes()));
                  }
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputLists.size() == static_cast<size_t>(size_),
                    "ProcessGroupHCCL allgather_coalesced: ", outputLists.size(),
                    " output lists; it needs one per rank (", size_, ")");
  const c10::Device device = deviceOf(inputs, "allgather_coalesced");
  std::vector<at::Tensor> all_outputs;
  for (const auto& t : inputs) checkTensor(t, device, "allgather_coalesced", "input");
  for (auto& list : outputLists) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(), "ProcessGroupHCCL allgather_coalesced: an "
                      "output list has ", list.size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < list.size(); ++i) {
      checkTensor(list[i], device, "allgather_coalesced", "output");
      TORCH_CHECK_VALUE(list[i].numel() == inputs[i].numel() &&
                            list[i].scalar_type() == inputs[i].scalar_type(),
                        "ProcessGroupHCCL allgather_coalesced: output ", i,
                        " does not match its input in dtype or size");
      all_outputs.push_back(list[i]);
    }
  }
  return launch(device, c10d::OpType::ALLGATHER_COALESCED, inputs, all_outputs,
                [&](const Launch& l, WorkHCCL&) {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    const at::Tensor& input = inputs[i];
                    if (input.numel() == 0) continue;
                    at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
                    HCCL_CALL(rank_, HcclAllGather(ptr(input), ptr(flat), input.nbytes(),
                                                   HCCL_DATA_TYPE_UINT8, l.comm, l.stream));
                    for (int r = 0; r < size_; ++r) {
                      outputLists[r][i].copy_(flat.narrow(0, r * input.numel(), input.numel())
                                                  .view(outputLists[r][i].sizes()));
                    }
                  }
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ProcessGroupHCCL ", name, ": ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  const c10::Device device = deviceOf(inputs, name);
  std::vector<HcclType> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], device, name, "input");
    checkTensor(outputs[i], device, name, "output");
    TORCH_CHECK_VALUE(inputs[i].scalar_type() == outputs[i].scalar_type(), "ProcessGroupHCCL ",
                      name, ": input is ", inputs[i].scalar_type(), " but output is ",
                      outputs[i].scalar_type(), "; they must have the same dtype");
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, "ProcessGroupHCCL ", name,
                      ": input has ", inputs[i].numel(), " elements; it must have world size (",
                      size_, ") x output (", outputs[i].numel(), ") = ",
                      outputs[i].numel() * size_, distErrorCode(kErrParam, rank_));
    types.push_back(reductionType(inputs[i], name));
    hcclOp(opts.reduceOp, inputs[i], name);  // the op's checks, for every dtype
  }
  const HcclReduceOp op = hcclOp(opts.reduceOp, inputs[0], name);
  const c10d::ReduceOp reduceOp = opts.reduceOp;
  return launch(device, c10d::OpType::_REDUCE_SCATTER_BASE, inputs, outputs,
                [&](const Launch& l, WorkHCCL&) {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    if (outputs[i].numel() == 0) continue;
                    at::Tensor source = premultiplied(inputs[i], reduceOp);
                    if (source.is_same(inputs[i]) && overlaps(inputs[i], outputs[i])) {
                      source = inputs[i].clone();
                    }
                    HCCL_CALL(rank_, HcclReduceScatter(ptr(source), ptr(outputs[i]),
                                                       outputs[i].numel() * types[i].count_scale,
                                                       types[i].type, op, l.comm, l.stream));
                  }
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1, "ProcessGroupHCCL reduce_scatter takes one input list, "
                    "got ", inputs.size());
  const c10::Device device = deviceOf(outputs, "reduce_scatter");
  at::Tensor output = outputs[0];
  checkTensor(output, device, "reduce_scatter", "output");
  std::vector<at::Tensor>& list = inputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(list.size()) == size_, "ProcessGroupHCCL reduce_scatter: "
                    "the input list has ", list.size(), " tensors; it must have one per rank (",
                    size_, ")", distErrorCode(kErrParam, rank_));
  for (const auto& in : list) {
    checkTensor(in, device, "reduce_scatter", "input");
    TORCH_CHECK_VALUE(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                      "ProcessGroupHCCL reduce_scatter: an input tensor is ", in.scalar_type(),
                      " ", in.sizes(), " but the output is ", output.scalar_type(), " ",
                      output.sizes(), "; every input must match the output",
                      distErrorCode(kErrParam, rank_));
  }
  const HcclType type = reductionType(output, "reduce_scatter");
  const HcclReduceOp op = hcclOp(opts.reduceOp, output, "reduce_scatter");
  const c10d::ReduceOp reduceOp = opts.reduceOp;
  return launch(device, c10d::OpType::REDUCE_SCATTER, list, outputs,
                [&](const Launch& l, WorkHCCL&) {
                  if (output.numel() == 0) return;
                  at::Tensor flat = at::empty({size_ * output.numel()}, output.options());
                  for (int r = 0; r < size_; ++r) {
                    flat.narrow(0, r * output.numel(), output.numel()).copy_(list[r].view(-1));
                  }
                  at::Tensor source = premultiplied(flat, reduceOp);
                  HCCL_CALL(rank_, HcclReduceScatter(ptr(source), ptr(output),
                                                     output.numel() * type.count_scale,
                                                     type.type, op, l.comm, l.stream));
                },
                timeoutOf(opts.timeout));
}

namespace {
// Byte counts and displacements of an all-to-all-v, kept alive with the work.
struct AlltoAllPlan {
  std::vector<uint64_t> sendCounts, sendDispls, recvCounts, recvDispls;
  explicit AlltoAllPlan(int n) : sendCounts(n), sendDispls(n), recvCounts(n), recvDispls(n) {}
  void finish() {
    uint64_t s = 0, r = 0;
    for (size_t i = 0; i < sendCounts.size(); ++i) {
      sendDispls[i] = s;
      s += sendCounts[i];
      recvDispls[i] = r;
      r += recvCounts[i];
    }
  }
};

void checkSplits(const std::vector<int64_t>& splits, const at::Tensor& t, int size,
                 const char* what) {
  if (splits.empty()) {
    TORCH_CHECK_VALUE(t.dim() > 0 ? t.size(0) % size == 0 : size == 1,
                      "ProcessGroupHCCL alltoall_base: the ", what, " has ",
                      t.dim() > 0 ? t.size(0) : 1, " rows, which do not split evenly over ", size,
                      " ranks; give ", what, " split sizes");
    return;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "ProcessGroupHCCL alltoall_base: ",
                    splits.size(), " ", what, " split sizes for ", size, " ranks");
  int64_t sum = 0;
  for (int64_t s : splits) {
    TORCH_CHECK_VALUE(s >= 0, "ProcessGroupHCCL alltoall_base: negative ", what, " split size ",
                      s);
    sum += s;
  }
  TORCH_CHECK_VALUE(sum == (t.dim() > 0 ? t.size(0) : 1), "ProcessGroupHCCL alltoall_base: the ",
                    what, " split sizes add up to ", sum, " but the ", what, " has ",
                    t.dim() > 0 ? t.size(0) : 1, " rows");
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  const c10::Device device = deviceOf({input}, "alltoall_base");
  checkTensor(input, device, "alltoall_base", "input");
  checkTensor(output, device, "alltoall_base", "output");
  TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(), "ProcessGroupHCCL alltoall_base: "
                    "input is ", input.scalar_type(), " but output is ", output.scalar_type());
  checkSplits(inputSplitSizes, input, size_, "input");
  checkSplits(outputSplitSizes, output, size_, "output");
  const int64_t in_row = input.dim() > 0 && input.size(0) > 0 ? input.nbytes() / input.size(0)
                                                              : input.nbytes();
  const int64_t out_row = output.dim() > 0 && output.size(0) > 0
                              ? output.nbytes() / output.size(0)
                              : output.nbytes();
  auto plan = std::make_shared<AlltoAllPlan>(size_);
  for (int r = 0; r < size_; ++r) {
    const int64_t in_rows = inputSplitSizes.empty()
                                ? (input.dim() > 0 ? input.size(0) / size_ : 1)
                                : inputSplitSizes[r];
    const int64_t out_rows = outputSplitSizes.empty()
                                 ? (output.dim() > 0 ? output.size(0) / size_ : 1)
                                 : outputSplitSizes[r];
    plan->sendCounts[r] = in_rows * in_row;
    plan->recvCounts[r] = out_rows * out_row;
  }
  plan->finish();
  std::vector<at::Tensor> inputs{input}, outputs{output};
  const bool equal = inputSplitSizes.empty() && outputSplitSizes.empty();
  return launch(device, c10d::OpType::ALLTOALL_BASE, inputs, outputs,
                [&](const Launch& l, WorkHCCL& work) {
                  if (input.numel() == 0 && output.numel() == 0) return;
                  at::Tensor source = overlaps(input, output) ? input.clone() : input;
                  if (equal) {
                    HCCL_CALL(rank_, HcclAlltoAll(ptr(source), plan->sendCounts[0],
                                                  HCCL_DATA_TYPE_UINT8, ptr(output),
                                                  plan->recvCounts[0], HCCL_DATA_TYPE_UINT8,
                                                  l.comm, l.stream));
                  } else {
                    HCCL_CALL(rank_, HcclAlltoAllV(ptr(source), plan->sendCounts.data(),
                                                   plan->sendDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                   ptr(output), plan->recvCounts.data(),
                                                   plan->recvDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                   l.comm, l.stream));
                  }
                  work.keepAlive_.push_back(plan);
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == size_ &&
                        static_cast<int>(outputs.size()) == size_,
                    "ProcessGroupHCCL alltoall: ", inputs.size(), " inputs and ", outputs.size(),
                    " outputs; both lists need one tensor per rank (", size_, ")");
  const c10::Device device = deviceOf(inputs, "alltoall");
  auto plan = std::make_shared<AlltoAllPlan>(size_);
  for (int r = 0; r < size_; ++r) {
    checkTensor(inputs[r], device, "alltoall", "input");
    checkTensor(outputs[r], device, "alltoall", "output");
    TORCH_CHECK_VALUE(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                          outputs[r].scalar_type() == inputs[0].scalar_type(),
                      "ProcessGroupHCCL alltoall: every input and output must have one dtype");
    plan->sendCounts[r] = inputs[r].nbytes();
    plan->recvCounts[r] = outputs[r].nbytes();
  }
  plan->finish();
  return launch(device, c10d::OpType::ALLTOALL, inputs, outputs,
                [&](const Launch& l, WorkHCCL& work) {
                  std::vector<at::Tensor> flat_in;
                  for (const auto& t : inputs) flat_in.push_back(t.reshape(-1));
                  at::Tensor send = at::cat(flat_in);
                  int64_t total_out = 0;
                  for (const auto& t : outputs) total_out += t.numel();
                  at::Tensor recv = at::empty({total_out}, inputs[0].options());
                  if (send.numel() > 0 || recv.numel() > 0) {
                    HCCL_CALL(rank_, HcclAlltoAllV(ptr(send), plan->sendCounts.data(),
                                                   plan->sendDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                   ptr(recv), plan->recvCounts.data(),
                                                   plan->recvDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                   l.comm, l.stream));
                  }
                  int64_t offset = 0;
                  for (auto& t : outputs) {
                    t.copy_(recv.narrow(0, offset, t.numel()).view(t.sizes()));
                    offset += t.numel();
                  }
                  work.keepAlive_.push_back(plan);
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const c10::Device device = deviceOf(inputs, "gather");
  at::Tensor input = inputs[0];
  checkTensor(input, device, "gather", "input");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "ProcessGroupHCCL gather: root "
                    "rank ", opts.rootRank, " is not in [0, ", size_, ")");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                      "ProcessGroupHCCL gather: the root needs one output list with one tensor "
                      "per rank (", size_, ")");
    list = outputs[0];
    for (const auto& out : list) {
      checkTensor(out, device, "gather", "output");
      TORCH_CHECK_VALUE(out.numel() == input.numel() && out.scalar_type() == input.scalar_type(),
                        "ProcessGroupHCCL gather: an output tensor does not match the input in "
                        "dtype or size");
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "ProcessGroupHCCL gather: only the root rank (", root,
                      ") gives output tensors");
  }
  // One all-to-all-v: every rank sends its input to the root only.
  auto plan = std::make_shared<AlltoAllPlan>(size_);
  plan->sendCounts[root] = input.nbytes();
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) plan->recvCounts[r] = input.nbytes();
  }
  plan->finish();
  return launch(device, c10d::OpType::GATHER, inputs, list,
                [&](const Launch& l, WorkHCCL& work) {
                  if (input.numel() == 0) return;
                  at::Tensor recv = rank_ == root
                                        ? at::empty({size_ * input.numel()}, input.options())
                                        : at::empty({1}, input.options());
                  HCCL_CALL(rank_, HcclAlltoAllV(ptr(input), plan->sendCounts.data(),
                                                 plan->sendDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                 ptr(recv), plan->recvCounts.data(),
                                                 plan->recvDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                 l.comm, l.stream));
                  if (rank_ == root) {
                    for (int r = 0; r < size_; ++r) {
                      list[r].copy_(recv.narrow(0, r * input.numel(), input.numel())
                                        .view(list[r].sizes()));
                    }
                  }
                  work.keepAlive_.push_back(plan);
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  const c10::Device device = deviceOf(outputs, "scatter");
  at::Tensor output = outputs[0];
  checkTensor(output, device, "scatter", "output");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "ProcessGroupHCCL scatter: "
                    "root rank ", opts.rootRank, " is not in [0, ", size_, ")");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                      "ProcessGroupHCCL scatter: the root needs one input list with one tensor "
                      "per rank (", size_, ")");
    list = inputs[0];
    for (const auto& in : list) {
      checkTensor(in, device, "scatter", "input");
      TORCH_CHECK_VALUE(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                        "ProcessGroupHCCL scatter: an input tensor does not match the output in "
                        "dtype or size");
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "ProcessGroupHCCL scatter: only the root rank (", root,
                      ") gives input tensors");
  }
  // One all-to-all-v: the root sends block r to rank r; everyone receives from the root only.
  auto plan = std::make_shared<AlltoAllPlan>(size_);
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) plan->sendCounts[r] = output.nbytes();
  }
  plan->recvCounts[root] = output.nbytes();
  plan->finish();
  return launch(device, c10d::OpType::SCATTER, list, outputs,
                [&](const Launch& l, WorkHCCL& work) {
                  if (output.numel() == 0) return;
                  at::Tensor send;
                  if (rank_ == root) {
                    std::vector<at::Tensor> flat;
                    for (const auto& t : list) flat.push_back(t.reshape(-1));
                    send = at::cat(flat);
                  } else {
                    send = at::empty({1}, output.options());
                  }
                  HCCL_CALL(rank_, HcclAlltoAllV(ptr(send), plan->sendCounts.data(),
                                                 plan->sendDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                 ptr(output), plan->recvCounts.data(),
                                                 plan->recvDispls.data(), HCCL_DATA_TYPE_UINT8,
                                                 l.comm, l.stream));
                  work.keepAlive_.push_back(plan);
                },
                timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::send(std::vector<at::Tensor>& tensors,
                                                      int dstRank, int /*tag*/) {
  checkSingle(tensors, "send");
  const c10::Device device = deviceOf(tensors, "send");
  at::Tensor tensor = tensors[0];
  checkTensor(tensor, device, "send", "tensor");
  TORCH_CHECK_VALUE(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "ProcessGroupHCCL send: "
                    "destination rank ", dstRank, " must be another rank of the group [0, ",
                    size_, ")");
  return launch(device, c10d::OpType::SEND, tensors, {},
                [&](const Launch& l, WorkHCCL&) {
                  if (tensor.numel() == 0) return;
                  HCCL_CALL(rank_, HcclSend(ptr(tensor), tensor.nbytes(), HCCL_DATA_TYPE_UINT8,
                                            static_cast<uint32_t>(dstRank), l.comm, l.stream));
                },
                options_->timeout, /*onRecvStream=*/false, /*peer=*/dstRank);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::recv(std::vector<at::Tensor>& tensors,
                                                      int srcRank, int /*tag*/) {
  checkSingle(tensors, "recv");
  const c10::Device device = deviceOf(tensors, "recv");
  at::Tensor tensor = tensors[0];
  checkTensor(tensor, device, "recv", "tensor");
  TORCH_CHECK_VALUE(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "ProcessGroupHCCL recv: "
                    "source rank ", srcRank, " must be another rank of the group [0, ", size_,
                    ")");
  if (coalescing_) coalescedRecv_ = true;
  return launch(device, c10d::OpType::RECV, {}, tensors,
                [&](const Launch& l, WorkHCCL&) {
                  if (tensor.numel() == 0) return;
                  HCCL_CALL(rank_, HcclRecv(ptr(tensor), tensor.nbytes(), HCCL_DATA_TYPE_UINT8,
                                            static_cast<uint32_t>(srcRank), l.comm, l.stream));
                },
                options_->timeout, /*onRecvStream=*/coalescing_, /*peer=*/srcRank);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "ProcessGroupHCCL does not support recv from any source "
                              "(HCCL has no wildcard receive); pass src=",
                              distErrorCode(kErrNotSupport, rank_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::barrier(const c10d::BarrierOptions& opts) {
  c10::DeviceIndex index = -1;
  if (opts.device.has_value() && opts.device->type() == kNPU) {
    index = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  } else if (getBoundDeviceId().has_value()) {
    index = getBoundDeviceId()->index();
  } else {
    std::lock_guard<std::mutex> lock(commMutex_);
    index = lastDevice_;
  }
  if (index < 0) {
    lazyInit();
    index = currentDevice();
  }
  const c10::Device device(kNPU, index);
  auto work = launch(device, c10d::OpType::BARRIER, {}, {},
                     [&](const Launch& l, WorkHCCL&) {
                       HCCL_CALL(rank_, HcclBarrier(l.comm, l.stream));
                     },
                     timeoutOf(opts.timeout));
  // As NCCL's: barrier().wait() blocks the host until every rank has arrived.
  static_cast<WorkHCCL*>(work.get())->barrier_ = true;
  return work;
}

// ---- coalescing ------------------------------------------------------------------------------

void ProcessGroupHCCL::startCoalescing() {
  TORCH_CHECK(!coalescing_, "ProcessGroupHCCL: startCoalescing called twice without "
              "endCoalescing");
  coalescing_ = true;
  coalescedRecv_ = false;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "ProcessGroupHCCL: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<c10::intrusive_ptr<WorkHCCL>> works;
  works.swap(coalesced_);
  if (works.empty()) return nullptr;
  // The works ran in order on one comm stream, so the last one's end covers them all; the
  // returned work waits for it and carries every output.
  const auto& last = works.back();
  auto work = c10::make_intrusive<WorkHCCL>(rank_, c10d::OpType::COALESCED, last->seq_,
                                            last->device_, last->timeout_);
  work->comm_ = last->comm_;
  work->commStream_ = last->commStream_;
  work->blockingWait_ = blockingWait_;
  auto outputs = std::make_shared<std::vector<at::Tensor>>();
  for (const auto& w : works) {
    for (const auto& t : w->result()) outputs->push_back(t);
    work->numelIn_ += w->numelIn_;
    work->numelOut_ += w->numelOut_;
  }
  work->outputs_ = outputs;
  DeviceSwitch on_device(last->device_.index());
  DeviceComm& entry = commFor(last->device_);
  work->commStream_ = entry.stream.unwrap();
  if (coalescedRecv_) {
    // The batch's receives ran on the receive stream: the end follows them too.
    NPU_CHECK(npuEventCreateWithFlags(&work->ready_, npuEventDisableTiming));
    NPU_CHECK(npuEventRecord(work->ready_, entry.recvStream.handle()));
    NPU_CHECK(npuStreamWaitEvent(entry.stream.handle(), work->ready_, 0));
  }
  NPU_CHECK(npuEventCreateWithFlags(&work->end_, npuEventDisableTiming));
  NPU_CHECK(npuEventRecord(work->end_, entry.stream.handle()));
  {
    std::lock_guard<std::mutex> lock(workMutex_);
    inFlight_.emplace_back(work);
  }
  return work;
}

// ---- the watchdog ----------------------------------------------------------------------------

void ProcessGroupHCCL::watchdogLoop() {
  // Its polls of the works' events order nothing the program does (the stream sanitizer).
  npuSanSetThreadObserver(1);
  std::unique_lock<std::mutex> lock(workMutex_);
  while (true) {
    if (stopping_ && inFlight_.empty()) return;
    lock.unlock();
    milliseconds sleep = watchdogPass();
    if (flightRecorderEnabled()) pollDumpRequests();
    lock.lock();
    if (stopping_) {
      // Shutting down: finish the works in flight (bounded by their deadlines), then leave.
      if (inFlight_.empty()) return;
      sleep = std::min(sleep, milliseconds(5));
    }
    workCv_.wait_for(lock, sleep);
  }
}

milliseconds ProcessGroupHCCL::watchdogPass() {
  // Polling is cheap when nothing is near its deadline; near one, the watchdog looks often so
  // that its report comes as soon as the library gives up. Launches do not wake the watchdog:
  // a wake-up per collective would cost the issuing thread a context switch on a busy host.
  constexpr milliseconds kIdlePoll(100);
  constexpr milliseconds kBusyPoll(20);
  constexpr milliseconds kNearDeadlinePoll(2);
  int64_t previous_end = -1;
  // The works finish in issue order (one comm stream), so each pass looks at the oldest ones
  // only: it retires those that have finished and stops at the first still running.
  while (true) {
    WorkHCCL* work;  // alive while its entry is in the list, which only this thread pops
    {
      std::lock_guard<std::mutex> lock(workMutex_);
      if (inFlight_.empty()) return kIdlePoll;
      work = inFlight_.front()._unsafe_get_target();
    }
    // A work waits behind the ones queued before it: its clock starts when it was issued or
    // when the previous one was seen finished, whichever is later.
    if (previous_end > work->watchStartNs_.load()) work->watchStartNs_ = previous_end;
    bool retire = false;
    if (work->checkFailed()) {
      if (!work->reported_.exchange(true)) handleFailure(*work, work->failedByTimeout());
      retire = true;
    } else if (work->queryEnd() == npuSuccess) {
      previous_end = nowNs();
      retire = true;
    } else {
      // Still running. The library enforces the deadline itself; this is the backstop for a
      // collective stuck where the library cannot see it, with room for a late start.
      const milliseconds limit = work->timeout_;
      const milliseconds ran = work->ranFor();
      if (limit.count() > 0 && ran > limit + std::max(limit, milliseconds(5000))) {
        work->setError(c10::str(
            "[Rank ", rank_, "] Watchdog caught collective operation timeout: ",
            work->describe(), " ran for ", ran.count(), " milliseconds before timing out. The "
            "collective library did not end it, so the communicator is aborted. If the "
            "collective is only slow, raise the deadline: init_process_group(timeout="
            "timedelta(seconds=...)).",
            distErrorCode(kErrTimeout, rank_)));
        if (!work->reported_.exchange(true)) handleFailure(*work, true);
        if (work->comm_ != nullptr) (void)HcclCommAbort(work->comm_);
        retire = true;
      } else {
        return limit.count() > 0 && ran + milliseconds(1500) > limit ? kNearDeadlinePoll
                                                                     : kBusyPoll;
      }
    }
    if (retire) {
      std::lock_guard<std::mutex> lock(workMutex_);
      // Only this thread removes works, and launches append at the back: still the front.
      work->stashed_.clear();
      work->keepAlive_.clear();
      if (flightRecorderEnabled()) traceRetire(*work);
      inFlight_.pop_front();
    }
  }
}

void ProcessGroupHCCL::handleFailure(WorkHCCL& work, bool timedOut) {
  const bool first = !failed_.exchange(true);
  if (timedOut) timedOut_ = true;
  if (first && timedOut && flightRecorderEnabled() && flightRecorderSettings().dumpOnTimeout) {
    dumpOnTimeout();
  }
  // Later works of a broken communicator fail too; the first failure is the one to tell.
  if (first || asyncErrorHandling_ == AsyncErrorHandling::kTearDown ||
      asyncErrorHandling_ == AsyncErrorHandling::kSkipCleanUp) {
    std::fprintf(stderr, "%s\n", work.errorText().c_str());
  }
  switch (asyncErrorHandling_) {
    case AsyncErrorHandling::kTearDown:
    case AsyncErrorHandling::kSkipCleanUp:
      if (asyncErrorHandling_ == AsyncErrorHandling::kTearDown) abortComms();
      std::fprintf(stderr,
                   "[Rank %d] Some HCCL operations have failed or timed out. Due to the "
                   "asynchronous nature of NPU kernels, subsequent NPU operations might run on "
                   "corrupted/incomplete data.\n[Rank %d] To avoid data inconsistency, we are "
                   "taking the entire process down (TORCH_HCCL_ASYNC_ERROR_HANDLING=%d; 2 "
                   "raises the error at the next wait() instead).\n",
                   rank_, rank_, static_cast<int>(asyncErrorHandling_));
      std::fflush(stderr);
      std::abort();
    case AsyncErrorHandling::kCleanUpOnly:
      abortComms();
      break;
    case AsyncErrorHandling::kNone:
      break;
  }
}

// ---- the flight recorder ---------------------------------------------------------------------

namespace {

// The flight recorder's names, those of PyTorch's analyzer ("hccl:all_reduce").
const char* traceName(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::ALLREDUCE: return "all_reduce";
    case c10d::OpType::ALLREDUCE_COALESCED: return "all_reduce";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "all_gather";
    case c10d::OpType::_ALLGATHER_BASE: return "_all_gather_base";
    case c10d::OpType::ALLGATHER_COALESCED: return "all_gather";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
    case c10d::OpType::ALLTOALL_BASE: return "all_to_all_single";
    case c10d::OpType::ALLTOALL: return "all_to_all";
    case c10d::OpType::SEND: return "send";
    case c10d::OpType::RECV: return "recv";
    case c10d::OpType::BARRIER: return "barrier";
    default: return "coalesced";
  }
}

constexpr const char* kDumpRequestKey = "simnpu_flight_recorder_dump";
constexpr const char* kDumpedKey = "simnpu_flight_recorder_dumped";

}  // namespace

size_t nextTraceGroupId() {
  static std::atomic<size_t> next{0};
  return next++;
}

void ProcessGroupHCCL::traceLaunch(WorkHCCL& work, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& outputs, int peer) {
  const bool p2p = work.opType_ == c10d::OpType::SEND || work.opType_ == c10d::OpType::RECV;
  std::string name = std::string("hccl:") + traceName(work.opType_);
  if (work.opType_ == c10d::OpType::SEND) name += c10::str(" ", rank_, "->", peer);
  if (work.opType_ == c10d::OpType::RECV) name += c10::str(" ", rank_, "<-", peer);
  // The group's name is set by torch.distributed after the group is made: known by now.
  std::call_once(traceRanksRecorded_, [this] {
    // The analyzer matches ranks across dumps by their global ranks.
    std::vector<uint64_t> ranks = options_->global_ranks_in_group;
    if (ranks.size() != static_cast<size_t>(size_)) {
      ranks.resize(size_);
      for (int r = 0; r < size_; ++r) ranks[r] = static_cast<uint64_t>(r);
    }
    flightRecorderRecordRanks({getGroupUid(), getGroupDesc()}, std::move(ranks));
  });
  work.traceStart_.event = work.ready_;
  work.traceEnd_.event = work.end_;
  traceStatus_->lastEnqueuedSeq = static_cast<int64_t>(work.seq_);
  traceStatus_->lastEnqueuedWorkName = name;
  traceStatus_->lastEnqueuedNumelIn = work.numelIn_;
  traceStatus_->lastEnqueuedNumelOut = work.numelOut_;
  // Sequence numbers: point-to-point works have their own, as in PyTorch's recorder.
  const size_t seq = static_cast<size_t>(work.seq_);
  work.traceId_ = flightRecorderRecord(
      traceGroupId_, {getGroupUid(), getGroupDesc()}, p2p ? 0 : seq, p2p ? seq : 0, seq,
      std::move(name), inputs, outputs, work.ready_ ? &work.traceStart_ : nullptr,
      &work.traceEnd_, work.timeout_, traceStatus_, p2p);
}

void ProcessGroupHCCL::traceRetire(WorkHCCL& work) {
  traceStatus_->lastCompletedSeq = static_cast<int64_t>(work.seq_);
  traceStatus_->lastCompletedWorkName = traceName(work.opType_);
  flightRecorderRetire(work.traceId_);
  work.traceId_.reset();
}

void ProcessGroupHCCL::dumpTrace(const char* why) {
  std::string error;
  const std::string path = flightRecorderDump(rank_, &error);
  if (path.empty()) {
    std::fprintf(stderr, "[Rank %d] flight recorder: no dump (%s): %s\n", rank_, why,
                 error.c_str());
  } else {
    std::fprintf(stderr, "[Rank %d] flight recorder: %s; wrote %s\n", rank_, why, path.c_str());
  }
  std::fflush(stderr);
}

void ProcessGroupHCCL::dumpOnTimeout() {
  traceDumped_ = true;
  dumpTrace("a collective timed out");
  try {
    store_->set(kDumpRequestKey, std::vector<uint8_t>{1});
    (void)store_->add(kDumpedKey, 1);
    // The other ranks' watchdogs look for the request every half second; give them a few.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (store_->add(kDumpedKey, 0) < size_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(50));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[Rank %d] flight recorder: could not ask the other ranks to dump: %s\n",
                 rank_, e.what());
  }
}

void ProcessGroupHCCL::pollDumpRequests() {
  if (tracePipe_ >= 0) {
    char buf[64];
    if (::read(tracePipe_, buf, sizeof buf) > 0) dumpTrace("the debug pipe was written");
  }
  if (!flightRecorderSettings().dumpOnTimeout || traceDumped_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < nextDumpPoll_) return;
  nextDumpPoll_ = now + milliseconds(500);
  try {
    if (!store_->check({kDumpRequestKey})) return;
    traceDumped_ = true;
    dumpTrace("another rank's collective timed out");
    (void)store_->add(kDumpedKey, 1);
  } catch (const std::exception&) {
    // The store is gone (the job is ending): nothing to answer.
  }
}

}  // namespace torch_npu
