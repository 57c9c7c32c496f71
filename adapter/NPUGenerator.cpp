#include "NPUGenerator.h"

#include <array>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>


#include "NPUFunctions.h"
#include "NPUGraph.h"
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
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.get<at::CPUGeneratorImpl>()->random64();
}

void NPUGeneratorImpl::nextLaunchSeeds(std::vector<uint64_t>& seeds) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint64_t& seed : seeds) seed = state_.get<at::CPUGeneratorImpl>()->random64();
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

namespace {

bool capturing(c10::DeviceIndex device) {
  npuStreamCaptureStatus status = npuStreamCaptureStatusNone;
  return npuStreamIsCapturing(getCurrentNPUStream(device).handle(), &status) == npuSuccess &&
         status != npuStreamCaptureStatusNone;
}

NPUGeneratorImpl* generatorOf(const std::optional<at::Generator>& generator,
                              c10::DeviceIndex device) {
  return at::get_generator_or_default<NPUGeneratorImpl>(generator,
                                                        getDefaultNPUGenerator(device));
}

at::Generator generatorHandle(const std::optional<at::Generator>& generator,
                              c10::DeviceIndex device) {
  generatorOf(generator, device);  // checks that a given generator is an npu one
  return generator.has_value() && generator->defined() ? *generator
                                                       : getDefaultNPUGenerator(device);
}

}  // namespace

LaunchSeed launchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (capturing(device)) {
    NPUGraph* graph = NPUGraph::capturingOnThisThread(device);
    TORCH_CHECK_NOT_IMPLEMENTED(
        graph != nullptr,
        "random ops (dropout, rand, randn, ...) can be captured only by the thread that began "
        "the NPU graph capture (torch.npu.graph / NPUGraph.capture_begin); this stream is "
        "capturing for another thread or outside torch.npu. Draw the random tensors outside the "
        "captured region and pass them in as static inputs.");
    return graph->captureSeed(generatorHandle(generator, device));
  }
  return LaunchSeed(generatorOf(generator, device)->nextLaunchSeed());
}

uint64_t nextLaunchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device,
                        const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !capturing(device), op, " cannot be captured in an NPU graph: it uses its random seed on "
      "the host at the call (or returns it), so every replay would repeat the numbers drawn at "
      "capture time. Run it outside the captured region and pass its result in as a static "
      "input. (dropout, rand, randn, bernoulli and the other elementwise distributions can be "
      "captured.)");
  return generatorOf(generator, device)->nextLaunchSeed();
}

}  // namespace torch_npu
