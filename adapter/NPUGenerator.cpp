#include "NPUGenerator.h"

#include <array>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>


#include "NPUFunctions.h"
#include "NPUStream.h"

namespace torch_npu {

NPUGeneratorImpl::NPUGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(at::detail::createCPUGenerator(seed)) {}

void NPUGeneratorImpl::set_current_seed(uint64_t seed) { state_.set_current_seed(seed); }

void NPUGeneratorImpl::set_offset(uint64_t offset) { state_.set_offset(offset); }

uint64_t NPUGeneratorImpl::get_offset() const { return state_.get_offset(); }

uint64_t NPUGeneratorImpl::current_seed() const { return state_.current_seed(); }

uint64_t NPUGeneratorImpl::seed() { return state_.seed(); }

void NPUGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  state_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> NPUGeneratorImpl::get_state() const {
  return state_.unsafeGetGeneratorImpl()->get_state();
}

uint64_t NPUGeneratorImpl::nextLaunchSeed() {
  return state_.get<at::CPUGeneratorImpl>()->random64();
}

NPUGeneratorImpl* NPUGeneratorImpl::clone_impl() const {
  auto* copy = new NPUGeneratorImpl(device().index());
  copy->state_ = state_.clone();
  return copy;
}

const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<at::Generator, kMaxDevices> generators;
  device = device < 0 ? currentDevice() : checkedDeviceIndex(device);
  std::call_once(once[device], [&] {
    generators[device] = at::make_generator<NPUGeneratorImpl>(device);
  });
  return generators[device];
}

at::Generator createNPUGenerator(c10::DeviceIndex device) {
  device = device < 0 ? currentDevice() : checkedDeviceIndex(device);
  return at::make_generator<NPUGeneratorImpl>(device);
}

uint64_t nextLaunchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  // A seed drawn now would be baked into a captured graph, so every replay would repeat the
  // same numbers. CUDA graphs register a Philox offset that each replay advances; until the
  // npu generator has that, capturing a random op is refused rather than silently wrong.
  npuStreamCaptureStatus capturing = npuStreamCaptureStatusNone;
  if (npuStreamIsCapturing(getCurrentNPUStream(device).handle(), &capturing) == npuSuccess &&
      capturing != npuStreamCaptureStatusNone) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false,
        "random ops (dropout, rand, randn, ...) cannot be captured in an NPU graph yet: each "
        "replay would repeat the numbers drawn at capture time. Draw the random tensors outside "
        "the captured region and pass them in as static inputs.");
  }
  auto* impl = at::get_generator_or_default<NPUGeneratorImpl>(generator,
                                                               getDefaultNPUGenerator(device));
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->nextLaunchSeed();
}

}  // namespace torch_npu
