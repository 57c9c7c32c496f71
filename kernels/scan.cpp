// Scans along one dimension (cumsum, cumprod, cummax, cummin, logcumsumexp).
//
// The other dimensions go through the elementwise iterator (loops.h), which yields runs of
// line starts. Lines whose elements are contiguous are scanned one at a time in chunks;
// when instead neighbouring lines are contiguous (a scan over dim 0 of [N, C]) 16 lines are
// scanned side by side, so every step reads 16 adjacent elements rather than one per cache
// line.
#include <cmath>
#include <limits>
#include <string>

#include "dtype_traits.h"
#include "loops.h"
#include "npu/kernels/reduce.h"

namespace npu::kernels {
namespace detail {
namespace scan_ops {

template <class T>
using wide_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// Each op: State, init(), step(State&, x, i, &index) -> Out.
template <class T>
struct Cumsum {
  static constexpr unsigned kTypes = kAll;
  using State = wide_t<T>;
  using Out = wide_t<T>;
  State init() const { return 0; }
  Out step(State& s, T x, int64_t, int64_t*) const { return s += static_cast<State>(x); }
};

template <class T>
struct Cumprod {
  static constexpr unsigned kTypes = kAll;
  using State = wide_t<T>;
  using Out = wide_t<T>;
  State init() const { return 1; }
  Out step(State& s, T x, int64_t, int64_t*) const { return s *= static_cast<State>(x); }
};

template <class T>
inline bool isnan_(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
  else return false;
}

// PyTorch's cummax rule: a NaN, or a value >= the running max, takes over (with its index).
template <class T, bool kMax>
struct CumExtremum {
  static constexpr unsigned kTypes = kAll;
  struct State {
    T best{};
    int64_t index = -1;
  };
  using Out = T;
  State init() const { return {}; }
  Out step(State& s, T x, int64_t i, int64_t* index) const {
    bool take = s.index < 0 || isnan_(x) ||
                (!isnan_(s.best) && (kMax ? x >= s.best : x <= s.best));
    if (take) s.best = x, s.index = i;
    *index = s.index;
    return s.best;
  }
};
template <class T>
struct Cummax : CumExtremum<T, true> {};
template <class T>
struct Cummin : CumExtremum<T, false> {};

template <class T>
struct LogCumSumExp {
  static constexpr unsigned kTypes = kFloating;
  using State = double;
  using Out = double;
  State init() const { return -INFINITY; }
  Out step(State& s, T xv, int64_t, int64_t*) const {
    double x = xv;
    double lo = std::min(s, x), hi = std::max(s, x);
    if (std::isnan(x) || std::isnan(s)) s = NAN;
    else if (lo != hi || std::isfinite(lo)) s = hi + std::log1p(std::exp(lo - hi));
    return s;
  }
};

}  // namespace scan_ops

namespace {

template <class T, class Op>
void run_scan(const Op& op, const TensorDesc& out, const TensorDesc* indices, const TensorDesc& in,
              int dim) {
  using Out = typename Op::Out;
  const int64_t L = in.sizes[dim];
  if (L == 0 || in.numel() == 0) return;
  TensorDesc o = out, x = in, ix = indices ? *indices : out;
  o.sizes[dim] = x.sizes[dim] = ix.sizes[dim] = 1;
  const TensorDesc* ops[3] = {&o, &x, &ix};
  auto it = make_iter<3>(ops);
  const int64_t sin = in.strides[dim], sout = out.strides[dim];
  const int64_t sidx = indices ? indices->strides[dim] : 0;
  const int64_t in_size = static_cast<int64_t>(dtype_size(in.dtype));
  const int64_t out_size = static_cast<int64_t>(dtype_size(out.dtype));
  ConvertFn load = convert_fn(in.dtype, dtype_of<T>());
  ConvertFn store = convert_fn(dtype_of<Out>(), out.dtype);
  constexpr int64_t kChunk = 1024, kW = 16;

  for_each_segment(it, std::max<int64_t>(1, 32768 / L), [&](char* const* p, const int64_t* s,
                                                          int64_t n) {
    alignas(64) T xb[kChunk];
    alignas(64) Out yb[kChunk];
    int64_t ib[kChunk];
    const bool side_by_side = s[1] == 1 && s[0] == 1 && (!indices || s[2] == 1) && sin != 1;
    if (side_by_side) {
      for (int64_t j0 = 0; j0 < n; j0 += kW) {
        const int64_t w = std::min(kW, n - j0);
        typename Op::State st[kW];
        for (auto& v : st) v = op.init();
        for (int64_t i = 0; i < L; ++i) {
          load(p[1] + (j0 + i * sin) * in_size, 1, xb, 1, w);
          for (int64_t k = 0; k < w; ++k) yb[k] = op.step(st[k], xb[k], i, &ib[k]);
          store(yb, 1, p[0] + (j0 + i * sout) * out_size, 1, w);
          if (indices) {
            int64_t* dst = reinterpret_cast<int64_t*>(p[2]) + j0 + i * sidx;
            for (int64_t k = 0; k < w; ++k) dst[k] = ib[k];
          }
        }
      }
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      const char* src = p[1] + j * s[1] * in_size;
      char* dst = p[0] + j * s[0] * out_size;
      int64_t* idst = indices ? reinterpret_cast<int64_t*>(p[2]) + j * s[2] : nullptr;
      typename Op::State st = op.init();
      for (int64_t c0 = 0; c0 < L; c0 += kChunk) {
        const int64_t len = std::min(kChunk, L - c0);
        load(src + c0 * sin * in_size, sin, xb, 1, len);
        for (int64_t k = 0; k < len; ++k) yb[k] = op.step(st, xb[k], c0 + k, &ib[k]);
        store(yb, 1, dst + c0 * sout * out_size, sout, len);
        if (idst) {
          for (int64_t k = 0; k < len; ++k) idst[(c0 + k) * sidx] = ib[k];
        }
      }
    }
  });
}

template <template <class> class Op>
bool scan_op_supports_t(DType compute) {
  return dispatch_compute(compute, []<class T>() { return (Op<T>::kTypes & type_bit<T>()) != 0; });
}

template <template <class> class Op>
void scan_op(const char* name, const TensorDesc& out, const TensorDesc* indices,
             const TensorDesc& in, int dim, DType compute) {
  dispatch_compute(compute, [&]<class T>() {
    if constexpr ((Op<T>::kTypes & type_bit<T>()) != 0) {
      run_scan<T>(Op<T>{}, out, indices, in, dim);
    } else {
      NPU_KERNEL_ASSERT(false, std::string(name) + " does not support " + dtype_name(compute));
    }
  });
}

}  // namespace
}  // namespace detail

const char* op_name(ScanOp op) {
#define NPU_NAME(name, str) \
  case ScanOp::name: return str;
  switch (op) { NPU_KERNELS_SCAN_OPS(NPU_NAME) }
#undef NPU_NAME
  return "?";
}

bool scan_supports(ScanOp op, DType compute) {
#define NPU_SUPPORTS(name, str) \
  case ScanOp::name: return detail::scan_op_supports_t<detail::scan_ops::name>(compute);
  switch (op) { NPU_KERNELS_SCAN_OPS(NPU_SUPPORTS) }
#undef NPU_SUPPORTS
  return false;
}

void scan(ScanOp op, const TensorDesc& out, const TensorDesc* indices, const TensorDesc& in,
          int dim, DType compute) {
  NPU_KERNEL_ASSERT(dim >= 0 && dim < in.ndim, "scan dim out of range");
  bool wants_indices = op == ScanOp::Cummax || op == ScanOp::Cummin;
  NPU_KERNEL_ASSERT(wants_indices == (indices != nullptr), "indices only for cummax/cummin");
#define NPU_RUN(name, str) \
  case ScanOp::name:       \
    return detail::scan_op<detail::scan_ops::name>(str, out, indices, in, dim, compute);
  switch (op) { NPU_KERNELS_SCAN_OPS(NPU_RUN) }
#undef NPU_RUN
}

}  // namespace npu::kernels
