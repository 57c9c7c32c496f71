// torch_npu's npu_sign_bits_pack / npu_sign_bits_unpack (1-bit compression of gradients' signs)
// on the library's bit loops (npu/kernels/bits.h).
//   pack(x, size):           float16/float32 x of n elements -> uint8 [size, ceil(n/8)/size],
//                            bit j of byte k = (x[8k+j] >= 0), least significant first
//   unpack(bytes, size, dt): uint8 of m bytes -> dt [size, 8m/size] of +1 / -1
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"
#include "npu/kernels/bits.h"

namespace torch_npu::native {
namespace {

void checkNpu(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": ", name,
              " must be an npu tensor, got one on ", t.device());
}

at::Tensor npu_sign_bits_pack(const at::Tensor& self, int64_t size) {
  checkNpu(self, "npu_sign_bits_pack", "self");
  TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kHalf,
              "npu_sign_bits_pack: self must be float32 or float16, got ", self.scalar_type());
  TORCH_CHECK(self.dim() == 1, "npu_sign_bits_pack: self must be 1-d (flatten it first), got ",
              self.dim(), " dims");
  TORCH_CHECK(size > 0, "npu_sign_bits_pack: size must be positive, got ", size);
  const int64_t n = self.numel();
  const int64_t bytes = (n + 7) / 8;
  TORCH_CHECK(bytes % size == 0, "npu_sign_bits_pack: the ", n, " elements pack into ", bytes,
              " bytes, which do not split into size=", size,
              " rows; pad self so that ceil(numel / 8) is a multiple of size");
  const c10::DeviceGuard guard(self.device());
  at::Tensor x = self.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({size, bytes / size}, self.options().dtype(at::kByte));
  if (n == 0) return out;
  launchKernelTask(streamOf(self), "npu_sign_bits_pack", n,
                   [o = static_cast<uint8_t*>(out.data_ptr()), bytes,
                    in = static_cast<const float*>(x.data_ptr()), n] {
                     nk::sign_bits_pack(o, bytes, in, n);
                   });
  return out;
}

at::Tensor npu_sign_bits_unpack(const at::Tensor& input, int64_t size, at::ScalarType dtype) {
  checkNpu(input, "npu_sign_bits_unpack", "input");
  TORCH_CHECK(input.scalar_type() == at::kByte,
              "npu_sign_bits_unpack: input must be uint8 (packed bits), got ",
              input.scalar_type());
  TORCH_CHECK(input.dim() == 1, "npu_sign_bits_unpack: input must be 1-d, got ", input.dim(),
              " dims");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf,
              "npu_sign_bits_unpack: dtype must be torch.float32 or torch.float16, got ", dtype);
  TORCH_CHECK(size > 0, "npu_sign_bits_unpack: size must be positive, got ", size);
  const int64_t bytes = input.numel();
  TORCH_CHECK((bytes * 8) % size == 0, "npu_sign_bits_unpack: ", bytes * 8,
              " unpacked elements do not split into size=", size, " rows");
  const c10::DeviceGuard guard(input.device());
  at::Tensor in = input.contiguous();
  at::Tensor out = at::empty({size, bytes * 8 / size}, input.options().dtype(at::kFloat));
  if (bytes > 0) {
    launchKernelTask(streamOf(input), "npu_sign_bits_unpack", bytes * 8,
                     [o = static_cast<float*>(out.data_ptr()),
                      i = static_cast<const uint8_t*>(in.data_ptr()), bytes] {
                       nk::sign_bits_unpack(o, i, bytes);
                     });
  }
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  NPU_IMPL(m, "npu_sign_bits_pack", npu_sign_bits_pack);
  NPU_IMPL(m, "npu_sign_bits_unpack", npu_sign_bits_unpack);
}

}  // namespace torch_npu::native
