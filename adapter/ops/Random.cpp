// Random number kernels on the npu generator (see NPUGenerator.h for the seeding scheme): each
// launch draws one seed on the host and runs ATen's CPU kernel over device memory with a CPU
// generator seeded from it.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randperm.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "NPUGenerator.h"
#include "NPUStream.h"
#include "TaskTensor.h"

namespace torch_npu::native {
namespace {

using OptionalGenerator = std::optional<at::Generator>;

// Runs op(cpu_view, cpu_generator) on the current stream of self's device.
//
// Bad arguments are reported at once with the CPU kernel's own message: op first runs on a
// one-element CPU tensor of the same dtype with a throwaway generator.
template <typename Op>
at::Tensor& launchRandom(at::Tensor& self, const char* name, const OptionalGenerator& generator,
                         Op op) {
  {
    // A self whose elements alias each other gets a probe of its own geometry, so the CPU
    // kernel's overlap rule decides at the call too (it refuses for most distributions).
    at::Tensor probe = at::has_internal_overlap(self) == at::MemOverlap::No
                           ? at::empty({1}, self.options().device(at::kCPU))
                           : at::empty_strided(self.sizes(), self.strides(),
                                               self.options().device(at::kCPU));
    at::Generator throwaway = at::detail::createCPUGenerator(0);
    op(probe, throwaway);
  }
  if (self.numel() == 0) return self;
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  const LaunchSeed seed = launchSeed(generator, device);
  launchTask(getCurrentNPUStream(device), name, [view = TaskTensor(self), seed, op] {
    at::Generator cpu_generator = at::detail::createCPUGenerator(seed.get());
    at::Tensor t = view.cpu();
    op(t, cpu_generator);
  });
  return self;
}


at::Tensor& normal_(at::Tensor& self, double mean, double std, OptionalGenerator generator) {
  return launchRandom(self, "normal_", generator, [mean, std](at::Tensor& t, at::Generator& g) {
    t.normal_(mean, std, g);
  });
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, OptionalGenerator generator) {
  return launchRandom(self, "uniform_", generator, [from, to](at::Tensor& t, at::Generator& g) {
    t.uniform_(from, to, g);
  });
}

at::Tensor& random_(at::Tensor& self, OptionalGenerator generator) {
  return launchRandom(self, "random_", generator,
                      [](at::Tensor& t, at::Generator& g) { t.random_(g); });
}

at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         OptionalGenerator generator) {
  return launchRandom(self, "random_", generator, [from, to](at::Tensor& t, at::Generator& g) {
    t.random_(from, to, g);
  });
}

at::Tensor& random_to_(at::Tensor& self, int64_t to, OptionalGenerator generator) {
  return launchRandom(self, "random_", generator,
                      [to](at::Tensor& t, at::Generator& g) { t.random_(to, g); });
}

at::Tensor& bernoulli_float_(at::Tensor& self, double p, OptionalGenerator generator) {
  return launchRandom(self, "bernoulli_", generator,
                      [p](at::Tensor& t, at::Generator& g) { t.bernoulli_(p, g); });
}

at::Tensor& bernoulli_Tensor_(at::Tensor& self, const at::Tensor& p, OptionalGenerator generator) {
  if (self.numel() == 0) return self;
  const at::Tensor p_npu = p.device() == self.device() ? p : p.to(self.device());
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  const LaunchSeed seed = launchSeed(generator, device);
  launchTask(getCurrentNPUStream(device), "bernoulli_",
             [view = TaskTensor(self), probs = TaskTensor(p_npu), seed] {
               at::Generator cpu_generator = at::detail::createCPUGenerator(seed.get());
               view.cpu().bernoulli_(probs.cpu(), cpu_generator);
             });
  return self;
}

at::Tensor bernoulli(const at::Tensor& self, OptionalGenerator generator) {
  at::Tensor result = at::empty_like(self, at::MemoryFormat::Contiguous);
  bernoulli_Tensor_(result, self, std::move(generator));
  return result;
}

at::Tensor& exponential_(at::Tensor& self, double lambd, OptionalGenerator generator) {
  return launchRandom(self, "exponential_", generator,
                      [lambd](at::Tensor& t, at::Generator& g) { t.exponential_(lambd, g); });
}

at::Tensor& geometric_(at::Tensor& self, double p, OptionalGenerator generator) {
  return launchRandom(self, "geometric_", generator,
                      [p](at::Tensor& t, at::Generator& g) { t.geometric_(p, g); });
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, OptionalGenerator generator) {
  return launchRandom(self, "log_normal_", generator,
                      [mean, std](at::Tensor& t, at::Generator& g) {
                        t.log_normal_(mean, std, g);
                      });
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, OptionalGenerator generator) {
  return launchRandom(self, "cauchy_", generator, [median, sigma](at::Tensor& t, at::Generator& g) {
    t.cauchy_(median, sigma, g);
  });
}

// The permutation is drawn on the host (from a generator seeded by the npu one) and copied in.
at::Tensor& randperm_generator_out(c10::SymInt n, OptionalGenerator generator, at::Tensor& out) {
  const int64_t count = n.expect_int();
  TORCH_CHECK(count >= 0, "n must be non-negative, got", count);
  const uint64_t seed = nextLaunchSeed(generator, out.device().index(), "randperm");
  at::Tensor host = at::randperm(count, at::detail::createCPUGenerator(seed),
                                 out.options().device(at::kCPU));
  if (out.sizes() != host.sizes()) out.resize_({count});
  out.copy_(host);
  return out;
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options())};
  const at::TensorOptions mask_options = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, mask_options)};
  }
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  at::Tensor mask = at::empty_like(input, mask_options);
  at::Tensor output = at::empty_like(input);
  const c10::DeviceGuard guard(input.device());
  const c10::DeviceIndex device = input.device().index();
  const LaunchSeed seed = launchSeed(std::nullopt, device);
  launchTask(getCurrentNPUStream(device), "native_dropout",
             [in = TaskTensor(input), out = TaskTensor(output), m = TaskTensor(mask), keep, scale,
              seed] {
               at::Generator cpu_generator = at::detail::createCPUGenerator(seed.get());
               at::Tensor mask_view = m.cpu();
               mask_view.bernoulli_(keep, cpu_generator);
               at::Tensor out_view = out.cpu();
               at::mul_out(out_view, in.cpu(), mask_view);
               out_view.mul_(scale);
             });
  return {output, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask,
                                   double scale) {
  // grad_output * mask * scale with broadcasting, as ATen's kernel: the result has the operands'
  // broadcast shape (a 0-dim grad_output with an empty mask gives an empty result).
  const std::vector<int64_t> shape = at::infer_size(grad_output.sizes(), mask.sizes());
  at::Tensor grad_input = grad_output.sizes() == at::IntArrayRef(shape)
                              ? at::empty_like(grad_output)
                              : at::empty(shape, grad_output.options());
  if (grad_input.numel() == 0) return grad_input;
  const c10::DeviceGuard guard(grad_output.device());
  launchTask(getCurrentNPUStream(grad_output.device().index()), "native_dropout_backward",
             [g = TaskTensor(grad_output), m = TaskTensor(mask), out = TaskTensor(grad_input),
              scale] {
               at::Tensor out_view = out.cpu();
               at::mul_out(out_view, g.cpu(), m.cpu());
               out_view.mul_(scale);
             });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "normal_", normal_);
  NPU_IMPL(m, "uniform_", uniform_);
  NPU_IMPL(m, "random_", random_);
  NPU_IMPL(m, "random_.from", random_from_);
  NPU_IMPL(m, "random_.to", random_to_);
  NPU_IMPL(m, "bernoulli_.float", bernoulli_float_);
  NPU_IMPL(m, "bernoulli_.Tensor", bernoulli_Tensor_);
  NPU_IMPL(m, "bernoulli", bernoulli);
  NPU_IMPL(m, "exponential_", exponential_);
  NPU_IMPL(m, "geometric_", geometric_);
  NPU_IMPL(m, "log_normal_", log_normal_);
  NPU_IMPL(m, "cauchy_", cauchy_);
  NPU_IMPL(m, "randperm.generator_out", randperm_generator_out);
  NPU_IMPL(m, "native_dropout", native_dropout);
  NPU_IMPL(m, "native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_npu::native
