// The sparse COO layout on npu (dispatch key SparsePrivateUse1), as far as autograd's sparse
// gradients need it: gather / embedding with sparse_grad=True give the leaf a sparse COO .grad on
// the device, which to_dense() turns back into a strided npu tensor.
//
// How it works:
//  - A sparse npu tensor is ATen's own SparseTensorImpl (device-generic: indices [sparse_dim,
//    nnz] int64 and values [nnz, *dense_sizes] are ordinary npu tensors), so construction and
//    the metadata accessors are ATen's native functions, registered for SparsePrivateUse1.
//  - to_dense is zeros + index_put_(accumulate=True) of the values at the indices, npu kernels
//    (duplicate indices add up, so an uncoalesced tensor densifies correctly).
//  - Anything else on a sparse npu tensor (arithmetic, coalesce, sparse matmul) is not built and
//    raises PyTorch's NotImplementedError naming the op and the 'Sparsenpu' backend; to_dense()
//    or .cpu() first.
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/index_put.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <vector>

namespace torch_npu::native {
namespace {

at::Tensor sparseToDense(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                         std::optional<bool> /*masked_grad*/) {
  TORCH_CHECK(!dtype.has_value(),
              "to_dense: the dtype argument is not supported for a sparse npu tensor; call "
              "to_dense() and then .to(dtype)");
  const c10::DeviceGuard guard(self.device());
  const at::Tensor indices = at::native::_indices_sparse(self);
  const at::Tensor values = at::native::_values_sparse(self);
  at::Tensor dense = at::zeros(self.sizes(), values.options().layout(at::kStrided));
  if (at::native::_nnz_sparse(self) == 0 || dense.numel() == 0) return dense;
  const int64_t sparse_dim = at::native::sparse_dim_sparse(self);
  if (sparse_dim == 0) {  // every value lands on the whole (dense) tensor
    dense.add_(values.dim() > 0 ? values.sum(0) : values);
    return dense;
  }
  c10::List<std::optional<at::Tensor>> where;
  for (int64_t d = 0; d < sparse_dim; ++d) where.push_back(indices.select(0, d));
  dense.index_put_(where, values, /*accumulate=*/true);
  return dense;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_symint));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("_to_dense", TORCH_FN(sparseToDense));
}

}  // namespace torch_npu::native
