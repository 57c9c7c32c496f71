// Reductions over a set of dimensions, arg-reductions and scans along one dimension.
//
// Reduced dimensions are given by the output descriptor: `out` has the input's ndim, with
// size 1 along every reduced dimension and the input's size elsewhere (the keepdim=True
// view; for keepdim=False insert size-1 dims, stride 0, into the descriptor). Reducing
// every dimension gives one value.
#pragma once

#include "npu/kernels/tensor_desc.h"

namespace npu::kernels {

// X(EnumName, "aten name")
#define NPU_KERNELS_REDUCE_OPS(X)                                                 \
  X(Sum, "sum")                    /* ints accumulate in int64, float32 pairwise */ \
  X(Mean, "mean")                                                                \
  X(Prod, "prod")                                                                \
  X(Amax, "amax") X(Amin, "amin")  /* NaN propagates */                           \
  X(Any, "any") X(All, "all")      /* write Bool (or any dtype: 0/1) */           \
  X(CountNonzero, "count_nonzero")                                               \
  X(Norm, "norm")                  /* p0 = p: 0, 1, 2, +-inf or any other */     \
  X(Var, "var") X(Std, "std")      /* p0 = correction (1 = unbiased) */          \
  X(LogSumExp, "logsumexp")

#define NPU_KERNELS_ENUM_ENTRY(name, str) name,
enum class ReduceOp { NPU_KERNELS_REDUCE_OPS(NPU_KERNELS_ENUM_ENTRY) };
#undef NPU_KERNELS_ENUM_ENTRY

const char* op_name(ReduceOp op);

// `compute` is the input's dtype after promotion (sum of int32 -> pass Int32; the output,
// typically Int64, receives the int64 accumulator). Mean/Norm/Var/Std/LogSumExp need a
// floating compute dtype. An empty reduction gives the identity (0 for sum, 1 for prod,
// -inf/+inf for amax/amin, NaN for mean/var); PyTorch raises for some of these first.
bool reduce_supports(ReduceOp op, DType compute);
void reduce(ReduceOp op, const TensorDesc& out, const TensorDesc& in, DType compute,
            Scalar p0 = {});

// max/min with indices (max.dim, argmax, ...): `values` (optional: data may be null) and
// `indices` (Int64) use the same keepdim convention as reduce(). The index is the position
// within the reduced dimensions in row-major order, so for argmax over all dims it is the
// flat index. Ties pick the first position; NaN wins (first NaN), as in PyTorch.
enum class ArgReduceOp { Max, Min };
bool arg_reduce_supports(DType compute);
void arg_reduce(ArgReduceOp op, const TensorDesc& values, const TensorDesc& indices,
                const TensorDesc& in, DType compute);

// Scans along `dim`: out has the input's shape. Cummax/Cummin also write `indices` (Int64,
// the input's shape; PyTorch's rule: a later equal value takes the index, NaN sticks);
// pass nullptr for the other ops. Float32 sums accumulate in double, as PyTorch's CPU does.
#define NPU_KERNELS_SCAN_OPS(X) \
  X(Cumsum, "cumsum") X(Cumprod, "cumprod") X(Cummax, "cummax") X(Cummin, "cummin") \
  X(LogCumSumExp, "logcumsumexp")

#define NPU_KERNELS_ENUM_ENTRY(name, str) name,
enum class ScanOp { NPU_KERNELS_SCAN_OPS(NPU_KERNELS_ENUM_ENTRY) };
#undef NPU_KERNELS_ENUM_ENTRY

const char* op_name(ScanOp op);
bool scan_supports(ScanOp op, DType compute);
void scan(ScanOp op, const TensorDesc& out, const TensorDesc* indices, const TensorDesc& in,
          int dim, DType compute);

}  // namespace npu::kernels
