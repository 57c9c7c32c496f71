// sort and topk along one dimension, with int64 indices.
//
// Any dtype (16-bit floats compare in float32, exactly), any strides for every operand.
// Order: NaN sorts as larger than every number (last when ascending, first when descending;
// NaNs keep their input order), as PyTorch. -0.0 and 0.0 are equal. `dim` in [0, ndim);
// a 0-dim input is one line of one element (pass dim 0).
#pragma once

#include <cstdint>

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// Every DType.
bool sort_supports(DType input);

// values / indices have in's shape; values (in's dtype, or any: converted) may have null data
// (argsort). Always stable: equal elements keep their input order in both directions, so
// stable=True and stable=False give the same (valid) result.
void sort(const TensorDesc& values, const TensorDesc& indices, const TensorDesc& in, int dim,
          bool descending);

// The k largest (or smallest) elements of each line along dim, in sorted order (largest
// first, or smallest first), ties broken by lower index first; sorted=False may use this too.
// values / indices: in's shape with size k along dim (0 <= k <= size(dim), the adapter's
// check); values may have null data.
void topk(const TensorDesc& values, const TensorDesc& indices, const TensorDesc& in, int64_t k,
          int dim, bool largest);

}  // namespace npu::kernels
