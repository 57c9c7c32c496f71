// The registration table of the npu device's native aten kernels: operator name -> body. One
// line per kernel; the bodies are in NPUNativeFunctions.h. Everything not listed here reaches
// the boxed CPU fallback (Fallback.cpp), unless PyTorch decomposes it into listed ops first.
#include <torch/library.h>

#include "DeviceCheck.h"
#include "NPUNativeFunctions.h"

namespace torch_npu::native {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // allocation, views, storage
  NPU_IMPL(m, "empty.memory_format", empty_memory_format);
  NPU_IMPL(m, "empty_strided", empty_strided);
  NPU_IMPL(m, "as_strided", as_strided);
  NPU_IMPL(m, "view", view);
  NPU_IMPL(m, "_reshape_alias", _reshape_alias);
  NPU_IMPL(m, "unfold", unfold);
  NPU_IMPL(m, "view_as_real", view_as_real);
  NPU_IMPL(m, "view_as_complex", view_as_complex);
  NPU_IMPL(m, "resize_", resize_);
  NPU_IMPL(m, "set_.source_Storage", set_source_Storage_);
  NPU_IMPL(m, "set_.source_Storage_storage_offset", set_source_Storage_storage_offset_);
  NPU_IMPL(m, "set_.source_Tensor", set_source_Tensor_);
  NPU_IMPL(m, "set_", set_);
  NPU_IMPL(m, "is_set_to", is_set_to);
  NPU_IMPL(m, "_has_compatible_shallow_copy_type", _has_compatible_shallow_copy_type);
  NPU_IMPL(m, "record_stream", record_stream);
  // copies
  NPU_IMPL(m, "_copy_from", _copy_from);
  NPU_IMPL(m, "_copy_from_and_resize", _copy_from_and_resize);
  // fills and scalars
  NPU_IMPL(m, "fill_.Scalar", fill_Scalar_);
  NPU_IMPL(m, "fill_.Tensor", fill_Tensor_);
  NPU_IMPL(m, "zero_", zero_);
  NPU_IMPL(m, "_local_scalar_dense", _local_scalar_dense);
  // random numbers (on the npu generator)
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
  // convolution (ATen's CPU kernel on the stream)
  NPU_IMPL(m, "convolution_overrideable", convolution_overrideable);
  NPU_IMPL(m, "convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_npu::native

namespace torch_npu::native {

// Our copies honour the conj / neg bits themselves (Copy.cpp resolves them while copying). Left
// to the Conjugate and Negative fallbacks, copying a conjugated npu tensor would materialise it
// with clone(), itself a copy: endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace torch_npu::native
