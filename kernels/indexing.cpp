// Indexing and shape kernels (see npu/kernels/indexing.h).
//
// Most of them reduce to copying runs along the innermost dimension with the library's
// converters; the index arithmetic happens once per run, not per element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "binary_ops.h"
#include "convert.h"
#include "dtype_traits.h"
#include "loops.h"
#include "npu/kernels/elementwise.h"
#include "npu/kernels/indexing.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

int64_t esize_of(const TensorDesc& t) { return static_cast<int64_t>(dtype_size(t.dtype)); }

// The view of t with dimension `dim` fixed at position i (dimension dropped).
TensorDesc select(const TensorDesc& t, int dim, int64_t i) {
  TensorDesc s = t;
  s.data = static_cast<char*>(t.data) + i * t.strides[dim] * esize_of(t);
  for (int d = dim; d + 1 < t.ndim; ++d) {
    s.sizes[d] = t.sizes[d + 1];
    s.strides[d] = t.strides[d + 1];
  }
  s.ndim = t.ndim - 1;
  return s;
}

// Flat element i of a (possibly strided) index tensor.
int64_t index_at(const TensorDesc& idx, int64_t i) {
  int64_t off = 0;
  for (int d = idx.ndim - 1; d >= 0; --d) {
    off += (i % idx.sizes[d]) * idx.strides[d];
    i /= idx.sizes[d];
  }
  return load_index(idx.data, idx.dtype, off);
}

// A typed element update out = op(out, v) in the compute type of S.
template <class S>
void update(S* o, const S* v, ScatterReduce r, double alpha) {
  using C = compute_t<S>;
  if (r == ScatterReduce::None) {
    *o = *v;
    return;
  }
  C a = cast_value<C>(*o), b = cast_value<C>(*v);
  C res;
  switch (r) {
    case ScatterReduce::Add:
      if constexpr (std::is_same_v<C, bool>) res = a || b;
      else res = static_cast<C>(a + static_cast<C>(alpha) * b);
      break;
    case ScatterReduce::Multiply:
      if constexpr (std::is_same_v<C, bool>) res = a && b;
      else res = static_cast<C>(a * b);
      break;
    case ScatterReduce::Amax: res = ops::max_nan(a, b); break;
    default: res = ops::min_nan(a, b); break;
  }
  *o = cast_value<S>(res);
}

}  // namespace
}  // namespace detail

void index_select(const TensorDesc& out, const TensorDesc& in, int dim, const TensorDesc& index) {
  using namespace detail;
  const int64_t n = index.numel();
  // Rows of a contiguous table into rows of a contiguous output (an embedding lookup: [V, D]
  // by [n] indices): one memcpy per row instead of a strided copy() with its iterator set-up
  // (3x the CPU device's time at 4096 rows of 128 floats).
  if (dim == 0 && in.dtype == out.dtype && in.is_contiguous() && out.is_contiguous() &&
      n > 0 && in.sizes[0] > 0) {
    const int64_t row_bytes = in.numel() / in.sizes[0] * esize_of(in);
    const char* src = static_cast<const char*>(in.data);
    char* dst = static_cast<char*>(out.data);
    parallel_for(0, n, std::max<int64_t>(1, 262144 / std::max<int64_t>(1, row_bytes)),
                 [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        std::memcpy(dst + i * row_bytes, src + index_at(index, i) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    });
    return;
  }
  // One task per selected slice; copy() inside a parallel region runs inline.
  int64_t slice = std::max<int64_t>(1, in.numel() / std::max<int64_t>(1, in.sizes[dim]));
  parallel_for(0, n, std::max<int64_t>(1, 65536 / slice), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      copy(select(out, dim, i), select(in, dim, index_at(index, i)));
    }
  });
}

void index_add(const TensorDesc& out, int dim, const TensorDesc& index, const TensorDesc& source,
               Scalar alpha) {
  using namespace detail;
  // Parallel over the elements of one slice, serial over the index: duplicates never race
  // and accumulate in index order.
  const int64_t n = index.numel();
  TensorDesc o0 = select(out, dim, 0);
  TensorDesc s0 = select(source, dim, 0);
  const TensorDesc* ops[2] = {&o0, &s0};
  auto it = make_iter<2>(ops);
  const int64_t ostride = out.strides[dim] * esize_of(out);
  const int64_t sstride = source.strides[dim] * esize_of(source);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = index_at(index, i);
  ConvertFn to_out = convert_fn(source.dtype, out.dtype);
  dispatch_storage(out.dtype, [&]<class S>() {
    for_each_segment(it, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)),
                     [&](char* const* p, const int64_t* s, int64_t m) {
      std::unique_ptr<S[]> buf(new S[static_cast<size_t>(m)]);  // not vector: S may be bool
      for (int64_t i = 0; i < n; ++i) {
        S* o = reinterpret_cast<S*>(p[0] + idx[i] * ostride);
        to_out(p[1] + i * sstride, s[1], buf.get(), 1, m);
        for (int64_t k = 0; k < m; ++k) update(o + k * s[0], &buf[k], ScatterReduce::Add, alpha.f);
      }
    });
  });
}

void embedding(const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices) {
  using namespace detail;
  const int64_t n = indices.numel(), D = weight.sizes[1];
  NPU_KERNEL_ASSERT(out.ndim == indices.ndim + 1, "embedding output is indices' shape + [dim]");
  parallel_for(0, n, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, D)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t off = 0, rem = i;
      for (int d = indices.ndim - 1; d >= 0; --d) {
        off += (rem % out.sizes[d]) * out.strides[d];
        rem /= out.sizes[d];
      }
      TensorDesc dst = TensorDesc::make(static_cast<char*>(out.data) + off * esize_of(out),
                                        out.dtype, {D}, {out.strides[out.ndim - 1]});
      copy(dst, select(weight, 0, index_at(indices, i)));
    }
  });
}

void embedding_backward(const TensorDesc& grad_weight, const TensorDesc& grad_output,
                        const TensorDesc& indices, int64_t padding_idx) {
  using namespace detail;
  fill(grad_weight, 0.0);
  // grad_output viewed as [n, D]; rows whose index is padding_idx are dropped.
  const int64_t n = indices.numel(), D = grad_weight.sizes[1];
  std::vector<int64_t> keep_idx, keep_row;
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = index_at(indices, i);
    if (v != padding_idx) keep_idx.push_back(v), keep_row.push_back(i);
  }
  if (keep_idx.empty() || D == 0) return;
  // Row i of grad_output starts where its leading coordinates say.
  std::vector<char*> rows(keep_row.size());
  for (size_t k = 0; k < keep_row.size(); ++k) {
    int64_t off = 0, rem = keep_row[k];
    for (int d = indices.ndim - 1; d >= 0; --d) {
      off += (rem % grad_output.sizes[d]) * grad_output.strides[d];
      rem /= grad_output.sizes[d];
    }
    rows[k] = static_cast<char*>(grad_output.data) + off * esize_of(grad_output);
  }
  const int64_t gstride = grad_output.strides[grad_output.ndim - 1];
  // Rows grouped by index (stable: each group keeps row order, so sums are deterministic).
  // Each group is summed in the compute type (float for float16/bfloat16, as CUDA's kernel
  // accumulates) and rounded once into grad_weight; adding row by row into a 16-bit
  // grad_weight would round after every row and lose the small rows of a long sum.
  // A counting sort when the table is not much larger than the index list (a vocabulary's
  // embedding over a batch: 4096 tokens into 256 rows took a comparison sort a third of the
  // kernel's time); the same stable order either way.
  std::vector<size_t> order(keep_idx.size());
  const int64_t table_rows = grad_weight.sizes[0];
  const auto [lo, hi] = std::minmax_element(keep_idx.begin(), keep_idx.end());
  // The adapter refuses an index outside the table with PyTorch's message; here it would write
  // outside grad_weight.
  NPU_KERNEL_ASSERT(*lo >= 0 && *hi < table_rows, "embedding_backward: an index outside [0, rows)");
  if (table_rows <= 4 * static_cast<int64_t>(n) + 4096) {
    std::vector<size_t> start(static_cast<size_t>(table_rows) + 1, 0);
    for (int64_t v : keep_idx) ++start[static_cast<size_t>(v) + 1];
    for (size_t r = 1; r < start.size(); ++r) start[r] += start[r - 1];
    for (size_t k = 0; k < keep_idx.size(); ++k) order[start[static_cast<size_t>(keep_idx[k])]++] = k;
  } else {
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return keep_idx[a] < keep_idx[b]; });
  }
  std::vector<size_t> group_start{0};
  for (size_t k = 1; k < order.size(); ++k) {
    if (keep_idx[order[k]] != keep_idx[order[k - 1]]) group_start.push_back(k);
  }
  group_start.push_back(order.size());
  // Parallel over columns of the embedding: no two tasks touch the same element.
  dispatch_storage(grad_weight.dtype, [&]<class S>() {
    using C = compute_t<S>;
    ConvertFn to_c = convert_fn(grad_output.dtype, dtype_of<C>());
    parallel_for(0, D, 64, [&](int64_t c0, int64_t c1) {
      const int64_t m = c1 - c0;
      if constexpr (std::is_same_v<S, float>) {
        // float32 rows contiguous along D: summed straight from grad_output, no conversion
        // call per row (the same additions in the same order as below).
        if (grad_output.dtype == DType::Float32 && gstride == 1 && grad_weight.strides[1] == 1) {
          for (size_t g = 0; g + 1 < group_start.size(); ++g) {
            float* w = static_cast<float*>(grad_weight.data) +
                       keep_idx[order[group_start[g]]] * grad_weight.strides[0] + c0;
            const float* first = reinterpret_cast<const float*>(rows[order[group_start[g]]]) + c0;
            for (int64_t c = 0; c < m; ++c) w[c] = 0.0f + first[c];
            for (size_t k = group_start[g] + 1; k < group_start[g + 1]; ++k) {
              const float* src = reinterpret_cast<const float*>(rows[order[k]]) + c0;
              for (int64_t c = 0; c < m; ++c) w[c] += src[c];
            }
          }
          return;
        }
      }
      std::unique_ptr<C[]> row(new C[static_cast<size_t>(m)]);
      std::unique_ptr<C[]> acc(new C[static_cast<size_t>(m)]);
      for (size_t g = 0; g + 1 < group_start.size(); ++g) {
        for (int64_t c = 0; c < m; ++c) acc[c] = C(0);
        for (size_t k = group_start[g]; k < group_start[g + 1]; ++k) {
          to_c(rows[order[k]] + c0 * gstride * esize_of(grad_output), gstride, row.get(), 1, m);
          for (int64_t c = 0; c < m; ++c) {
            if constexpr (std::is_same_v<C, bool>) acc[c] = acc[c] || row[c];
            else acc[c] += row[c];
          }
        }
        S* w = static_cast<S*>(grad_weight.data) + keep_idx[order[group_start[g]]] *
                                                       grad_weight.strides[0];
        for (int64_t c = 0; c < m; ++c) w[(c0 + c) * grad_weight.strides[1]] = cast_value<S>(acc[c]);
      }
    });
  });
}

void gather(const TensorDesc& out, const TensorDesc& in, int dim, const TensorDesc& index) {
  using namespace detail;
  // Iterate over (out, index, in with index's sizes and stride 0 along dim).
  TensorDesc src = in;
  for (int d = 0; d < in.ndim; ++d) src.sizes[d] = index.sizes[d];
  src.strides[dim] = 0;
  const TensorDesc* ops[3] = {&out, &index, &src};
  auto it = make_iter<3>(ops);
  const int64_t es = esize_of(in), step = in.strides[dim] * es;
  ConvertFn conv = convert_fn(in.dtype, out.dtype);
  for_each_segment(it, 16384, [&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t v = load_index(p[1], index.dtype, j * s[1]);
      conv(p[2] + j * s[2] * es + v * step, 1, p[0] + j * s[0] * esize_of(out), 1, 1);
    }
  });
}

void scatter(const TensorDesc& out, int dim, const TensorDesc& index, const TensorDesc& src,
             ScatterReduce reduce) {
  using namespace detail;
  TensorDesc dst = out;
  for (int d = 0; d < out.ndim; ++d) dst.sizes[d] = index.sizes[d];
  dst.strides[dim] = 0;
  TensorDesc s = src;
  for (int d = 0; d < src.ndim; ++d) s.sizes[d] = index.sizes[d];
  const TensorDesc* ops[3] = {&index, &s, &dst};
  auto it = make_iter<3>(ops);
  const int64_t es = esize_of(out), step = out.strides[dim] * es;
  ConvertFn conv = convert_fn(src.dtype, out.dtype);
  dispatch_storage(out.dtype, [&]<class S>() {
    // Serial: two index entries may name the same output element.
    for_each_segment(it, int64_t{1} << 62, [&](char* const* p, const int64_t* st, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t v = load_index(p[0], index.dtype, j * st[0]);
        S val;
        conv(p[1] + j * st[1] * esize_of(src), 1, &val, 1, 1);
        update(reinterpret_cast<S*>(p[2] + j * st[2] * es + v * step), &val, reduce, 1.0);
      }
    });
  });
}

void arange(const TensorDesc& out, Scalar start, Scalar step) {
  using namespace detail;
  const int64_t n = out.numel();
  dispatch_storage(out.dtype, [&]<class S>() {
    S* o = static_cast<S*>(out.data);
    const int64_t st = out.ndim ? out.strides[0] : 1;
    // value(i) is the same expression on both paths; the unit-stride one is a loop of its own
    // so that the compiler vectorises it (Hugging Face's logits processors make an
    // arange(32000) at every token: 23 -> 9.5 us a call, host dispatch included).
    auto value = [&](int64_t i) {
      if constexpr (std::is_floating_point_v<compute_t<S>>) {
        return cast_value<S>(start.f + i * step.f);
      } else {
        return cast_value<S>(start.i + i * step.i);
      }
    };
    parallel_for(0, n, 32768, [&](int64_t i0, int64_t i1) {
      if (st == 1) {
        for (int64_t i = i0; i < i1; ++i) o[i] = value(i);
      } else {
        for (int64_t i = i0; i < i1; ++i) o[i * st] = value(i);
      }
    });
  });
}

void linspace(const TensorDesc& out, Scalar start, Scalar end) {
  using namespace detail;
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_storage(out.dtype, [&]<class S>() {
    S* o = static_cast<S*>(out.data);
    const int64_t st = out.ndim ? out.strides[0] : 1;
    const double step = n > 1 ? (end.f - start.f) / double(n - 1) : 0.0;
    const int64_t half = n / 2;
    parallel_for(0, n, 32768, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double v = (i < half || n == 1) ? start.f + step * i : end.f - step * (n - 1 - i);
        o[i * st] = cast_value<S>(v);
      }
    });
  });
}

namespace {

// out[coords] = in[map(coords)] where each dimension maps independently: identity, reversal
// (flip) or rotation by `shift` (roll). Rows along the last dim are copied as one run
// (identity), one reversed run (flip) or two runs (roll).
void remap_copy(const TensorDesc& out, const TensorDesc& in, const bool* flipped,
                const int64_t* shift) {
  using namespace detail;
  if (out.numel() == 0) return;
  if (out.ndim == 0) return copy(out, in);
  const int last = out.ndim - 1;
  const int64_t C = out.sizes[last], rows = out.numel() / C;
  const int64_t eo = esize_of(out), ei = esize_of(in);
  ConvertFn conv = convert_fn(in.dtype, out.dtype);
  auto src_coord = [&](int d, int64_t c) {
    int64_t n = out.sizes[d];
    if (flipped[d]) return n - 1 - c;
    return ((c - shift[d]) % n + n) % n;
  };
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t ooff = 0, ioff = 0, rem = r;
      for (int d = last - 1; d >= 0; --d) {
        int64_t c = rem % out.sizes[d];
        rem /= out.sizes[d];
        ooff += c * out.strides[d];
        ioff += src_coord(d, c) * in.strides[d];
      }
      char* o = static_cast<char*>(out.data) + ooff * eo;
      const char* i = static_cast<const char*>(in.data) + ioff * ei;
      const int64_t so = out.strides[last], si = in.strides[last];
      if (flipped[last]) {
        // Walk the source backwards (a negative stride, internal to this loop only).
        conv(i + (C - 1) * si * ei, -si, o, so, C);
      } else {
        int64_t s = ((shift[last] % C) + C) % C;  // out[j] = in[j - s]
        conv(i, si, o + s * so * eo, so, C - s);
        conv(i + (C - s) * si * ei, si, o, so, s);
      }
    }
  });
}

}  // namespace

void flip(const TensorDesc& out, const TensorDesc& in, unsigned flip_mask) {
  bool flipped[kMaxDims] = {};
  int64_t shift[kMaxDims] = {};
  for (int d = 0; d < in.ndim; ++d) flipped[d] = (flip_mask >> d) & 1u;
  remap_copy(out, in, flipped, shift);
}

void roll(const TensorDesc& out, const TensorDesc& in, const int64_t* shifts, const int* dims,
          int n) {
  bool flipped[kMaxDims] = {};
  int64_t shift[kMaxDims] = {};
  for (int k = 0; k < n; ++k) shift[dims[k]] += shifts[k];
  remap_copy(out, in, flipped, shift);
}

void tril_triu(const TensorDesc& out, const TensorDesc& in, int64_t diagonal, bool upper) {
  using namespace detail;
  NPU_KERNEL_ASSERT(in.ndim >= 2, "tril/triu need 2 dims");
  const int rd = in.ndim - 2, cd = in.ndim - 1;
  const int64_t R = in.sizes[rd], C = in.sizes[cd];
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / C;
  const int64_t eo = esize_of(out), ei = esize_of(in);
  ConvertFn conv = convert_fn(in.dtype, out.dtype);
  const double zero_d = 0;
  ConvertFn zero = convert_fn(DType::Float64, out.dtype);
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, C)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t ooff = 0, ioff = 0, rem = r;
      for (int d = rd; d >= 0; --d) {
        int64_t c = rem % in.sizes[d];
        rem /= in.sizes[d];
        ooff += c * out.strides[d];
        ioff += c * in.strides[d];
      }
      const int64_t i = r % R;
      // Kept columns [lo, hi): tril keeps j <= i + diagonal, triu keeps j >= i + diagonal.
      int64_t lo = upper ? std::clamp<int64_t>(i + diagonal, 0, C) : 0;
      int64_t hi = upper ? C : std::clamp<int64_t>(i + diagonal + 1, 0, C);
      if (hi < lo) hi = lo;
      char* o = static_cast<char*>(out.data) + ooff * eo;
      const char* src = static_cast<const char*>(in.data) + ioff * ei;
      const int64_t so = out.strides[cd], si = in.strides[cd];
      zero(&zero_d, 0, o, so, lo);
      conv(src + lo * si * ei, si, o + lo * so * eo, so, hi - lo);
      zero(&zero_d, 0, o + hi * so * eo, so, C - hi);
    }
  });
}

}  // namespace npu::kernels
