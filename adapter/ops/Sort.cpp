// sort / argsort / topk on the library's stable sort and topk kernels.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

bool sortable(const at::Tensor& self) {
  return describable(self) && nk::sort_supports(*toKernelDType(self.scalar_type()));
}

// values / indices: sized here; the kernel writes them on the stream.
void launchSort(const at::Tensor& self, const at::Tensor& values, const at::Tensor& indices,
                int dim, bool descending) {
  if (self.numel() == 0) return;
  launchTask(getCurrentNPUStream(self.device().index()), "sort",
             [v = describe(values), i = describe(indices), in = describe(self), dim, descending] {
               nk::sort(v, i, in, dim, descending);
             });
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable,
                                               int64_t dim, bool descending) {
  if (!sortable(self)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, stable, dim, descending);
    runOnHost(NPU_ATEN_OP("sort", "stable"), &stack);
    return {stack[0].toTensor(), stack[1].toTensor()};
  }
  const c10::DeviceGuard guard(self.device());
  const int d = self.dim() == 0 ? 0 : static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  at::Tensor values = at::empty(self.sizes(), self.options());
  at::Tensor indices = at::empty(self.sizes(), self.options().dtype(at::kLong));
  launchSort(self, values, indices, d, descending);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self,
                                                        std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values,
                                                        at::Tensor& indices) {
  if (!sortable(self) || values.scalar_type() != self.scalar_type() ||
      indices.scalar_type() != at::kLong || !describable(values)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, stable, dim, descending, values, indices);
    runOnHost(NPU_ATEN_OP("sort", "values_stable"), &stack);
    return {values, indices};
  }
  const c10::DeviceGuard guard(self.device());
  const int d = self.dim() == 0 ? 0 : static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  at::native::resize_output(values, self.sizes());
  at::native::resize_output(indices, self.sizes());
  // The CPU kernel copies self into values unless they are the same tensor; that copy's rules.
  if (!values.is_same(self)) {
    at::assert_no_internal_overlap(values);
    at::assert_no_partial_overlap(values, self);
  }
  launchSort(self, values, indices, d, descending);
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, c10::SymInt k_sym, int64_t dim,
                                        bool largest, bool sorted) {
  const int64_t k = k_sym.expect_int();
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t size = self.dim() == 0 ? 1 : self.size(d);
  // sorted=False leaves the order to the implementation: ATen's, so results match the CPU; a
  // 0-dim input too (its k may be 0 or 1 and the CPU kernel's answer for each is the reference).
  if (!sortable(self) || !sorted || k < 0 || k > size || self.dim() == 0) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, k, dim, largest, sorted);
    runOnHost(NPU_ATEN_OP("topk", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor()};
  }
  const c10::DeviceGuard guard(self.device());
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) shape[d] = k;
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  if (values.numel() > 0) {
    launchTask(getCurrentNPUStream(self.device().index()), "topk",
               [v = describe(values), i = describe(indices), in = describe(self), k,
                kd = static_cast<int>(self.dim() == 0 ? 0 : d), largest] {
                 nk::topk(v, i, in, k, kd, largest);
               });
  }
  return {values, indices};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "sort.stable", sort_stable);
  NPU_IMPL(m, "sort.values_stable", sort_values_stable);
  NPU_IMPL(m, "topk", topk);
}

}  // namespace torch_npu::native
