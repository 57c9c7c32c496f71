// Indexing and shape kernels: index_select / embedding, index_add / embedding_backward,
// gather, scatter, arange, linspace, tril / triu, flip, roll.
//
// cat and stack need no kernel of their own: concat() (elementwise.h) where the layouts allow,
// else copy() each input into the matching narrowed (or selected) view of the output descriptor. Index tensors may be Int64 or Int32 (or any
// integer dtype); their values must be in range (the adapter checks, as PyTorch does).
// Unless stated otherwise, out and in have the same dtype.
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// out = in.index_select(dim, index): out has in's shape except size(dim) = index.numel().
void index_select(const TensorDesc& out, const TensorDesc& in, int dim, const TensorDesc& index);

// out.index_add_(dim, index, source, alpha=p): out.select(dim, index[i]) += alpha *
// source.select(dim, i). Duplicate indices accumulate in index order (deterministic).
void index_add(const TensorDesc& out, int dim, const TensorDesc& index, const TensorDesc& source,
               Scalar alpha = 1);

// out[..., :] = weight[indices[...], :]; out has indices' shape + [embedding_dim].
void embedding(const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices);
// grad_weight (overwritten) = sum of grad_output rows per index; rows whose index equals
// padding_idx are skipped (pass -1 for none).
void embedding_backward(const TensorDesc& grad_weight, const TensorDesc& grad_output,
                        const TensorDesc& indices, int64_t padding_idx = -1);

// out = in.gather(dim, index): out and index have the same shape (ndim == in.ndim).
void gather(const TensorDesc& out, const TensorDesc& in, int dim, const TensorDesc& index);

// out.scatter_(dim, index, src[, reduce]): out[.., index[i,j,k], ..] (op)= src[i,j,k]. src has
// index's shape (a Python scalar: TensorDesc::broadcast_scalar). Runs in index order, so
// duplicates resolve deterministically (None: the last write wins).
enum class ScatterReduce { None, Add, Multiply, Amax, Amin };
void scatter(const TensorDesc& out, int dim, const TensorDesc& index, const TensorDesc& src,
             ScatterReduce reduce = ScatterReduce::None);

// 1-D (any stride): out[i] = start + i * step, computed in double (int64 for integer out).
void arange(const TensorDesc& out, Scalar start, Scalar step);
// 1-D: n evenly spaced values from start to end, with PyTorch's two-sided formula (the first
// half counts up from start, the second half down from end, so both ends are exact).
void linspace(const TensorDesc& out, Scalar start, Scalar end);

// Lower (upper) triangle of the last two dims: keep j - i <= diagonal (>= for triu), else 0.
void tril_triu(const TensorDesc& out, const TensorDesc& in, int64_t diagonal, bool upper);

// out = in.flip(dims): flip_mask bit d set flips dimension d.
void flip(const TensorDesc& out, const TensorDesc& in, unsigned flip_mask);
// out = in.roll(shifts, dims) for n (shift, dim) pairs; shifts may be negative or larger
// than the size.
void roll(const TensorDesc& out, const TensorDesc& in, const int64_t* shifts, const int* dims,
          int n);

}  // namespace npu::kernels
