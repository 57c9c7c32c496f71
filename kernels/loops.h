// The generic strided loop shared by every elementwise kernel (and copy).
//
// How it works:
//  - make_iter drops size-1 dimensions, orders dimensions so the output's smallest stride is
//    innermost, and merges dimensions that are contiguous for every operand. A contiguous
//    tensor of any shape becomes one dimension.
//  - for_each_segment splits the flat index range over the thread pool; each chunk walks its
//    range one "segment" (a run along the innermost dimension) at a time and hands the
//    segment's base pointers and inner strides to a callback.
//  - ElementwiseKernel turns a segment into calls of an op functor on contiguous arrays of
//    the compute type: operands that already are contiguous arrays of it are used in place,
//    the others (strided, broadcast, other dtype) are converted into small stack buffers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "convert.h"
#include "dtype_traits.h"
#include "npu/kernels/tensor_desc.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels::detail {

template <int N>  // operand 0 is the output
struct StridedIter {
  int ndim = 0;  // after coalescing; 0 means a single element
  int64_t numel = 1;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // in elements
  char* data[N] = {};
  int64_t elem_size[N] = {};
  DType dtype[N] = {};
};

template <int N>
StridedIter<N> make_iter(const TensorDesc* const* ops) {
  const TensorDesc& out = *ops[0];
  StridedIter<N> it;
  for (int k = 0; k < N; ++k) {
    NPU_KERNEL_ASSERT(ops[k]->ndim == out.ndim, "operands must be broadcast to the output shape");
    it.data[k] = static_cast<char*>(ops[k]->data);
    it.dtype[k] = ops[k]->dtype;
    it.elem_size[k] = static_cast<int64_t>(dtype_size(ops[k]->dtype));
  }
  // Keep the dimensions of size != 1, outermost first.
  int dims[kMaxDims];
  int nd = 0;
  for (int d = 0; d < out.ndim; ++d) {
    for (int k = 1; k < N; ++k) {
      NPU_KERNEL_ASSERT(ops[k]->sizes[d] == out.sizes[d], "operand shape differs from output");
    }
    it.numel *= out.sizes[d];
    if (out.sizes[d] != 1) dims[nd++] = d;
  }
  if (it.numel == 0) {
    it.ndim = 1;
    it.sizes[0] = 0;
    return it;
  }
  // Stable insertion sort: dimension a goes outside b when the output (then the first input
  // that differs) has the larger stride there.
  auto outer_than = [&](int a, int b) {
    for (int k = 0; k < N; ++k) {
      int64_t sa = ops[k]->strides[a], sb = ops[k]->strides[b];
      if (sa != sb) return sa > sb;
    }
    return false;
  };
  for (int i = 1; i < nd; ++i) {
    for (int j = i; j > 0 && outer_than(dims[j], dims[j - 1]); --j) std::swap(dims[j], dims[j - 1]);
  }
  // Coalesce, walking from the innermost dimension outwards.
  int out_nd = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
  for (int i = nd - 1; i >= 0; --i) {
    int d = dims[i];
    if (out_nd > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) {
        if (ops[k]->strides[d] != strides[k][out_nd - 1] * sizes[out_nd - 1]) mergeable = false;
      }
      if (mergeable) {
        sizes[out_nd - 1] *= out.sizes[d];
        continue;
      }
    }
    sizes[out_nd] = out.sizes[d];
    for (int k = 0; k < N; ++k) strides[k][out_nd] = ops[k]->strides[d];
    ++out_nd;
  }
  // Store outermost first.
  it.ndim = out_nd;
  for (int i = 0; i < out_nd; ++i) {
    it.sizes[i] = sizes[out_nd - 1 - i];
    for (int k = 0; k < N; ++k) it.strides[k][i] = strides[k][out_nd - 1 - i];
  }
  return it;
}

// Calls seg(char* ptrs[N], const int64_t inner_strides[N], int64_t n) for every run along the
// innermost dimension, in parallel chunks of at least `grain` elements.
template <int N, class Seg>
void for_each_segment(const StridedIter<N>& it, int64_t grain, Seg&& seg) {
  if (it.numel == 0) return;
  if (it.ndim == 0) {  // a single element
    char* p[N];
    int64_t s[N];
    for (int k = 0; k < N; ++k) p[k] = it.data[k], s[k] = 0;
    seg(p, s, int64_t{1});
    return;
  }
  const int inner = it.ndim - 1;
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = it.strides[k][inner];
  if (it.ndim >= 2 && it.sizes[inner] < 256) {
    // Rows of a few elements (a rotary half or an attention head of a [B, S, H, D] view: 16-32
    // values): whole rows per task, the row pointers stepped along the outer dimensions with
    // precomputed byte steps, no per-segment length or position bookkeeping. The same segments
    // in the same order as the general walk below. That walk stays for long rows: whole rows a
    // task cost long rows nothing on one thread (float32 add over broadcast, permuted and
    // transposed views with rows of 256 to 1 M elements: one-thread CPU time within 2% either
    // way, 2026-12-07), but a row is never split, so one contiguous run (ndim 1) would be one
    // task and a few long rows would spread unevenly over the pool (3 rows on 2 threads).
    const int64_t n = it.sizes[inner], rows = it.numel / n;
    // Bytes to add when dimension d steps and the outer dimensions inside it wrap to 0:
    // strides[d] - sum over e in (d, inner) of (sizes[e] - 1) * strides[e].
    int64_t step[N][kMaxDims];
    for (int k = 0; k < N; ++k) {
      int64_t back = 0;
      for (int d = inner - 1; d >= 0; --d) {
        step[k][d] = (it.strides[k][d] - back) * it.elem_size[k];
        back += (it.sizes[d] - 1) * it.strides[k][d];
      }
    }
    parallel_for(0, rows, std::max<int64_t>(1, grain / n), [&](int64_t r0, int64_t r1) {
      int64_t idx[kMaxDims];
      int64_t rem = r0;
      for (int d = inner - 1; d >= 0; --d) {
        idx[d] = rem % it.sizes[d];
        rem /= it.sizes[d];
      }
      char* p[N];
      for (int k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int d = 0; d < inner; ++d) off += idx[d] * it.strides[k][d];
        p[k] = it.data[k] + off * it.elem_size[k];
      }
      for (int64_t r = r0; r < r1; ++r) {
        seg(p, inner_strides, n);
        // Step the innermost outer dimension; a dimension that wraps steps the next one out.
        int d = inner - 1;
        ++idx[d];
        while (d > 0 && idx[d] == it.sizes[d]) {
          idx[d] = 0;
          ++idx[--d];
        }
        for (int k = 0; k < N; ++k) p[k] += step[k][d];
      }
    });
    return;
  }
  auto chunk = [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = inner; d >= 0; --d) {
      idx[d] = rem % it.sizes[d];
      rem /= it.sizes[d];
    }
    // The operands' pointers at idx, then moved along as idx advances (segments can be a few
    // elements long, e.g. a head dimension of 8: recomputing every offset would cost more than
    // the segment itself).
    char* p[N];
    for (int k = 0; k < N; ++k) {
      int64_t off = 0;
      for (int d = 0; d <= inner; ++d) off += idx[d] * it.strides[k][d];
      p[k] = it.data[k] + off * it.elem_size[k];
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(it.sizes[inner] - idx[inner], end - pos);
      seg(p, inner_strides, n);
      pos += n;
      idx[inner] += n;
      for (int k = 0; k < N; ++k) p[k] += n * inner_strides[k] * it.elem_size[k];
      // Carry: a dimension that wrapped goes back to 0, the next outer one steps by 1.
      for (int d = inner; d > 0 && idx[d] == it.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) {
          p[k] += (it.strides[k][d - 1] - it.sizes[d] * it.strides[k][d]) * it.elem_size[k];
        }
      }
    }
  };
  parallel_for(0, it.numel, grain, chunk);
}

// ---- op functors on contiguous arrays ----------------------------------------------------

// Functors may provide a whole-array `apply` (a hand-vectorised body); otherwise the
// element-wise operator() is mapped over the arrays, which the compiler vectorises.
template <class Op, class R, class... In>
inline void apply_op(const Op& op, R* out, int64_t n, const In*... in) {
  if constexpr (requires { op.apply(out, n, in...); }) {
    op.apply(out, n, in...);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]...);
  }
}

// Runs `op` (operator()(T...) -> R) over the iterator. Operand 0 is the output.
template <class T, class R, int NIn, class Op>
void run_elementwise(const Op& op, const TensorDesc* const* ops, int64_t grain) {
  constexpr int N = NIn + 1;
  auto it = make_iter<N>(ops);
  constexpr DType kT = dtype_of<T>();
  constexpr DType kR = dtype_of<R>();
  ConvertFn load[N] = {};
  for (int k = 1; k < N; ++k) load[k] = it.dtype[k] == kT ? nullptr : convert_fn(it.dtype[k], kT);
  ConvertFn store = it.dtype[0] == kR ? nullptr : convert_fn(kR, it.dtype[0]);
  ConvertFn copy_t = convert_fn(kT, kT);
  ConvertFn copy_r = convert_fn(kR, kR);

  // Every operand already an array of its type along the inner dimension: each segment is one
  // call of the op on the operands in place (the rows of a view: 16-32 elements, where the
  // blocking below costs as much as the op).
  bool in_place = !store && it.ndim > 0 && it.strides[0][it.ndim - 1] == 1;
  for (int k = 1; k < N; ++k) in_place = in_place && !load[k] && it.strides[k][it.ndim - 1] == 1;
  if (in_place) {
    for_each_segment(it, grain, [&](char* const* p, const int64_t*, int64_t n) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        apply_op(op, reinterpret_cast<R*>(p[0]), n, reinterpret_cast<const T*>(p[I + 1])...);
      }(std::make_index_sequence<NIn>{});
    });
    return;
  }
  for_each_segment(it, grain, [&](char* const* p, const int64_t* s, int64_t n) {
    constexpr int64_t kBlock = 256;
    alignas(64) T in_buf[NIn > 0 ? NIn : 1][kBlock];
    alignas(64) R out_buf[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t m = std::min(kBlock, n - b);
      const T* in_ptr[NIn > 0 ? NIn : 1];
      for (int k = 0; k < NIn; ++k) {
        char* src = p[k + 1] + b * s[k + 1] * it.elem_size[k + 1];
        if (!load[k + 1] && s[k + 1] == 1) {
          in_ptr[k] = reinterpret_cast<const T*>(src);
        } else {
          (load[k + 1] ? load[k + 1] : copy_t)(src, s[k + 1], in_buf[k], 1, m);
          in_ptr[k] = in_buf[k];
        }
      }
      char* dst = p[0] + b * s[0] * it.elem_size[0];
      bool direct = !store && s[0] == 1;
      R* out_ptr = direct ? reinterpret_cast<R*>(dst) : out_buf;
      [&]<size_t... I>(std::index_sequence<I...>) {
        apply_op(op, out_ptr, m, in_ptr[I]...);
      }(std::make_index_sequence<NIn>{});
      if (!direct) (store ? store : copy_r)(out_buf, 1, dst, s[0], m);
    }
  });
}

}  // namespace npu::kernels::detail
