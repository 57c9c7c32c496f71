// Error codes, names and the per-thread / process-wide "last error".
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>

#include "npu/log.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

thread_local npuError_t t_last_error = npuSuccess;
thread_local std::string t_last_message;

// An error raised inside a task belongs to no calling thread: npuGetLastError on any thread
// reports it once, as an asynchronous accelerator error is.
std::mutex g_async_mutex;
npuError_t g_async_error = npuSuccess;
std::string g_async_message;

}  // namespace

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

npuError_t fail(npuError_t error, std::string message) {
  NPU_LOG(NPU_LOG_ERROR, "RUNTIME", "%s: %s", npuGetErrorName(error), message.c_str());
  t_last_error = error;
  t_last_message = std::move(message);
  return error;
}

void setAsyncError(npuError_t error, const std::string& message) {
  NPU_LOG(NPU_LOG_ERROR, "RUNTIME", "%s (in a task): %s", npuGetErrorName(error),
          message.c_str());
  std::lock_guard<std::mutex> lock(g_async_mutex);
  if (g_async_error == npuSuccess) {  // keep the first: later ones are usually its echoes
    g_async_error = error;
    g_async_message = message;
  }
}

}  // namespace npu::rt

using namespace npu::rt;

extern "C" {

npuError_t npuGetLastError(void) {
  npuError_t error = t_last_error;
  t_last_error = npuSuccess;
  if (error != npuSuccess) return error;
  std::lock_guard<std::mutex> lock(g_async_mutex);
  error = g_async_error;
  if (error != npuSuccess) t_last_message = g_async_message;
  g_async_error = npuSuccess;
  g_async_message.clear();
  return error;
}

npuError_t npuPeekAtLastError(void) {
  if (t_last_error != npuSuccess) return t_last_error;
  std::lock_guard<std::mutex> lock(g_async_mutex);
  return g_async_error;
}

const char* npuGetLastErrorMessage(void) { return t_last_message.c_str(); }

const char* npuGetErrorName(npuError_t error) {
  switch (error) {
    case npuSuccess: return "npuSuccess";
    case npuErrorInvalidValue: return "npuErrorInvalidValue";
    case npuErrorMemoryAllocation: return "npuErrorMemoryAllocation";
    case npuErrorInvalidDevice: return "npuErrorInvalidDevice";
    case npuErrorNoDevice: return "npuErrorNoDevice";
    case npuErrorInvalidDevicePointer: return "npuErrorInvalidDevicePointer";
    case npuErrorInvalidMemcpyDirection: return "npuErrorInvalidMemcpyDirection";
    case npuErrorInvalidResourceHandle: return "npuErrorInvalidResourceHandle";
    case npuErrorNotReady: return "npuErrorNotReady";
    case npuErrorLaunchFailure: return "npuErrorLaunchFailure";
    case npuErrorNotSupported: return "npuErrorNotSupported";
    case npuErrorInitialization: return "npuErrorInitialization";
    case npuErrorStreamCaptureUnsupported: return "npuErrorStreamCaptureUnsupported";
    case npuErrorStreamCaptureInvalidated: return "npuErrorStreamCaptureInvalidated";
    case npuErrorStreamCaptureUnjoined: return "npuErrorStreamCaptureUnjoined";
    case npuErrorDeviceTaskAbort: return "npuErrorDeviceTaskAbort";
    case npuErrorDeviceMemError: return "npuErrorDeviceMemError";
    case npuErrorDeviceLost: return "npuErrorDeviceLost";
    case npuErrorUnknown: return "npuErrorUnknown";
  }
  return "npuErrorUnrecognized";
}

const char* npuGetErrorString(npuError_t error) {
  switch (error) {
    case npuSuccess: return "no error";
    case npuErrorInvalidValue: return "invalid argument";
    case npuErrorMemoryAllocation: return "out of device memory";
    case npuErrorInvalidDevice: return "invalid device ordinal";
    case npuErrorNoDevice: return "no NPU device is visible";
    case npuErrorInvalidDevicePointer: return "invalid device pointer";
    case npuErrorInvalidMemcpyDirection: return "invalid copy direction for the given pointers";
    case npuErrorInvalidResourceHandle: return "invalid stream or event handle";
    case npuErrorNotReady: return "work is still pending";
    case npuErrorLaunchFailure: return "a task failed on the device";
    case npuErrorNotSupported: return "operation not supported";
    case npuErrorInitialization: return "the runtime could not be initialised";
    case npuErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case npuErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case npuErrorStreamCaptureUnjoined: return "capture ended with a forked stream not joined back";
    case npuErrorDeviceTaskAbort: return "FORCE STOP: the device was stopped";
    case npuErrorDeviceMemError: return "UCE ERROR: uncorrectable device memory error";
    case npuErrorDeviceLost: return "the device was lost";
    case npuErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

const char* npuGetRuntimeVersion(void) { return "8.0.RC3.sim"; }
const char* npuGetDriverVersion(void) { return "24.1.rc3.sim"; }

}  // extern "C"
