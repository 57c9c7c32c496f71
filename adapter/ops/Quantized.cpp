// Affine-quantized tensors on npu (dispatch key QuantizedPrivateUse1), as torch_npu has them:
// quantize_per_tensor / quantize_per_channel of an npu float tensor give a quantized npu tensor
// (qint8, quint8, qint32) whose int_repr() and dequantize() run on the device.
//
// How it works:
//  - A quantized npu tensor is ATen's own QTensorImpl (new_qtensor allocates its storage with
//    the npu allocator) holding ATen's per-tensor or per-channel affine quantizer, so the
//    accessors (q_scale, q_per_channel_scales, qscheme, ...) are ATen's native functions.
//  - The values are the library's quantize / dequantize kernels (npu/kernels/quantize.h, ATen's
//    CPU rule in float32) over a dense view of the same storage (storageView).
//  - Quantized arithmetic, quantized convolutions and the other quantized ops are not built: they
//    raise PyTorch's NotImplementedError naming the op and the 'Quantizednpu' backend;
//    dequantize() first.
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <vector>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

void checkQuantizable(const char* op, const at::Tensor& self, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kQInt8 || dtype == at::kQUInt8 || dtype == at::kQInt32, op,
              ": dtype must be torch.qint8, torch.quint8 or torch.qint32 on npu, got ", dtype);
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), op,
              ": the input must be a floating tensor, got ", self.scalar_type());
}

// A dense npu tensor of the underlying integer dtype over q's storage (same sizes and strides).
at::Tensor storageView(const at::Tensor& q) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(q.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(c10::toUnderlying(q.scalar_type())));
  impl->set_sizes_and_strides(q.sizes(), q.strides(), q.storage_offset());
  return at::Tensor(std::move(impl));
}

// q's values from x by the library's kernel (npu/kernels/quantize.h): one pass over contiguous
// memory, no temporaries for a contiguous float32 input. scale / zero_point: `channels` values
// (npu tensors of any dtype); inner: the elements after the channel dim.
void quantizeInto(const at::Tensor& q, const at::Tensor& x, const at::Tensor& scale,
                  const at::Tensor& zero_point, int64_t channels, int64_t inner) {
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  launchTask(streamOf(x), "quantize",
             [qd = describe(storageView(q)), xd = describe(x32), sd = describe(scale),
              zd = describe(zero_point), channels, inner] {
               nk::quantize_affine(qd, xd, sd, zd, channels, inner);
             });
}

// Elements after dim `axis`.
int64_t innerSize(const at::Tensor& t, int64_t axis) {
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < t.dim(); ++d) inner *= t.size(d);
  return inner;
}

at::Tensor quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point,
                               at::ScalarType dtype) {
  checkQuantizable("quantize_per_tensor", self, dtype);
  const c10::DeviceGuard guard(self.device());
  at::Tensor q = at::new_qtensor(self.sizes(), self.options().dtype(dtype),
                                 at::make_per_tensor_affine_quantizer(scale, zero_point, dtype));
  if (q.numel() == 0) return q;
  quantizeInto(q, self, at::full({1}, scale, self.options().dtype(at::kDouble)),
               at::full({1}, zero_point, self.options().dtype(at::kLong)), 1, self.numel());
  return q;
}

at::Tensor quantize_per_channel(const at::Tensor& self, const at::Tensor& scales,
                                const at::Tensor& zero_points, int64_t axis,
                                at::ScalarType dtype) {
  const char* op = "quantize_per_channel";
  checkQuantizable(op, self, dtype);
  TORCH_CHECK(axis >= 0 && axis < self.dim(), op, ": axis must be in [0, ", self.dim(),
              ") for a ", self.dim(), "-dim input, got ", axis);
  TORCH_CHECK(scales.dim() == 1 && scales.numel() == self.size(axis), op,
              ": scales must be 1-D with one scale per channel (", self.size(axis),
              ", the input's size along axis ", axis, "), got shape ", scales.sizes());
  TORCH_CHECK(zero_points.dim() == 1 && zero_points.numel() == self.size(axis), op,
              ": zero_points must be 1-D with one zero point per channel (", self.size(axis),
              "), got shape ", zero_points.sizes());
  const c10::DeviceGuard guard(self.device());
  at::Tensor q = at::new_qtensor(
      self.sizes(), self.options().dtype(dtype),
      at::make_per_channel_affine_quantizer(scales.to(self.device()),
                                            zero_points.to(self.device()), axis, dtype));
  if (q.numel() == 0) return q;
  quantizeInto(q, self, scales.to(self.device()), zero_points.to(self.device()), self.size(axis),
               innerSize(self, axis));
  return q;
}

at::Tensor int_repr(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  return storageView(self).clone(at::MemoryFormat::Preserve);
}

// float(q - zero_point) * scale, as ATen's CPU dequantize, by the library's kernel.
at::Tensor dequantize(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  const at::QScheme scheme = self.qscheme();
  TORCH_CHECK(scheme == at::kPerTensorAffine || scheme == at::kPerChannelAffine,
              "dequantize: quantization scheme ", scheme,
              " is not supported on npu (per-tensor and per-channel affine are)");
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;
  at::Tensor scale, zp;
  int64_t channels = 1, inner = self.numel();
  if (scheme == at::kPerTensorAffine) {
    scale = at::full({1}, self.q_scale(), self.options().dtype(at::kDouble));
    zp = at::full({1}, self.q_zero_point(), self.options().dtype(at::kLong));
  } else {
    const int64_t axis = self.q_per_channel_axis();
    scale = self.q_per_channel_scales();
    zp = self.q_per_channel_zero_points();
    channels = self.size(axis);
    inner = innerSize(self, axis);
  }
  const at::Tensor values = storageView(self).contiguous();
  launchTask(streamOf(out), "dequantize",
             [od = describe(out), qd = describe(values), sd = describe(scale),
              zd = describe(zp), channels, inner] {
               nk::dequantize_affine(od, qd, sd, zd, channels, inner);
             });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "quantize_per_tensor", quantize_per_tensor);
  NPU_IMPL(m, "quantize_per_channel", quantize_per_channel);
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("int_repr", TORCH_FN(int_repr));
  m.impl("dequantize.self", TORCH_FN(dequantize));
  m.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
  m.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
  m.impl("q_per_channel_scales", TORCH_FN(at::native::q_per_channel_scales));
  m.impl("q_per_channel_zero_points", TORCH_FN(at::native::q_per_channel_zero_points));
  m.impl("q_per_channel_axis", TORCH_FN(at::native::q_per_channel_axis));
  m.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
}

}  // namespace torch_npu::native
