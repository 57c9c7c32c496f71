// The generic reduction loop shared by reduce() and arg_reduce().
//
// How it works:
//  - ReduceGeometry splits the input's dimensions into kept ones (one output each) and reduced
//    ones (a "row" of R elements per output, in row-major order), each list coalesced.
//  - A reducer functor sees rows as contiguous chunks of the compute type T: reduce(x, n,
//    first_index) -> Acc, combine(Acc, Acc) -> Acc (earlier part first), finish(Acc) -> value.
//  - Rows that are contiguous in memory and already of type T are used in place; otherwise a
//    chunk is gathered (and converted) into a buffer.
//  - When the input is contiguous along a kept dimension instead (sum over dim 0 of [N, C]),
//    16 neighbouring outputs are gathered together ("tile" mode): each step reads 16
//    adjacent elements instead of striding through memory once per output.
//  - Work is split over outputs (or tiles); when there are too few of those for the pool
//    (a full reduction), rows are also split into segments whose partial results are
//    combined in order, so the result does not depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "convert.h"
#include "dtype_traits.h"
#include "npu/kernels/tensor_desc.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels::detail {

struct ReduceGeometry {
  int n_kept = 0, n_red = 0;
  int64_t kept_sizes[kMaxDims] = {}, kept_in[kMaxDims] = {}, kept_out[2][kMaxDims] = {};
  int64_t red_sizes[kMaxDims] = {}, red_in[kMaxDims] = {};
  int64_t n_out = 1, R = 1;

  int64_t in_offset(int64_t o) const {
    int64_t off = 0;
    for (int d = n_kept - 1; d >= 0; --d) {
      off += (o % kept_sizes[d]) * kept_in[d];
      o /= kept_sizes[d];
    }
    return off;
  }
  int64_t out_offset(int k, int64_t o) const {
    int64_t off = 0;
    for (int d = n_kept - 1; d >= 0; --d) {
      off += (o % kept_sizes[d]) * kept_out[k][d];
      o /= kept_sizes[d];
    }
    return off;
  }
};

// outs: 1 or 2 outputs (values, indices) with the keepdim convention.
ReduceGeometry make_reduce_geometry(const TensorDesc& in, const TensorDesc* const* outs, int n_outs);

// Walks reduced positions [r, ...) in row-major order as runs along the innermost reduced dim.
struct RedCursor {
  const ReduceGeometry& g;
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  RedCursor(const ReduceGeometry& geo, int64_t r) : g(geo) {
    for (int d = g.n_red - 1; d >= 0; --d) {
      idx[d] = r % g.red_sizes[d];
      r /= g.red_sizes[d];
      off += idx[d] * g.red_in[d];
    }
  }
  int64_t run_left() const { return g.red_sizes[g.n_red - 1] - idx[g.n_red - 1]; }
  int64_t inner_stride() const { return g.red_in[g.n_red - 1]; }
  void advance(int64_t n) {  // n <= run_left()
    int last = g.n_red - 1;
    idx[last] += n;
    off += n * g.red_in[last];
    for (int d = last; d > 0 && idx[d] == g.red_sizes[d]; --d) {
      off -= idx[d] * g.red_in[d];
      idx[d] = 0;
      ++idx[d - 1];
      off += g.red_in[d - 1];
    }
  }
};

// Runs reducer `red` (compute type T) over `in`; store(o, acc) receives each output's result.
template <class T, class Red, class Store>
void run_reduce(const Red& red, const ReduceGeometry& g, const TensorDesc& in, Store&& store) {
  using Acc = typename Red::Acc;
  if (g.n_out == 0) return;
  const char* base = static_cast<const char*>(in.data);
  const int64_t esize = static_cast<int64_t>(dtype_size(in.dtype));
  const ConvertFn load = convert_fn(in.dtype, dtype_of<T>());
  const bool same_type = in.dtype == dtype_of<T>();
  const int last_kept = g.n_kept - 1;
  const bool tile = g.n_kept > 0 && g.kept_in[last_kept] == 1 && g.R > 1 &&
                    g.red_in[g.n_red - 1] != 1;
  const int64_t W = tile ? std::min<int64_t>(16, g.kept_sizes[last_kept]) : 1;
  const int64_t line = tile ? g.kept_sizes[last_kept] : 1;
  const int64_t blocks_per_line = (line + W - 1) / W;
  const int64_t units = tile ? (g.n_out / line) * blocks_per_line : g.n_out;
  const int64_t kChunk = tile ? 256 : 4096;

  auto unit_outputs = [&](int64_t u, int64_t& first, int64_t& count) {
    if (!tile) {
      first = u, count = 1;
      return;
    }
    int64_t l = u / blocks_per_line, b = u % blocks_per_line;
    first = l * line + b * W;
    count = std::min(W, line - b * W);
  };

  // Reduces positions [r0, r1) of the rows of unit u into acc[0..count).
  auto process = [&](int64_t u, int64_t r0, int64_t r1, Acc* acc) {
    if (r0 >= r1) return;  // empty rows (R == 0): the accumulators stay at init()
    int64_t first, count;
    unit_outputs(u, first, count);
    const char* row = base + g.in_offset(first) * esize;
    alignas(64) T buf[16 * 256 > 4096 ? 16 * 256 : 4096];
    alignas(64) T tmp[16 * 256];
    RedCursor cur(g, r0);
    for (int64_t r = r0; r < r1;) {
      int64_t len = std::min(kChunk, r1 - r);
      if (!tile) {
        const T* x;
        if (same_type && cur.inner_stride() == 1 && cur.run_left() >= len) {
          x = reinterpret_cast<const T*>(row + cur.off * esize);
          cur.advance(len);
        } else {
          for (int64_t done = 0; done < len;) {
            int64_t run = std::min(cur.run_left(), len - done);
            load(row + cur.off * esize, cur.inner_stride(), buf + done, 1, run);
            cur.advance(run);
            done += run;
          }
          x = buf;
        }
        acc[0] = red.combine(acc[0], red.reduce(x, len, r));
      } else {
        // tmp[k][w] = element k of the chunk for output w, then transpose to buf[w][k].
        for (int64_t k = 0; k < len;) {
          int64_t run = std::min(cur.run_left(), len - k);
          for (int64_t t = 0; t < run; ++t) {
            load(row + (cur.off + t * cur.inner_stride()) * esize, 1, tmp + (k + t) * W, 1, count);
          }
          cur.advance(run);
          k += run;
        }
        for (int64_t w = 0; w < count; ++w) {
          for (int64_t k = 0; k < len; ++k) buf[w * len + k] = tmp[k * W + w];
          acc[w] = red.combine(acc[w], red.reduce(buf + w * len, len, r));
        }
      }
      r += len;
    }
  };

  const int threads = num_threads();
  constexpr int64_t kSegMin = 16384;
  int64_t segs = 1;
  if (units < 4 * threads && g.R >= 2 * kSegMin) {
    segs = std::min<int64_t>((4 * threads + units - 1) / units, g.R / kSegMin);
  }
  if (segs == 1) {
    int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.R * W));
    parallel_for(0, units, grain, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        Acc acc[16];
        for (auto& a : acc) a = red.init();
        process(u, 0, g.R, acc);
        int64_t first, count;
        unit_outputs(u, first, count);
        for (int64_t w = 0; w < count; ++w) store(first + w, acc[w]);
      }
    });
    return;
  }
  // (not std::vector: Acc may be bool)
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(units * segs * W)]);
  for (int64_t i = 0; i < units * segs * W; ++i) partial[i] = red.init();
  parallel_for(0, units * segs, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t u = t / segs, s = t % segs;
      int64_t r0 = g.R * s / segs, r1 = g.R * (s + 1) / segs;
      process(u, r0, r1, partial.get() + t * W);
    }
  });
  for (int64_t u = 0; u < units; ++u) {
    int64_t first, count;
    unit_outputs(u, first, count);
    for (int64_t w = 0; w < count; ++w) {
      Acc acc = red.init();
      for (int64_t s = 0; s < segs; ++s) acc = red.combine(acc, partial[(u * segs + s) * W + w]);
      store(first + w, acc);
    }
  }
}

}  // namespace npu::kernels::detail
