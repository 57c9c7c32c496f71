// at::PrivateUse1HooksInterface for the npu device: what ATen asks an accelerator in generic
// code (availability, lazy init, generators, pinned memory, pointer -> device). Registered at
// library load, before any Python code can ask.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "NPUAllocator.h"
#include "NPUException.h"
#include "NPUFunctions.h"
#include "NPUGenerator.h"
#include "NPUHostAllocator.h"
#include "npu/caching_allocator.h"

namespace torch_npu {
namespace {

constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

struct NPUHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }

  // Must not throw nor initialise anything.
  bool isAvailable() const override { return torch_npu::deviceCount() > 0; }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return isInitialized() && device >= 0 && device < torch_npu::deviceCount();
  }

  void init() const override { lazyInit(); }

  c10::DeviceIndex deviceCount() const override { return torch_npu::deviceCount(); }

  void setCurrentDevice(c10::DeviceIndex device) const override { torch_npu::setDevice(device); }

  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return torch_npu::exchangeDevice(device);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= torch_npu::deviceCount()) return currentDevice();
    return torch_npu::exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    lazyInit();
    return getDefaultNPUGenerator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    lazyInit();
    return createNPUGenerator(device);
  }

  bool isPinnedPtr(const void* data) const override { return torch_npu::isPinnedPtr(data); }

  at::Allocator* getPinnedMemoryAllocator() const override {
    lazyInit();
    return getNPUHostAllocator();
  }

  at::Device getDeviceFromPtr(void* data) const override {
    npuPointerAttributes attributes{};
    if (npuPointerGetAttributes(&attributes, data) == npuSuccess &&
        attributes.type == npuMemoryTypeDevice) {
      return at::Device(kNPU, static_cast<c10::DeviceIndex>(attributes.device));
    }
    int device = -1;
    void* base = nullptr;
    size_t size = 0;
    TORCH_CHECK(npu::alloc::CachingAllocator::instance().findAllocation(data, &device, &base,
                                                                         &size),
                "The pointer ", data, " is not NPU device memory");
    return at::Device(kNPU, static_cast<c10::DeviceIndex>(device));
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resizeStorageBytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

struct HooksRegistration {
  HooksRegistration() { at::RegisterPrivateUse1HooksInterface(new NPUHooks()); }
} g_hooks_registration;

}  // namespace
}  // namespace torch_npu
