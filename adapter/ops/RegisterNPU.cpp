// The registration table of the npu device's native aten kernels: operator name -> body. One
// line per kernel; the bodies are in NPUNativeFunctions.h. Everything not listed here reaches
// the boxed CPU fallback (Fallback.cpp), unless PyTorch decomposes it into listed ops first.
#include <torch/library.h>

#include "NPUNativeFunctions.h"

namespace torch_npu::native {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // allocation, views, storage
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(_reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_source_Storage_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_Storage_storage_offset_));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_Tensor_));
  m.impl("set_", TORCH_FN(set_));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(_has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
  // copies
  m.impl("_copy_from", TORCH_FN(_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
  // fills and scalars
  m.impl("fill_.Scalar", TORCH_FN(fill_Scalar_));
  m.impl("fill_.Tensor", TORCH_FN(fill_Tensor_));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
  // random numbers (on the npu generator)
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("random_", TORCH_FN(random_));
  m.impl("random_.from", TORCH_FN(random_from_));
  m.impl("random_.to", TORCH_FN(random_to_));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float_));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_Tensor_));
  m.impl("bernoulli", TORCH_FN(bernoulli));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("randperm.generator_out", TORCH_FN(randperm_generator_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
  // convolution (ATen's CPU kernel on the stream)
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
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
