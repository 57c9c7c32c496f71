// Affine-quantized tensors on npu (dispatch key QuantizedPrivateUse1), as torch_npu has them:
// quantize_per_tensor / quantize_per_channel of an npu float tensor give a quantized npu tensor
// (qint8, quint8, qint32) whose int_repr() and dequantize() run on the device.
//
// How it works:
//  - A quantized npu tensor is ATen's own QTensorImpl (new_qtensor allocates its storage with
//    the npu allocator) holding ATen's per-tensor or per-channel affine quantizer, so the
//    accessors (q_scale, q_per_channel_scales, qscheme, ...) are ATen's native functions.
//  - The values are npu kernels over a dense view of the same storage (storageView): as ATen's
//    CPU quantizer, q = clamp(zero_point + nearbyint(x * (1.0f / float(scale))), qmin, qmax) in
//    float32, and dequantize = float(q - zero_point) * scale.
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
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "DeviceCheck.h"

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

std::pair<int64_t, int64_t> qRange(at::ScalarType qtype) {
  switch (qtype) {
    case at::kQInt8: return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case at::kQUInt8: return {0, std::numeric_limits<uint8_t>::max()};
    default: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
}

// q's values from x, with the inverse scales (float32) and zero points broadcastable to x. In
// float32 like ATen's CPU quantizer (zero_point + nearbyint(x * inv_scale) is a float sum there
// too), in place on one float32 temporary (the input's size) for the 8-bit types; qint32 clamps
// in int64, where float32 cannot hold its bounds.
void quantizeInto(const at::Tensor& q, const at::Tensor& x, const at::Tensor& inv_scale,
                  const at::Tensor& zero_point) {
  const auto [qmin, qmax] = qRange(q.scalar_type());
  at::Tensor r = x.to(at::kFloat) * inv_scale;
  r.round_();
  r.add_(zero_point);
  if (q.scalar_type() == at::kQInt32) {
    storageView(q).copy_(r.to(at::kLong).clamp_(qmin, qmax));
  } else {
    storageView(q).copy_(r.clamp_(qmin, qmax));
  }
}

at::Tensor quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point,
                               at::ScalarType dtype) {
  checkQuantizable("quantize_per_tensor", self, dtype);
  const c10::DeviceGuard guard(self.device());
  at::Tensor q = at::new_qtensor(self.sizes(), self.options().dtype(dtype),
                                 at::make_per_tensor_affine_quantizer(scale, zero_point, dtype));
  if (q.numel() == 0) return q;
  const float inv = 1.0f / static_cast<float>(scale);
  quantizeInto(q, self, at::scalar_tensor(inv, self.options().dtype(at::kFloat)),
               at::scalar_tensor(static_cast<double>(zero_point), self.options().dtype(at::kFloat)));
  return q;
}

// [C] -> broadcastable along `axis` of an ndim-dim tensor.
at::Tensor alongAxis(const at::Tensor& v, int64_t axis, int64_t ndim) {
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
  shape[static_cast<size_t>(axis)] = v.numel();
  return v.reshape(shape);
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
  const at::Tensor inv = scales.to(self.device(), at::kFloat).reciprocal();
  quantizeInto(q, self, alongAxis(inv, axis, self.dim()),
               alongAxis(zero_points.to(self.device(), at::kFloat), axis, self.dim()));
  return q;
}

at::Tensor int_repr(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  return storageView(self).clone(at::MemoryFormat::Preserve);
}

// float(q - zero_point) * scale, as ATen's CPU dequantize: the 8-bit values and their
// difference are exact in float32, so they are converted once and updated in place (one
// float32 temporary); qint32 subtracts in int32 first.
at::Tensor dequantize(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  const at::QScheme scheme = self.qscheme();
  TORCH_CHECK(scheme == at::kPerTensorAffine || scheme == at::kPerChannelAffine,
              "dequantize: quantization scheme ", scheme,
              " is not supported on npu (per-tensor and per-channel affine are)");
  const bool wide = self.scalar_type() == at::kQInt32;
  at::Tensor zp, scale;
  if (scheme == at::kPerTensorAffine) {
    zp = at::scalar_tensor(self.q_zero_point(), self.options().dtype(wide ? at::kInt : at::kFloat));
    scale = at::scalar_tensor(static_cast<float>(self.q_scale()), self.options().dtype(at::kFloat));
  } else {
    const int64_t axis = self.q_per_channel_axis();
    zp = alongAxis(self.q_per_channel_zero_points().to(wide ? at::kInt : at::kFloat), axis,
                   self.dim());
    scale = alongAxis(self.q_per_channel_scales().to(at::kFloat), axis, self.dim());
  }
  const at::Tensor values = storageView(self);
  at::Tensor out = wide ? (values - zp).to(at::kFloat) : values.to(at::kFloat).sub_(zp);
  return out.mul_(scale);
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
