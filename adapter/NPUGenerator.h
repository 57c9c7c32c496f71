// The random number generator of an npu device.
//
// How it works:
//  - The state is a CPU mt19937 generator (the same state format, so get_state / set_state /
//    torch.npu.get_rng_state round-trip with the CPU tools).
//  - Kernels run later, on a stream worker. At launch time, under the generator's mutex, an RNG
//    op draws one 64-bit seed from the state (nextLaunchSeed); the task seeds a private CPU
//    generator with it. Results therefore depend only on the seed and the order of launches on
//    the host, as with CUDA's Philox offsets, and never on when the streams run.
//  - In an NPU graph capture the seed cannot be drawn at launch (every replay would repeat it).
//    A captured op gets a LaunchSeed naming a slot of the graph's seed table instead; each
//    replay draws, from the generator, the seeds eager execution would have drawn at that point
//    and writes them into the table on the replay stream, in order before the graph runs. A
//    replay therefore gives the numbers an eager run would, and advances the generator as much.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <memory>
#include <optional>
#include <vector>

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

  // Fresh 64-bit seeds for kernel launches, drawn in order under mutex_ (one for an eager
  // launch; a graph replay draws all its captured launches' seeds at once).
  uint64_t nextLaunchSeed();
  void nextLaunchSeeds(std::vector<uint64_t>& seeds);

 private:
  NPUGeneratorImpl* clone_impl() const override;
  at::Generator state_;  // a CPUGeneratorImpl
};

const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device = -1);
at::Generator createNPUGenerator(c10::DeviceIndex device = -1);

// The seed of one RNG task: the value itself for eager work, a slot of a graph's seed table
// (refilled by every replay) for a captured launch. Read it with get() when the task runs.
class LaunchSeed {
 public:
  explicit LaunchSeed(uint64_t fixed) : fixed_(fixed) {}
  LaunchSeed(std::shared_ptr<const std::vector<uint64_t>> table, size_t index)
      : table_(std::move(table)), index_(index) {}
  uint64_t get() const { return table_ ? (*table_)[index_] : fixed_; }

 private:
  uint64_t fixed_ = 0;
  std::shared_ptr<const std::vector<uint64_t>> table_;
  size_t index_ = 0;
};

// The seed of an RNG task on `device`, drawn from `generator` (the device's default generator
// when none is given; it must be an npu one). Inside an NPU graph capture begun by
// torch.npu.NPUGraph on this thread: a slot of that graph's seed table.
LaunchSeed launchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

// A seed the host uses at once (an op that computes on the host, or returns its seed to the
// caller). Refused during a capture: the value would be baked into every replay.
uint64_t nextLaunchSeed(const std::optional<at::Generator>& generator, c10::DeviceIndex device,
                        const char* op);

}  // namespace torch_npu
