// The npu device's dispatch rules that belong to no op family (each family registers its own
// kernels beside their bodies, with NPU_IMPL):
//  - the global PrivateUse1 fallback: an aten op without an npu kernel (and not decomposed by
//    PyTorch into ops with one) runs ATen's CPU kernel on the stream, or the CPU fallback
//    (runUnregistered: the card check, then runOnHost; ExecutionPaths.h);
//  - the Conjugate and Negative fallthroughs of our copies.
#include <torch/library.h>

#include "ExecutionPaths.h"

namespace torch_npu {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&runUnregistered>());
}

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

}  // namespace torch_npu
