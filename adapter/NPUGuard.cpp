// c10::impl::DeviceGuardImplInterface for the npu device: what makes c10::DeviceGuard,
// torch.Stream, torch.Event and torch.accelerator.* work with "npu". Every method forwards to
// the runtime through NPU_CHECK or to the stream pool of NPUStream.h.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "NPUAllocator.h"
#include "NPUException.h"
#include "NPUFunctions.h"
#include "NPUStream.h"

namespace torch_npu {
namespace {

constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

struct NPUGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNPU; }

  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kNPU, "bug: npu guard asked to switch to ", device);
    return c10::Device(kNPU, torch_npu::exchangeDevice(device.index()));
  }

  c10::Device getDevice() const override { return c10::Device(kNPU, currentDevice()); }

  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kNPU, "bug: npu guard asked to switch to ", device);
    torch_npu::setDevice(device.index());
  }

  // Every c10::DeviceGuard calls this on exit, mostly with the device already current: the
  // runtime call (index and usability checks) is skipped then.
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    int current = -1;
    if (npuGetDevice(&current) == npuSuccess && current == device.index()) return;
    (void)npuSetDevice(device.index());
  }

  c10::Stream getStream(c10::Device device) const override {
    return getCurrentNPUStream(device.index()).unwrap();
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return getDefaultNPUStream(device.index()).unwrap();
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    return getStreamFromPool(high_priority ? -1 : 0, device.index()).unwrap();
  }

  // New streams come from the pool too (see NPUStream.h): a stream costs a worker thread.
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return getStreamFromPool(priority, device.index()).unwrap();
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return setCurrentNPUStream(NPUStream(stream)).unwrap();
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return NPUStream(stream).handle();
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) (void)npuEventDestroy(static_cast<npuEvent_t>(event));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    const NPUStream npu_stream(stream);
    DeviceSwitch on_device(npu_stream.device_index());
    if (*event == nullptr) {
      npuEvent_t created = nullptr;
      // PyTorch's default flag is a plain sync point; BACKEND_DEFAULT asks for timing.
      NPU_CHECK(npuEventCreateWithFlags(
          &created, flag == c10::EventFlag::BACKEND_DEFAULT ? npuEventDefault
                                                            : npuEventDisableTiming));
      *event = created;
    }
    NPU_CHECK(npuEventRecord(static_cast<npuEvent_t>(*event), npu_stream.handle()));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    const NPUStream npu_stream(stream);
    NPU_CHECK(npuStreamWaitEvent(npu_stream.handle(), static_cast<npuEvent_t>(event), 0));
  }

  bool queryEvent(void* event) const override {
    if (!event) return true;
    const npuError_t error = npuEventQuery(static_cast<npuEvent_t>(event));
    if (error == npuErrorNotReady) return false;
    NPU_CHECK(error);
    return true;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return torch_npu::deviceCount(); }

  bool queryStream(const c10::Stream& stream) const override { return NPUStream(stream).query(); }

  void synchronizeStream(const c10::Stream& stream) const override {
    NPUStream(stream).synchronize();
  }

  void synchronizeEvent(void* event) const override {
    if (!event) return;
    NPU_CHECK(npuEventSynchronize(static_cast<npuEvent_t>(event)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    lazyInit();
    DeviceSwitch on_device(checkedDeviceIndex(device_index));
    NPU_CHECK(npuDeviceSynchronize());
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    torch_npu::recordDataPtrOnStream(data_ptr, stream);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    NPU_CHECK(npuEventElapsedTime(&ms, static_cast<npuEvent_t>(start),
                                  static_cast<npuEvent_t>(end)));
    return static_cast<double>(ms);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NPUGuardImpl);

}  // namespace
}  // namespace torch_npu
