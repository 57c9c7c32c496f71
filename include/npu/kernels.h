/*
 * SimNPU operator library: the simulated counterpart of CANN's aclnn kernels.
 *
 * Plain synchronous C++ on raw host pointers; no PyTorch. Every entry point is thread-safe
 * and may be called from any thread (each device stream calls from its own worker); work is
 * spread over one shared thread pool (npu/kernels/thread_pool.h) that the caller joins.
 *
 * Descriptor conventions (npu/kernels/tensor_desc.h), for mapping ATen ops:
 *  - TensorDesc = {data, dtype, ndim, sizes[8], strides[8]}; strides in elements, >= 0.
 *    A TensorDesc for an ATen tensor is (data_ptr(), dtype, sizes(), strides()).
 *  - Elementwise kernels take every operand already broadcast to the output's shape: same
 *    ndim and sizes, stride 0 along broadcast dimensions (what expand() produces). A Python
 *    scalar operand is TensorDesc::broadcast_scalar(&value, dtype, out).
 *  - Type promotion is the caller's: pass the common dtype as `compute`. Operands of other
 *    dtypes are converted on load; the result is converted to out.dtype on store. Float16 and
 *    BFloat16 compute in float32. Comparisons / predicates write to a Bool (or any) output.
 *  - Reductions take `out` with the input's ndim, size 1 (stride 0) along every reduced
 *    dimension, i.e. the keepdim=True view. For keepdim=False, insert the size-1 dims into
 *    the output descriptor. Indices (argmax, max.dim) are int64 positions along the
 *    reduced dimensions taken in row-major order.
 *  - "Along a dim" kernels (softmax, cumsum, ...) take `dim` in [0, ndim).
 *  - Outputs may alias inputs exactly (in-place ops) for elementwise kernels; other partial
 *    overlaps are the caller's problem, as in PyTorch.
 *  - Kernels trust their inputs: the adapter validates arguments and raises Python errors.
 *    A broken internal invariant throws std::logic_error saying it is a bug. The one
 *    data-dependent user error a kernel reports itself is an out-of-range class target in
 *    nll_loss (std::out_of_range, ATen's message), since only the kernel reads the targets.
 *
 * Entry points (namespace npu::kernels; each family's header documents its ops):
 *   copy(dst, src)                          any dtype -> any dtype, strided -> strided
 *   fill(dst, value)
 *   unary(op, out, in, compute, p0, p1)     UnaryOp table: neg, exp, gelu, clamp, ...
 *   binary(op, out, a, b, compute, p0)      BinaryOp table: add (p0 = alpha), eq, pow, ...,
 *                                           activation backward (threshold_backward, ...)
 *   ternary(op, out, a, b, c, compute, p0)  where, addcmul, addcdiv, lerp, clamp(tensor)
 *   reduce(op, out, in, compute, p0)        sum, mean, prod, amax, any, norm, var, ...
 *   arg_reduce(op, values, indices, in, compute)       max/min with indices, argmax/argmin
 *   scan(op, out, indices, in, dim, compute)           cumsum, cumprod, cummax, ...
 *   gemm(c, a, b, alpha, beta), gemm_batched(...)      mm/addmm/bmm/baddbmm, any strides
 *   softmax(out, in, dim, log), softmax_backward(...)
 *   layer_norm(...), layer_norm_backward(...), rms_norm(...), rms_norm_backward(...)
 *   index_select, index_add, embedding(_backward), gather, scatter, arange, linspace,
 *   tril_triu, flip, roll
 *   nll_loss(...), nll_loss_backward(...)  [N, C] / [C] / [N, C, d...] (nll_loss2d)
 *   batch_norm(...), batch_norm_backward(...)          [N, C, *], training or eval
 *   max_pool2d, avg_pool2d, adaptive_avg_pool2d (+ _backward), pool_output_size
 *   conv2d(...), conv2d_backward(...)      implicit GEMM (float32 forward) or im2col + gemm;
 *                                          conv1d = conv2d with H = 1
 *   sort(values, indices, in, dim, descending), topk(values, indices, in, k, dim, largest)
 *   flash_attention_forward / _backward     tiled, online softmax, O(S x D) memory per head:
 *                                           GQA, bands (causal), masks, varlen, dropout
 *   add_rms_norm, rotary_mul(_backward), swiglu(_backward)   torch_npu's fused LLM ops
 *   amp_non_finite_check_and_unscale, amp_update_scale   GradScaler's kernels
 *   fused_adam(items, n, options), fused_sgd(...)        fused optimizers over a list
 *   *_supports(op, dtype)                   ask before calling; unsupported = fall back
 * Headers: elementwise.h, reduce.h, matmul.h, normalization.h, indexing.h, loss.h, bits.h,
 *   batch_norm.h, pooling.h, conv.h, sort.h, attention.h, fused.h, optimizers.h,
 *   thread_pool.h.
 *
 * Example (torch.add(x, y, alpha=2) with x: float32 [4, 5], y: float16 [5] broadcast):
 *   TensorDesc out = TensorDesc::make(o, DType::Float32, {4, 5});
 *   TensorDesc a = TensorDesc::make(x, DType::Float32, {4, 5});
 *   TensorDesc b = TensorDesc::make(y, DType::Float16, {4, 5}, {0, 1});  // expanded
 *   binary(BinaryOp::Add, out, a, b, DType::Float32, 2);
 */
#pragma once

#include "npu/kernels/attention.h"
#include "npu/kernels/batch_norm.h"
#include "npu/kernels/bits.h"
#include "npu/kernels/conv.h"
#include "npu/kernels/elementwise.h"
#include "npu/kernels/fused.h"
#include "npu/kernels/indexing.h"
#include "npu/kernels/loss.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/normalization.h"
#include "npu/kernels/optimizers.h"
#include "npu/kernels/pooling.h"
#include "npu/kernels/quantize.h"
#include "npu/kernels/reduce.h"
#include "npu/kernels/sort.h"
#include "npu/kernels/tensor_desc.h"
#include "npu/kernels/thread_pool.h"
