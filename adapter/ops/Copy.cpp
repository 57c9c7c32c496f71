// Copies between host and device and between devices (the kernel behind Tensor.copy_, .to,
// .npu() and .cpu()).
//
// How it works:
//  - Byte copies (npuMemcpyAsync) when both sides have one dense layout; otherwise the layout /
//    dtype conversion happens where the data is: on the host for host -> device (before the
//    bytes travel), on the device (a task running ATen's CPU copy_ over device memory) for
//    device -> host and device -> device.
//  - Host -> device with non_blocking=False, and device -> host unless it is non_blocking into
//    pinned memory, synchronize the stream: the data is ready when the call returns.
//  - Non-blocking host -> device from pageable memory is staged in a private host buffer, so it
//    stays asynchronous and the caller may reuse its tensor at once. Host buffers used by queued
//    copies are kept alive until the copy ran (TaskTensor.h).
//  - Device -> device on one device runs on its current stream; across devices it runs on the
//    destination's current stream, ordered after the source's current stream by an event (and
//    the source's stream then waits for the copy, so the source memory is not reused early).
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUException.h"
#include "NPUFunctions.h"
#include "NPUHostAllocator.h"
#include "NPUStream.h"
#include "Shadow.h"
#include "TaskTensor.h"

namespace torch_npu::native {
namespace {

size_t spanBytes(const at::Tensor& dense) {
  return static_cast<size_t>(dense.numel()) * dense.element_size();
}

// An event that orders `waiter` after the work queued so far on `producer`.
void streamWaitsFor(const NPUStream& waiter, const NPUStream& producer) {
  npuEvent_t event = nullptr;
  NPU_CHECK(npuEventCreateWithFlags(&event, npuEventDisableTiming));
  const npuError_t recorded = npuEventRecord(event, producer.handle());
  const npuError_t waited =
      recorded == npuSuccess ? npuStreamWaitEvent(waiter.handle(), event, 0) : recorded;
  (void)npuEventDestroy(event);  // the runtime keeps it until the queued record / wait ran
  NPU_CHECK(waited);
}

at::Tensor emptyLike(const at::Tensor& like, at::ScalarType dtype, at::Device device) {
  at::Tensor t = at::empty_strided(like.sizes(), like.strides(),
                                   at::TensorOptions().dtype(dtype).device(device));
  if (like.is_conj()) t._set_conj(true);
  if (like.is_neg()) t._set_neg(true);
  return t;
}

// dst <- src, both npu tensors of one shape, queued on `stream`.
void copyOnDevice(const at::Tensor& dst, const at::Tensor& src, const NPUStream& stream) {
  if (sameDenseLayout(dst, src)) {
    NPU_CHECK(npuMemcpyAsync(dst.data_ptr(), src.data_ptr(), spanBytes(dst),
                             npuMemcpyDeviceToDevice, stream.handle()));
    return;
  }
  if (native::describable(dst) && native::describable(src)) {
    launchKernelTask(stream, "copy_", dst.numel(),
                     [to = native::describe(dst), from = native::describe(src)] {
                       npu::kernels::copy(to, from);
                     });
    return;
  }
  launchTask(stream, "copy_", [to = TaskTensor(dst), from = TaskTensor(src)] {
    to.cpu().copy_(from.cpu());
  });
}

void copyHostToDevice(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const c10::DeviceGuard guard(dst.device());
  const NPUStream stream = getCurrentNPUStream(dst.device().index());
  if (!dst.is_non_overlapping_and_dense()) {
    at::Tensor staging = at::empty(dst.sizes(), dst.options());
    copyHostToDevice(src, staging, /*non_blocking=*/true);
    copyOnDevice(dst, staging, stream);
    if (!non_blocking) stream.synchronize();
    return;
  }
  at::Tensor host = src;
  bool private_buffer = false;
  if (!sameDenseLayout(dst, src)) {
    host = emptyLike(dst, dst.scalar_type(), at::kCPU);
    host.copy_(src);
    private_buffer = true;
  }
  if (!non_blocking) {
    // The sync-debug check before the copy is queued: raising after it would free `host` (a
    // private buffer, or the caller's tensor as it unwinds) while the copy still reads it.
    if (C10_UNLIKELY(syncDebugMode() != 0)) warnOrErrorOnSync();
    NPU_CHECK(npuMemcpyAsync(dst.data_ptr(), host.const_data_ptr(), spanBytes(dst),
                             npuMemcpyHostToDevice, stream.handle()));
    stream.synchronizeAfterSyncDebugCheck();
    return;
  }
  if (!private_buffer && !isPinnedPtr(host.const_data_ptr())) {
    at::Tensor staged = emptyLike(host, host.scalar_type(), at::kCPU);
    staged.copy_(host);
    host = staged;
  }
  NPU_CHECK(npuMemcpyAsync(dst.data_ptr(), host.const_data_ptr(), spanBytes(dst),
                           npuMemcpyHostToDevice, stream.handle()));
  keepAliveUntilDone(stream, host.storage());
}

void copyDeviceToHost(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (!dst.is_non_overlapping_and_dense()) {
    at::Tensor host = at::empty(dst.sizes(), dst.options());
    copyDeviceToHost(src, host, /*non_blocking=*/false);
    dst.copy_(host);
    return;
  }
  if (C10_UNLIKELY(shadowExecution())) warnPlaceholders();
  const c10::DeviceGuard guard(src.device());
  const NPUStream stream = getCurrentNPUStream(src.device().index());
  at::Tensor device_side = src;
  if (!sameDenseLayout(src, dst)) {
    device_side = emptyLike(dst, dst.scalar_type(), src.device());
    copyOnDevice(device_side, src, stream);
  }
  const bool waits = !(non_blocking && isPinnedPtr(dst.const_data_ptr()));
  // The sync-debug check before the copy is queued: raising after it would free `dst` (x.cpu()'s
  // new tensor unwinds) while the copy still writes it, a heap corruption.
  if (waits && C10_UNLIKELY(syncDebugMode() != 0)) warnOrErrorOnSync();
  NPU_CHECK(npuMemcpyAsync(dst.data_ptr(), device_side.const_data_ptr(), spanBytes(dst),
                           npuMemcpyDeviceToHost, stream.handle()));
  if (!waits) {
    keepAliveUntilDone(stream, dst.storage());
    return;
  }
  stream.synchronizeAfterSyncDebugCheck();
}

void copyDeviceToDevice(const at::Tensor& src, const at::Tensor& dst) {
  // torch_npu runs a device-to-device copy_ as CANN's aclnnInplaceCopy and records that name as a
  // profiler range inside aten::copy_ (profiles and check_operators_in_prof look for it).
  RECORD_FUNCTION("aclnnInplaceCopy", std::vector<c10::IValue>());
  const c10::DeviceGuard device_guard(dst.device());
  const NPUStream dst_stream = getCurrentNPUStream(dst.device().index());
  if (src.device() == dst.device()) {
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
    copyOnDevice(dst, src, dst_stream);
    return;
  }
  const NPUStream src_stream = getCurrentNPUStream(src.device().index());
  streamWaitsFor(dst_stream, src_stream);
  copyOnDevice(dst, src, dst_stream);
  streamWaitsFor(src_stream, dst_stream);
}


at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined(), "copy_: the source tensor is undefined");
  TORCH_CHECK(dst.defined(), "copy_: the destination tensor is undefined");
  if (dst.numel() == 0) return dst;
  const at::Tensor src = self.sizes() == dst.sizes() ? self : self.expand_as(dst);
  const bool src_npu = src.is_privateuseone(), dst_npu = dst.is_privateuseone();
  if (src_npu && dst_npu) {
    copyDeviceToDevice(src, dst);
  } else if (dst_npu && src.is_cpu()) {
    copyHostToDevice(src, dst, non_blocking);
  } else if (src_npu && dst.is_cpu()) {
    copyDeviceToHost(src, dst, non_blocking);
  } else {
    TORCH_CHECK(false, "copy_ from ", src.device(), " to ", dst.device(),
                " is not supported by the npu backend; copy through the CPU");
  }
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  // Through the dispatcher: resize_ is TensorFactories.cpp's kernel.
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return native::_copy_from(self, dst, /*non_blocking=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_copy_from", _copy_from);
  NPU_IMPL(m, "_copy_from_and_resize", _copy_from_and_resize);
}

}  // namespace torch_npu::native
