// AscendCL (include/acl/acl.h) over the simulated runtime: each acl call checks what AscendCL
// checks (initialised, ranges, destMax), then forwards to the npu* call of the same meaning and
// maps its error to AscendCL's code; the runtime's message becomes aclGetRecentErrMsg's.
#include "acl/acl.h"

#include <atomic>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_set>

#include "acl_internal.h"
#include "npu/runtime.h"

namespace {

std::atomic<bool> g_initialized{false};
thread_local std::string t_message;

aclError fail(aclError code, std::string message) {
  t_message = std::move(message);
  return code;
}

// The AscendCL code for a runtime error; the runtime's message is kept.
aclError fromRuntime(npuError_t error) {
  if (error == npuSuccess) return ACL_SUCCESS;
  t_message = npuGetLastErrorMessage();
  switch (error) {
    case npuErrorInvalidValue:
    case npuErrorInvalidMemcpyDirection:
    case npuErrorInvalidDevicePointer:
      return ACL_ERROR_RT_PARAM_INVALID;
    case npuErrorInvalidDevice:
      return ACL_ERROR_RT_INVALID_DEVICEID;
    case npuErrorNoDevice:
      return ACL_ERROR_RT_NO_DEVICE;
    case npuErrorMemoryAllocation:
      return ACL_ERROR_RT_MEMORY_ALLOCATION;
    case npuErrorInvalidResourceHandle:
      return ACL_ERROR_RT_INVALID_HANDLE;
    case npuErrorNotReady:
      return ACL_ERROR_RT_EVENT_NOT_COMPLETE;
    case npuErrorLaunchFailure:
      return ACL_ERROR_RT_AICORE_EXCEPTION;  // a kernel failed on the device
    case npuErrorNotSupported:
    case npuErrorStreamCaptureUnsupported:
      return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    default:
      return ACL_ERROR_RT_INTERNAL_ERROR;
  }
}

// A context is a device; the handle of device d's context is d + 1 (never NULL). Created
// contexts are tracked so a destroyed or made-up handle is refused.
std::mutex g_contexts_mutex;
std::unordered_multiset<uintptr_t> g_contexts;

aclrtContext contextOf(int device) {
  return reinterpret_cast<aclrtContext>(static_cast<uintptr_t>(device) + 1);
}

bool parsesAsJsonObject(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  size_t last = text.find_last_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{' && text[last] == '}';
}

npuMemcpyKind toRuntime(aclrtMemcpyKind kind, bool* ok) {
  *ok = true;
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST: return npuMemcpyHostToHost;
    case ACL_MEMCPY_HOST_TO_DEVICE: return npuMemcpyHostToDevice;
    case ACL_MEMCPY_DEVICE_TO_HOST: return npuMemcpyDeviceToHost;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: return npuMemcpyDeviceToDevice;
    case ACL_MEMCPY_DEFAULT: return npuMemcpyDefault;
  }
  *ok = false;
  return npuMemcpyDefault;
}

aclError checkCopy(const char* api, void* dst, size_t destMax, const void* src, size_t count,
                   aclrtMemcpyKind kind, npuMemcpyKind* out) {
  ACL_REQUIRE_INIT(api);
  ACL_REQUIRE_ARG(api, dst && src, "dst and src must not be NULL");
  if (count > destMax) {
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                std::string(api) + ": count " + std::to_string(count) +
                    " bytes is larger than destMax " + std::to_string(destMax) +
                    " (the space at dst); pass the destination's size as destMax");
  }
  bool ok = false;
  *out = toRuntime(kind, &ok);
  ACL_REQUIRE_ARG(api, ok, "kind " + std::to_string(kind) + " is not an aclrtMemcpyKind");
  return ACL_SUCCESS;
}

aclError checkMemset(const char* api, void* devPtr, size_t maxCount, size_t count) {
  ACL_REQUIRE_INIT(api);
  ACL_REQUIRE_ARG(api, devPtr, "devPtr must not be NULL");
  ACL_REQUIRE_ARG(api, count <= maxCount,
                  "count " + std::to_string(count) + " is larger than maxCount " +
                      std::to_string(maxCount));
  return ACL_SUCCESS;
}

}  // namespace

// Shared with acl_mdl.cpp (acl_internal.h).
namespace simnpu_acl {
aclError setError(aclError code, std::string message) { return fail(code, std::move(message)); }
bool initialized() { return g_initialized.load(std::memory_order_acquire); }
aclError fromRuntimeError(npuError_t error) { return fromRuntime(error); }
}  // namespace simnpu_acl

extern "C" {

const char* aclGetRecentErrMsg(void) { return t_message.c_str(); }

aclError aclInit(const char* configPath) {
  if (configPath && *configPath) {
    std::ifstream file(configPath);
    if (!file) {
      return fail(ACL_ERROR_INVALID_FILE, "aclInit: cannot open the config file '" +
                                              std::string(configPath) + "'");
    }
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (!parsesAsJsonObject(text)) {
      return fail(ACL_ERROR_PARSE_FILE, "aclInit: the config file '" + std::string(configPath) +
                                            "' is not a JSON object");
    }
  }
  if (g_initialized.exchange(true)) {
    return fail(ACL_ERROR_REPEAT_INITIALIZE,
                "aclInit: AscendCL is already initialised in this process (call aclFinalize "
                "before initialising again)");
  }
  int count = 0;
  if (npuError_t e = npuGetDeviceCount(&count)) {
    g_initialized = false;
    return fromRuntime(e);
  }
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  ACL_REQUIRE_INIT("aclFinalize");
  int count = 0, current = 0;
  npuGetDeviceCount(&count);
  npuGetDevice(&current);
  for (int d = 0; d < count; ++d) {  // no work may outlive AscendCL
    if (npuSetDevice(d) == npuSuccess) npuDeviceSynchronize();
  }
  npuSetDevice(current);
  g_initialized = false;
  return ACL_SUCCESS;
}

aclError aclrtGetVersion(int32_t* majorVersion, int32_t* minorVersion, int32_t* patchVersion) {
  ACL_REQUIRE_ARG("aclrtGetVersion", majorVersion && minorVersion && patchVersion,
                  "the version pointers must not be NULL");
  *majorVersion = ACL_MAJOR_VERSION;
  *minorVersion = ACL_MINOR_VERSION;
  *patchVersion = ACL_PATCH_VERSION;
  return ACL_SUCCESS;
}

// ---- devices and contexts ----------------------------------------------------------------

aclError aclrtSetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtSetDevice");
  return fromRuntime(npuSetDevice(deviceId));
}

aclError aclrtResetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtResetDevice");
  int current = 0;
  npuGetDevice(&current);
  if (npuError_t e = npuSetDevice(deviceId)) return fromRuntime(e);
  const npuError_t e = npuDeviceSynchronize();
  npuSetDevice(current);
  return fromRuntime(e);
}

aclError aclrtGetDevice(int32_t* deviceId) {
  ACL_REQUIRE_INIT("aclrtGetDevice");
  ACL_REQUIRE_ARG("aclrtGetDevice", deviceId, "deviceId must not be NULL");
  int device = 0;
  if (npuError_t e = npuGetDevice(&device)) return fromRuntime(e);
  *deviceId = device;
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  ACL_REQUIRE_INIT("aclrtGetDeviceCount");
  ACL_REQUIRE_ARG("aclrtGetDeviceCount", count, "count must not be NULL");
  int n = 0;
  if (npuError_t e = npuGetDeviceCount(&n)) return fromRuntime(e);
  *count = static_cast<uint32_t>(n);
  return ACL_SUCCESS;
}

aclError aclrtGetRunMode(aclrtRunMode* runMode) {
  ACL_REQUIRE_INIT("aclrtGetRunMode");
  ACL_REQUIRE_ARG("aclrtGetRunMode", runMode, "runMode must not be NULL");
  *runMode = ACL_HOST;  // the program runs on the host, the device is a card
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void) {
  ACL_REQUIRE_INIT("aclrtSynchronizeDevice");
  return fromRuntime(npuDeviceSynchronize());
}

const char* aclrtGetSocName(void) {
  static std::string name;
  static std::once_flag once;
  std::call_once(once, [] {
    npuDeviceProp prop{};
    name = npuGetDeviceProperties(&prop, 0) == npuSuccess ? prop.soc_version : "";
  });
  return name.empty() ? nullptr : name.c_str();
}

aclError aclrtCreateContext(aclrtContext* context, int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtCreateContext");
  ACL_REQUIRE_ARG("aclrtCreateContext", context, "context must not be NULL");
  if (npuError_t e = npuSetDevice(deviceId)) return fromRuntime(e);
  *context = contextOf(deviceId);
  std::lock_guard<std::mutex> lock(g_contexts_mutex);
  g_contexts.insert(reinterpret_cast<uintptr_t>(*context));
  return ACL_SUCCESS;
}

aclError aclrtDestroyContext(aclrtContext context) {
  ACL_REQUIRE_INIT("aclrtDestroyContext");
  std::lock_guard<std::mutex> lock(g_contexts_mutex);
  auto found = g_contexts.find(reinterpret_cast<uintptr_t>(context));
  if (found == g_contexts.end()) {
    return fail(ACL_ERROR_RT_INVALID_HANDLE,
                "aclrtDestroyContext: the context was not made by aclrtCreateContext or was "
                "already destroyed");
  }
  g_contexts.erase(found);
  return ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  ACL_REQUIRE_INIT("aclrtSetCurrentContext");
  ACL_REQUIRE_ARG("aclrtSetCurrentContext", context, "context must not be NULL");
  const auto device = static_cast<int>(reinterpret_cast<uintptr_t>(context) - 1);
  return fromRuntime(npuSetDevice(device));
}

aclError aclrtGetCurrentContext(aclrtContext* context) {
  ACL_REQUIRE_INIT("aclrtGetCurrentContext");
  ACL_REQUIRE_ARG("aclrtGetCurrentContext", context, "context must not be NULL");
  int device = 0;
  if (npuError_t e = npuGetDevice(&device)) return fromRuntime(e);
  *context = contextOf(device);
  return ACL_SUCCESS;
}

// ---- streams and events ------------------------------------------------------------------

aclError aclrtCreateStream(aclrtStream* stream) {
  ACL_REQUIRE_INIT("aclrtCreateStream");
  ACL_REQUIRE_ARG("aclrtCreateStream", stream, "stream must not be NULL");
  return fromRuntime(npuStreamCreate(reinterpret_cast<npuStream_t*>(stream)));
}

aclError aclrtDestroyStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtDestroyStream");
  ACL_REQUIRE_ARG("aclrtDestroyStream", stream, "stream must not be NULL");
  return fromRuntime(npuStreamDestroy(static_cast<npuStream_t>(stream)));
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtSynchronizeStream");
  return fromRuntime(npuStreamSynchronize(static_cast<npuStream_t>(stream)));
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtStreamWaitEvent");
  return fromRuntime(
      npuStreamWaitEvent(static_cast<npuStream_t>(stream), static_cast<npuEvent_t>(event), 0));
}

aclError aclrtCreateEvent(aclrtEvent* event) {
  ACL_REQUIRE_INIT("aclrtCreateEvent");
  ACL_REQUIRE_ARG("aclrtCreateEvent", event, "event must not be NULL");
  return fromRuntime(npuEventCreate(reinterpret_cast<npuEvent_t*>(event)));
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtDestroyEvent");
  return fromRuntime(npuEventDestroy(static_cast<npuEvent_t>(event)));
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtRecordEvent");
  return fromRuntime(
      npuEventRecord(static_cast<npuEvent_t>(event), static_cast<npuStream_t>(stream)));
}

aclError aclrtSynchronizeEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtSynchronizeEvent");
  return fromRuntime(npuEventSynchronize(static_cast<npuEvent_t>(event)));
}

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status) {
  ACL_REQUIRE_INIT("aclrtQueryEventStatus");
  ACL_REQUIRE_ARG("aclrtQueryEventStatus", status, "status must not be NULL");
  const npuError_t e = npuEventQuery(static_cast<npuEvent_t>(event));
  if (e != npuSuccess && e != npuErrorNotReady) return fromRuntime(e);
  *status = e == npuSuccess ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                            : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  ACL_REQUIRE_INIT("aclrtEventElapsedTime");
  return fromRuntime(npuEventElapsedTime(ms, static_cast<npuEvent_t>(startEvent),
                                         static_cast<npuEvent_t>(endEvent)));
}

// ---- memory --------------------------------------------------------------------------------

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  ACL_REQUIRE_INIT("aclrtMalloc");
  ACL_REQUIRE_ARG("aclrtMalloc", devPtr, "devPtr must not be NULL");
  ACL_REQUIRE_ARG("aclrtMalloc", size > 0, "size must be greater than 0");
  ACL_REQUIRE_ARG("aclrtMalloc",
                  policy == ACL_MEM_MALLOC_HUGE_FIRST || policy == ACL_MEM_MALLOC_HUGE_ONLY ||
                      policy == ACL_MEM_MALLOC_NORMAL_ONLY,
                  "policy " + std::to_string(policy) + " is not an aclrtMemMallocPolicy");
  return fromRuntime(npuMalloc(devPtr, size));
}

aclError aclrtFree(void* devPtr) {
  ACL_REQUIRE_INIT("aclrtFree");
  ACL_REQUIRE_ARG("aclrtFree", devPtr, "devPtr must not be NULL");
  return fromRuntime(npuFree(devPtr));
}

aclError aclrtMallocHost(void** hostPtr, size_t size) {
  ACL_REQUIRE_INIT("aclrtMallocHost");
  ACL_REQUIRE_ARG("aclrtMallocHost", hostPtr, "hostPtr must not be NULL");
  ACL_REQUIRE_ARG("aclrtMallocHost", size > 0, "size must be greater than 0");
  return fromRuntime(npuMallocHost(hostPtr, size));
}

aclError aclrtFreeHost(void* hostPtr) {
  ACL_REQUIRE_INIT("aclrtFreeHost");
  ACL_REQUIRE_ARG("aclrtFreeHost", hostPtr, "hostPtr must not be NULL");
  return fromRuntime(npuFreeHost(hostPtr));
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind kind) {
  npuMemcpyKind k;
  if (aclError e = checkCopy("aclrtMemcpy", dst, destMax, src, count, kind, &k)) return e;
  return fromRuntime(npuMemcpy(dst, src, count, k));
}

aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream) {
  npuMemcpyKind k;
  if (aclError e = checkCopy("aclrtMemcpyAsync", dst, destMax, src, count, kind, &k)) return e;
  return fromRuntime(npuMemcpyAsync(dst, src, count, k, static_cast<npuStream_t>(stream)));
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (aclError e = checkMemset("aclrtMemset", devPtr, maxCount, count)) return e;
  return fromRuntime(npuMemset(devPtr, value, count));
}

aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                          aclrtStream stream) {
  if (aclError e = checkMemset("aclrtMemsetAsync", devPtr, maxCount, count)) return e;
  return fromRuntime(npuMemsetAsync(devPtr, value, count, static_cast<npuStream_t>(stream)));
}

aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free, size_t* total) {
  ACL_REQUIRE_INIT("aclrtGetMemInfo");
  ACL_REQUIRE_ARG("aclrtGetMemInfo", free && total, "free and total must not be NULL");
  if (attr == ACL_DDR_MEM) {  // no separate DDR on the simulated card
    *free = 0;
    *total = 0;
    return ACL_SUCCESS;
  }
  ACL_REQUIRE_ARG("aclrtGetMemInfo", attr == ACL_HBM_MEM,
                  "attr " + std::to_string(attr) + " is not ACL_DDR_MEM or ACL_HBM_MEM");
  return fromRuntime(npuMemGetInfo(free, total));
}

}  // extern "C"
