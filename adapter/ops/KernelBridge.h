// How the adapter hands ATen tensors to the operator library (kernels/, npu/kernels.h): dtype
// mapping, descriptors, operands of a built TensorIterator, and the launch on the stream.
//
// The kernels are synchronous C++ on raw pointers; an npu kernel is one of them queued on the
// current stream of its tensors (streamOf) with descriptors captured by value at launch time. As with
// CUDA, the host returns at once, and memory freed on the host is only reused by work queued
// later on the same stream, so the descriptors stay valid until the kernel has run.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>

#include <optional>

#include "NPUStream.h"
#include "TaskTensor.h"
#include "npu/kernels.h"

namespace torch_npu::native {

namespace nk = npu::kernels;

// The library's dtype for an ATen one; nullopt for dtypes it has no kernels for (complex,
// float8, quantized, unsigned 16-64 bit).
std::optional<nk::DType> toKernelDType(c10::ScalarType type);
// True when the library can take `t` as is: a supported dtype, at most kMaxDims dims, no
// pending conj / neg bit.
bool describable(const at::Tensor& t);
// describable() and of a floating dtype.
inline bool describableFloating(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) && describable(t);
}
// The descriptor of `t` (asserts describable()).
nk::TensorDesc describe(const at::Tensor& t);
// A descriptor of `t` viewed with the reduced dims of `in` kept as size-1 stride-0 dims: the
// output layout reduce() / arg_reduce() expect. `mask` bit d set: dim d of `in` is reduced.
nk::TensorDesc describeReduced(const at::Tensor& t, const at::Tensor& in, uint64_t mask,
                               bool keepdim);

nk::Scalar toKernelScalar(const at::Scalar& s);

// One operand of a queued elementwise kernel: a device tensor's descriptor, or a host scalar
// (a Python number wrapped by PyTorch in a CPU tensor) copied into the task by value.
struct Operand {
  nk::TensorDesc desc;
  bool inline_value = false;
  alignas(16) unsigned char value[16] = {};

  // The descriptor to call the kernel with, valid while this Operand lives.
  nk::TensorDesc get() const {
    nk::TensorDesc d = desc;
    if (inline_value) d.data = const_cast<unsigned char*>(value);
    return d;
  }
};

// True when every operand of `iter` is describable and it has at most kMaxDims dims.
bool iterSupported(const at::TensorIteratorBase& iter);
// Operand `arg` of a built iterator, broadcast to its shape, in the library's row-major order.
Operand iterOperand(const at::TensorIteratorBase& iter, int arg);

// The current stream of `t`'s device: where a kernel on `t` is queued.
NPUStream streamOf(const at::Tensor& t);

}  // namespace torch_npu::native
