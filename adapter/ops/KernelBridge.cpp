#include "KernelBridge.h"

#include <atomic>
#include <cstring>
#include <vector>

#include <c10/util/TypeCast.h>

#include "NPUStream.h"

namespace torch_npu::native {
namespace {
// torch_npu's defaults (LazyInitAclops.cpp: matmul off, conv on).
std::atomic<bool> g_allow_hf32_matmul{false};
std::atomic<bool> g_allow_hf32_conv{true};

std::atomic<bool>& hf32Flag(CubeFamily family) {
  return family == CubeFamily::kMatmul ? g_allow_hf32_matmul : g_allow_hf32_conv;
}
}  // namespace

void setAllowHF32(CubeFamily family, bool allow) {
  hf32Flag(family).store(allow, std::memory_order_relaxed);
}

bool allowHF32(CubeFamily family) { return hf32Flag(family).load(std::memory_order_relaxed); }

nk::CubeMath cubeMath(CubeFamily family, c10::ScalarType dtype) {
  return dtype == c10::kFloat && allowHF32(family) ? nk::CubeMath::HF32
                                                   : nk::CubeMath::KeepDtype;
}

std::optional<nk::DType> toKernelDType(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return nk::DType::Float32;
    case c10::kHalf: return nk::DType::Float16;
    case c10::kBFloat16: return nk::DType::BFloat16;
    case c10::kDouble: return nk::DType::Float64;
    case c10::kChar: return nk::DType::Int8;
    case c10::kShort: return nk::DType::Int16;
    case c10::kInt: return nk::DType::Int32;
    case c10::kLong: return nk::DType::Int64;
    case c10::kByte: return nk::DType::UInt8;
    case c10::kBool: return nk::DType::Bool;
    default: return std::nullopt;
  }
}

bool describable(const at::Tensor& t) {
  return t.dim() <= nk::kMaxDims && toKernelDType(t.scalar_type()).has_value() && !t.is_conj() &&
         !t.is_neg();
}

nk::TensorDesc describe(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(describable(t), "describe: ", t.scalar_type(), " tensor of ", t.dim(),
                        " dims has no kernel descriptor");
  return nk::TensorDesc::make(t.numel() > 0 ? t.data_ptr() : nullptr,
                              *toKernelDType(t.scalar_type()), t.sizes().data(),
                              static_cast<int>(t.dim()), t.strides().data());
}

nk::TensorDesc describeReduced(const at::Tensor& t, const at::Tensor& in, uint64_t mask,
                               bool keepdim) {
  nk::TensorDesc d;
  d.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  d.dtype = *toKernelDType(t.scalar_type());
  d.ndim = static_cast<int>(in.dim());
  int64_t src = 0;
  for (int64_t i = 0; i < in.dim(); ++i) {
    const bool reduced = (mask >> i) & 1;
    if (reduced) {
      d.sizes[i] = 1;
      d.strides[i] = 0;
      if (keepdim) ++src;
    } else {
      d.sizes[i] = t.size(src);
      d.strides[i] = t.stride(src);
      ++src;
    }
  }
  return d;
}

nk::Scalar toKernelScalar(const at::Scalar& s) {
  if (s.isFloatingPoint()) return nk::Scalar(s.toDouble());
  if (s.isBoolean()) return nk::Scalar(s.toBool());
  return nk::Scalar(s.toLong());
}

bool iterSupported(const at::TensorIteratorBase& iter) {
  if (iter.ndim() > nk::kMaxDims) return false;
  for (int i = 0; i < iter.ntensors(); ++i) {
    if (!toKernelDType(iter.dtype(i)).has_value()) return false;
    const at::TensorBase& t = iter.tensor_base(i);
    if (t.is_conj() || t.is_neg()) return false;
  }
  return iter.maybe_common_dtype().has_value() || iter.noutputs() > 0;
}

Operand iterOperand(const at::TensorIteratorBase& iter, int arg) {
  Operand op;
  nk::TensorDesc& d = op.desc;
  d.dtype = *toKernelDType(iter.dtype(arg));
  const int ndim = iter.ndim();
  d.ndim = ndim;
  const int64_t element = static_cast<int64_t>(nk::dtype_size(d.dtype));
  const at::IntArrayRef shape = iter.shape();
  const at::IntArrayRef strides = iter.strides(arg);  // bytes, fastest dim first
  for (int k = 0; k < ndim; ++k) {
    d.sizes[k] = shape[ndim - 1 - k];
    d.strides[k] = strides[ndim - 1 - k] / element;
  }
  if (iter.is_cpu_scalar(arg)) {
    std::memcpy(op.value, iter.data_ptr(arg), static_cast<size_t>(element));
    op.inline_value = true;
    for (int k = 0; k < ndim; ++k) d.strides[k] = 0;
  } else {
    d.data = iter.numel() > 0 ? iter.data_ptr(arg) : nullptr;
  }
  return op;
}

std::optional<std::vector<Operand>> iterOperandsRounded(const at::TensorIteratorBase& iter,
                                                        ScalarRead read) {
  std::vector<Operand> operands;
  operands.reserve(static_cast<size_t>(iter.ntensors()));
  for (int k = 0; k < iter.ntensors(); ++k) operands.push_back(iterOperand(iter, k));
  const std::optional<at::ScalarType> common = iter.maybe_common_dtype();
  if (!common || !at::isReducedFloatingType(*common)) return operands;
  for (int k = iter.noutputs(); k < iter.ntensors(); ++k) {
    if (iter.dtype(k) == *common) continue;
    const bool second_input = k == iter.noutputs() + 1;
    if (read == ScalarRead::kOriginalScalar && second_input && iter.is_scalar(k)) continue;
    if (!iter.is_cpu_scalar(k)) return std::nullopt;
    // The scalar's value, cast to the common dtype as ATen's promotion (a dtype copy) casts it.
    Operand& op = operands[static_cast<size_t>(k)];
    op.desc.dtype = *toKernelDType(*common);
    if (*common == at::kHalf) {
      const c10::Half v = c10::fetch_and_cast<c10::Half>(iter.dtype(k), iter.data_ptr(k));
      std::memcpy(op.value, &v, sizeof(v));
    } else {
      const c10::BFloat16 v = c10::fetch_and_cast<c10::BFloat16>(iter.dtype(k), iter.data_ptr(k));
      std::memcpy(op.value, &v, sizeof(v));
    }
  }
  return operands;
}

npuStream_t streamOf(const at::Tensor& t) { return currentStreamHandle(t.device().index()); }

}  // namespace torch_npu::native
