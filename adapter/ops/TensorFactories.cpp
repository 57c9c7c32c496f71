// Allocation, views and storage kernels: metadata only, except for resize_, which may grow the
// storage (copying the old contents in stream order, see NPUAllocator.cpp).
#include <cmath>

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUAllocator.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

constexpr c10::DispatchKeySet kNPUKeys(c10::DispatchKey::PrivateUse1);

at::Device checkedFactoryDevice(std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory) {
  const at::Device dev = c10::device_or_default(device);
  TORCH_INTERNAL_ASSERT(dev.is_privateuseone(), "bug: npu factory called for device ", dev);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "npu tensors only support the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "Only CPU tensors can be pinned; pass pin_memory=False for an npu tensor");
  return dev;
}

// torch.use_deterministic_algorithms(True) with torch.utils.deterministic.
// fill_uninitialized_memory (its default): new memory holds NaN (integers: their maximum), as on
// the CPU and CUDA, so a read of uninitialised memory shows instead of passing by chance.
bool fillsUninitializedMemory() {
  const auto& ctx = at::globalContext();
  return ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

// Sets sizes (and strides) like the CPU resize, then grows the storage if it is too small.
void resizeImpl(const at::Tensor& self, at::IntArrayRef size, at::OptionalIntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, stride, /*resize_storage=*/false);
  if (impl->numel() == 0) return;
  const size_t itemsize = impl->dtype().itemsize();
  const size_t offset = static_cast<size_t>(impl->storage_offset());
  const size_t needed =
      stride ? at::detail::computeStorageNbytes(size, *stride, itemsize, offset)
             : at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  const c10::Storage& storage = impl->unsafe_storage();
  if (needed > storage.nbytes()) resizeStorageBytes(storage.unsafeGetStorageImpl(), needed);
}


at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  const at::Device dev = checkedFactoryDevice(layout, device, pin_memory);
  const c10::DeviceGuard guard(dev);
  at::Tensor result =
      at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), getNPUDeviceAllocator(), kNPUKeys,
                                c10::dtype_or_default(dtype), memory_format);
  if (C10_UNLIKELY(fillsUninitializedMemory())) at::native::fill_empty_deterministic_(result);
  return result;
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  const at::Device dev = checkedFactoryDevice(layout, device, pin_memory);
  const c10::DeviceGuard guard(dev);
  at::Tensor result = at::detail::empty_strided_generic(
      C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), getNPUDeviceAllocator(),
      kNPUKeys, c10::dtype_or_default(dtype));
  if (C10_UNLIKELY(fillsUninitializedMemory())) at::native::fill_empty_deterministic_(result);
  return result;
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }

at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  const int64_t old_storage_nbytes =
      self.unsafeGetTensorImpl()->has_storage() ? self.storage().nbytes() : 0;
  resizeImpl(self, C10_AS_INTARRAYREF_SLOW(size), std::nullopt);
  if (C10_UNLIKELY(fillsUninitializedMemory())) {
    at::native::fill_resize_deterministic_(self, old_storage_nbytes);
  }
  if (memory_format) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format for resize_: ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_source_Storage_storage_offset_(at::Tensor& self, c10::Storage source,
                                               c10::SymInt storage_offset,
                                               c10::SymIntArrayRef size,
                                               c10::SymIntArrayRef stride) {
  const int64_t offset = storage_offset.expect_int();
  const at::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  const at::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkSetStorage(self, std::move(source), offset, sizes, strides);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  const at::OptionalIntArrayRef stride_opt =
      strides.data() != nullptr ? at::OptionalIntArrayRef(strides) : std::nullopt;
  const c10::DeviceGuard guard(self.device());
  resizeImpl(self, sizes, stride_opt);
  return self;
}

at::Tensor& set_source_Storage_(at::Tensor& self, c10::Storage source) {
  const int64_t itemsize = static_cast<int64_t>(self.dtype().itemsize());
  const int64_t numel = static_cast<int64_t>(source.nbytes()) / itemsize;
  return self.set_(std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_Tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return self.set_(source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, getNPUDeviceAllocator(),
                       /*resizable=*/true);
  return self.set_(std::move(storage), 0, {0}, {});
}

// `Module.to("npu")`, `.npu()`, `.cpu()` and dtype conversions move each Parameter (and its grad)
// with `param.data = moved`, and PyTorch takes that path only between tensors whose TensorImpls
// are "shallow-copy compatible"; otherwise Module._apply builds NEW Parameter objects: tied
// weights come apart and an optimizer made before the move keeps updating the old CPU tensors.
// TensorImpl's own rule knows CPU, CUDA and a few others but leaves PrivateUse1 to its backend.
// The npu's rule is CUDA's: two dense tensors of the CPU or the npu are compatible (set_data then
// swaps storage, sizes, dtype and device under the same Python object); other layouts are not.
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  constexpr c10::DispatchKeySet kDenseBackends(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  const auto isDense = [&](c10::DispatchKeySet keys) {
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
           keys.has_any(kDenseBackends);
  };
  return isDense(self.key_set()) && isDense(from.key_set());
}

bool is_set_to(const at::Tensor& self, const at::Tensor& tensor) {
  return at::native::is_set_to(self, tensor);
}

// Tensor.record_stream: the caching allocator keeps the block until `stream`'s work queued at
// free time has finished.
void record_stream(at::Tensor& self, c10::Stream stream) {
  recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

// ---- arange / linspace (the library's kernels) -------------------------------------------

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  if (!describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("arange", "start_out"), start, end, step, out);
    return out;
  }
  // PyTorch's size rule and checks (RangeFactories.cpp), in double or int64.
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  TORCH_CHECK(st != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
  TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
              "upper bound and larger bound inconsistent with step sign");
  int64_t size;
  if (at::isIntegralType(out.scalar_type(), true) && start.isIntegral(true) &&
      end.isIntegral(true) && step.isIntegral(true)) {
    const int64_t a = start.toLong(), b = end.toLong(), c = step.toLong();
    size = c > 0 ? (b - a + c - 1) / c : (a - b - c - 1) / -c;
  } else {
    size = static_cast<int64_t>(std::ceil((e - s) / st));
  }
  const c10::DeviceGuard guard(out.device());
  if (out.numel() != size) out.resize_({size});
  at::assert_no_internal_overlap(out);  // as ATen's TensorIterator does for the CPU kernel
  if (size == 0) return out;
  launchTask(streamOf(out), "arange",
             [o = describe(out), a = toKernelScalar(start), c = toKernelScalar(step)] {
               nk::arange(o, a, c);
             });
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (!describable(out) || !at::isFloatingType(out.scalar_type())) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("linspace", "out"), start, end, steps, out);
    return out;
  }
  const c10::DeviceGuard guard(out.device());
  if (out.numel() != steps) out.resize_({steps});
  at::assert_no_internal_overlap(out);  // as ATen's TensorIterator does for the CPU kernel
  if (steps == 0) return out;
  launchTask(streamOf(out), "linspace",
             [o = describe(out), a = toKernelScalar(start), b = toKernelScalar(end)] {
               nk::linspace(o, a, b);
             });
  return out;
}

// logspace's out= keeps the CPU kernel's rule, which its meta kernel does not: an out of `steps`
// elements keeps its shape and strides and takes the values in index order (only another count
// is resized to [steps]). The values are ATen's kernel's.
at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         double base, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps || out.dim() == 1) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("logspace", "out"), start, end, steps, base, out);
    return out;
  }
  at::Tensor values = at::empty({steps}, out.options());
  callHostKernel<at::Tensor>(NPU_ATEN_OP("logspace", "out"), start, end, steps, base, values);
  out.copy_(values.view(out.sizes()));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
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
  NPU_IMPL(m, "arange.start_out", arange_out);
  NPU_IMPL(m, "linspace.out", linspace_out);
  NPU_IMPL(m, "logspace.out", logspace_out);
}

}  // namespace torch_npu::native
