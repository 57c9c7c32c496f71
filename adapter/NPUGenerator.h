// The random number generator of an npu device.
//
// How it works:
//  - The state is a CPU mt19937 generator (the same state format, so get_state / set_state /
//    torch.npu.get_rng_state round-trip with the CPU tools).
//  - Kernels run later, on a stream worker. At launch time, under the generator's mutex, an RNG
//    op draws one 64-bit seed from the state (nextLaunchSeed); the task seeds a private CPU
//    generator with it. Results therefore depend only on the seed and the order of launches on
//    the host, as with CUDA's Philox offsets, and never on when the streams run.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <optional>

namespace torch_npu {

class NPUGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NPUGeneratorImpl(c10::DeviceIndex device,
                            uint64_t seed = c10::default_rng_seed_val);
  ~NPUGeneratorImpl() override = default;

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // A fresh 64-bit seed for one kernel launch. The caller holds mutex_.
  uint64_t nextLaunchSeed();

 private:
  NPUGeneratorImpl* clone_impl() const override;
  at::Generator state_;  // a CPUGeneratorImpl
};

const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device = -1);
at::Generator createNPUGenerator(c10::DeviceIndex device = -1);

// The seed an RNG op on `device` uses: drawn from `generator`, or from the device's default
// generator when none is given. Checks that the generator is an npu one.
uint64_t nextLaunchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

}  // namespace torch_npu
