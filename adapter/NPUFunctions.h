// Device management for the adapter: the current device, the device count and the lazy,
// fork-aware initialisation that every path touching a device goes through.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace torch_npu {

// Devices the runtime shows this process; 0 when none (or on any error). Never throws and never
// starts a stream worker, so it is safe before fork(). Asked of the runtime once, by lazyInit().
c10::DeviceIndex deviceCount() noexcept;

c10::DeviceIndex currentDevice();
// "2026-12-05-08:10:11.123.456": the time stamp of torch_npu's "[ERROR]" lines.
std::string errorTimestamp();           // the calling thread's current device
void setDevice(c10::DeviceIndex device);    // no-op when already current
// Sets `device` current and returns the previous one.
c10::DeviceIndex exchangeDevice(c10::DeviceIndex device);
// Throws a clear error when `device` is not a valid index (-1 means the current device).
c10::DeviceIndex checkedDeviceIndex(c10::DeviceIndex device);

// Initialises the adapter once per process: checks that at least one device is visible and that
// the allocator configuration parses. Cheap after the first call. In a child forked after the
// parent initialised, it throws the message of isInBadFork().
void lazyInit();
bool isInitialized() noexcept;
bool isInBadFork() noexcept;
extern const char* const kBadForkMessage;

// The warning the runtime gives for a rejected ASCEND_RT_VISIBLE_DEVICES ("" if none).
std::string visibleDevicesWarning();

// torch.npu.set_sync_debug_mode: 0 ignores synchronizing operations, 1 warns and 2 raises on
// each (torch_npu's "called a synchronizing NPU operation"). Every stream synchronize the
// adapter does on the caller's behalf checks it first (NPUStream::synchronize): a blocking
// copy to or from the host, item(), a data-dependent op, Stream.synchronize. The device-wide
// torch.npu.synchronize() does not, as in torch_npu and CUDA.
int syncDebugMode() noexcept;
void setSyncDebugMode(int mode);
void warnOrErrorOnSync();

// Restores the calling thread's current device on scope exit (a light c10::DeviceGuard that
// the runtime-only code paths use without going through the guard registry).
class DeviceSwitch {
 public:
  explicit DeviceSwitch(c10::DeviceIndex device);
  ~DeviceSwitch();
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  c10::DeviceIndex previous_;
  c10::DeviceIndex current_;
};

}  // namespace torch_npu
