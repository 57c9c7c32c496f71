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
#include <vector>

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

// How a binary kernel reads an input whose dtype differs from the iterator's common dtype when
// that is float16 / bfloat16 (our kernels compute those in float, ATen's CPU kernels round):
//  - kCommon: as ATen's CPU TensorIterator does, the input is first cast to the common dtype
//    (`fp16 + 0.3` adds 0.30078125; `fp16 >= 76.89` compares with 76.875);
//  - kOriginalScalar: a scalar second input keeps its value in float, as ATen's CPU mul and
//    division read it; any other input is cast as kCommon.
enum class ScalarRead { kCommon, kOriginalScalar };

// The operands 0..ntensors-1 of `iter` for a kernel that computes in float for float16 /
// bfloat16: CPU scalars are rounded to the common dtype as `read` says. nullopt when a device
// input would need that rounding too (a float32 0-dim tensor, an integer tensor; callers cast
// those first): the caller then hands the call to ATen's kernel, which rounds it.
std::optional<std::vector<Operand>> iterOperandsRounded(const at::TensorIteratorBase& iter,
                                                        ScalarRead read);

// The current stream of `t`'s device: where a kernel on `t` is queued.
npuStream_t streamOf(const at::Tensor& t);

// The cube unit's float32 precision, torch_npu's two switches: torch.npu.matmul.allow_hf32
// (default false: mm, addmm, bmm, baddbmm and what decomposes into them) and
// torch.npu.conv.allow_hf32 (default true: convolutions, forward and backward). Set from Python
// (torch_npu/npu/npu_config.py) whichever way the user sets them; read at each launch, so a
// change applies to the ops launched after it. Honoured in every mode, as on the card.
enum class CubeFamily { kMatmul, kConv };
void setAllowHF32(CubeFamily family, bool allow);
bool allowHF32(CubeFamily family);
// How a cube kernel of `family` on `dtype` operands reads them: HF32 for float32 when allowed.
nk::CubeMath cubeMath(CubeFamily family, c10::ScalarType dtype);

}  // namespace torch_npu::native
