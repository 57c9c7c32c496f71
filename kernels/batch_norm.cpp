// Batch norm forward (training / eval) and backward over [N, C, *].
//
// How it works:
//  - dim 1 (channels) is moved first, a stride permutation, so channel c is row c of a
//    [C, N, d1, ...] view. A channel is visited as `segs` segments of `len` elements: one
//    (n, c) plane per segment when the planes are contiguous and not tiny (NCHW planes are
//    then used in place) or the channel is large (the staging buffer stays bounded), else the
//    whole channel as one row, gathered once per channel.
//  - one task per channel: two passes for mean and biased variance (sums in double, 8 lanes
//    for float), then a pass writing y = x * scale + shift. Backward: one pass for sum(dy) and
//    sum(dy * (x - mean)), one writing grad_input.
//  - group norm backward: the (n, c) planes of [N, C, HxW] are rows; one pass for each row's
//    sum(dy) and sum(dy * x), the per-(n, group) coefficients from those, one pass writing
//    grad_input. (Group norm's forward is batch norm's over the [1, N * group, D * HxW] view,
//    in the adapter.)
#include "npu/kernels/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "nn_common.h"
#include "npu/kernels/thread_pool.h"
#include "vec_math.h"

namespace npu::kernels {
namespace detail {
namespace {

// Channels of at most this many elements are gathered whole unless their planes can be used in
// place; larger channels always go by plane.
constexpr int64_t kWholeChannelElems = 1 << 16;
// Contiguous planes shorter than this are still gathered: per-plane calls would cost more than
// the copy.
constexpr int64_t kMinPlaneElems = 32;

// Whether the channels of these same-shaped tensors are visited whole (one gathered segment)
// rather than plane by plane; one answer for all, so that segment k means the same elements in
// each.
bool whole_channels(std::initializer_list<const TensorDesc*> ts) {
  const TensorDesc& t = **ts.begin();
  NPU_KERNEL_ASSERT(t.ndim >= 2, "batch_norm input must be [N, C, *]");
  if (t.ndim == 2) return true;
  int64_t S = 1;
  for (int d = 2; d < t.ndim; ++d) S *= t.sizes[d];
  if (t.sizes[0] * S > kWholeChannelElems) return false;
  if (S < kMinPlaneElems) return true;
  // Planes are used in place only if every tensor's are dense (innermost stride 1).
  for (const TensorDesc* u : ts) {
    int64_t expected = 1;
    for (int d = u->ndim - 1; d >= 2; --d) {
      if (u->sizes[d] == 1) continue;
      if (u->strides[d] != expected) return true;
      expected *= u->sizes[d];
    }
  }
  return false;
}

class ChannelRows {
 public:
  ChannelRows(const TensorDesc& t, bool whole) : rows_(make_rows(t, whole)) {
    int64_t S = 1;
    for (int d = 2; d < t.ndim; ++d) S *= t.sizes[d];
    if (whole) segs_ = 1, len_ = t.sizes[0] * S;
    else segs_ = t.sizes[0], len_ = S;
  }
  int64_t segs() const { return segs_; }
  int64_t len() const { return len_; }
  int64_t count() const { return segs_ * len_; }  // elements per channel

  // Segment k of channel c: in place when possible, else loaded into buf (len elements).
  template <class T>
  const T* get(int64_t c, int64_t k, T* buf) const {
    const int64_t r = c * segs_ + k;
    if (const T* p = rows_.direct<T>(r)) return p;
    rows_.load(r, buf);
    return buf;
  }
  // Where to compute segment k of channel c: in place when possible, else buf (then put()).
  template <class T>
  T* target(int64_t c, int64_t k, T* buf) const {
    T* p = rows_.direct<T>(c * segs_ + k);
    return p ? p : buf;
  }
  template <class T>
  void put(int64_t c, int64_t k, T* computed) const {
    const int64_t r = c * segs_ + k;
    if (rows_.direct<T>(r) != computed) rows_.store(r, computed);
  }

 private:
  static Rows make_rows(const TensorDesc& t, bool whole) {
    int64_t sizes[kMaxDims], strides[kMaxDims];  // [C, N, d1, ...]
    for (int d = 0; d < t.ndim; ++d) {
      const int from = d < 2 ? 1 - d : d;
      sizes[d] = t.sizes[from], strides[d] = t.strides[from];
    }
    return Rows(TensorDesc::make(t.data, t.dtype, sizes, t.ndim, strides),
                whole ? t.ndim - 1 : t.ndim - 2);
  }

  Rows rows_;
  int64_t segs_ = 1, len_ = 1;
};

// ATen's InvStd: 0 rather than inf for a constant channel with eps == 0.
double inv_std(double var, double eps) {
  if (var == 0 && eps == 0) return 0;
  return 1.0 / std::sqrt(var + eps);
}

// Segment sums in double: 8 lanes for float, a plain loop otherwise.
template <class T>
double seg_sum(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return sum_values(x, n);
  } else {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
}

// sum((x - mu)^2)
template <class T>
double seg_sum_sq(const T* x, int64_t n, double mu) {
  if constexpr (std::is_same_v<T, float>) {
    return sum_squares(x, n, mu);
  } else {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (x[i] - mu) * (x[i] - mu);
    return s;
  }
}

// sum(dy * (x - mu))
template <class T>
double seg_sum_prod(const T* dy, const T* x, int64_t n, double mu) {
  if constexpr (std::is_same_v<T, float>) {
    return sum_products(dy, x, n, mu);
  } else {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(dy[i]) * (x[i] - mu);
    return s;
  }
}

int64_t channel_grain(const TensorDesc& t) {
  int64_t per = 1;
  for (int d = 0; d < t.ndim; ++d) per *= d == 1 ? 1 : t.sizes[d];
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(per, 1));
}

template <class T>
void batch_norm_typed(const TensorDesc& out, const TensorDesc* save_mean,
                      const TensorDesc* save_invstd, const TensorDesc& input,
                      const TensorDesc* weight, const TensorDesc* bias,
                      const TensorDesc* running_mean, const TensorDesc* running_var,
                      bool training, double momentum, double eps) {
  const int64_t C = input.sizes[1];
  const bool whole = whole_channels({&input, &out});
  const ChannelRows in(input, whole), o(out, whole);
  const int64_t n = in.count();
  const std::vector<double> w = load_vector<double>(weight, C, 1.0),
                            b = load_vector<double>(bias, C, 0.0);
  std::vector<double> rm = load_vector<double>(running_mean, C, 0.0),
                      rv = load_vector<double>(running_var, C, 1.0);
  std::vector<double> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
  if (!training) {
    NPU_KERNEL_ASSERT(has_data(running_mean) && has_data(running_var),
                      "batch_norm eval needs running stats");
    for (int64_t c = 0; c < C; ++c) mean[c] = rm[c], invstd[c] = inv_std(rv[c], eps);
  }
  parallel_for(0, C, channel_grain(input), [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len())), ybuf(xbuf.size());
    for (int64_t c = c0; c < c1; ++c) {
      // A channel in one segment is gathered once for all passes.
      const T* whole_x = in.segs() == 1 ? in.get(c, 0, xbuf.data()) : nullptr;
      auto seg = [&](int64_t k) { return whole_x ? whole_x : in.get(c, k, xbuf.data()); };
      if (training) {
        double s = 0;
        for (int64_t k = 0; k < in.segs(); ++k) s += seg_sum(seg(k), in.len());
        const double mu = n > 0 ? s / n : 0.0;
        double ss = 0;
        for (int64_t k = 0; k < in.segs(); ++k) ss += seg_sum_sq(seg(k), in.len(), mu);
        const double var = n > 0 ? ss / n : 0.0;
        mean[c] = mu;
        invstd[c] = inv_std(var, eps);
        if (n > 0) {
          rm[c] = (1 - momentum) * rm[c] + momentum * mu;
          rv[c] = (1 - momentum) * rv[c] + momentum * (ss / double(n - 1));
        }
      }
      const T scale = T(invstd[c] * w[c]), shift = T(b[c] - mean[c] * invstd[c] * w[c]);
      for (int64_t k = 0; k < in.segs(); ++k) {
        const T* x = seg(k);
        T* y = o.target(c, k, ybuf.data());
        for (int64_t i = 0; i < in.len(); ++i) y[i] = x[i] * scale + shift;
        o.put(c, k, y);
      }
    }
  });
  if (training) {
    if (has_data(save_mean)) store_vector(*save_mean, mean.data());
    if (has_data(save_invstd)) store_vector(*save_invstd, invstd.data());
    if (has_data(running_mean) && n > 0) store_vector(*running_mean, rm.data());
    if (has_data(running_var) && n > 0) store_vector(*running_var, rv.data());
  }
}

template <class T>
void batch_norm_backward_typed(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                               const TensorDesc* grad_bias, const TensorDesc& grad_output,
                               const TensorDesc& input, const TensorDesc* weight,
                               const TensorDesc* running_mean, const TensorDesc* running_var,
                               const TensorDesc* save_mean, const TensorDesc* save_invstd,
                               bool training, double eps) {
  const int64_t C = input.sizes[1];
  const bool whole = has_data(grad_input)
                         ? whole_channels({&input, &grad_output, grad_input})
                         : whole_channels({&input, &grad_output});
  const ChannelRows in(input, whole), go(grad_output, whole);
  const int64_t n = in.count();
  const std::vector<double> w = load_vector<double>(weight, C, 1.0);
  std::vector<double> mean, invstd;
  if (training) {
    NPU_KERNEL_ASSERT(has_data(save_mean) && has_data(save_invstd),
                      "batch_norm_backward in training needs save_mean / save_invstd");
    mean = load_vector<double>(save_mean, C, 0.0);
    invstd = load_vector<double>(save_invstd, C, 0.0);
  } else {
    NPU_KERNEL_ASSERT(has_data(running_mean) && has_data(running_var),
                      "batch_norm_backward in eval needs running stats");
    mean = load_vector<double>(running_mean, C, 0.0);
    invstd = load_vector<double>(running_var, C, 0.0);
    for (double& v : invstd) v = inv_std(v, eps);
  }
  const bool want_gi = has_data(grad_input), want_gw = has_data(grad_weight),
             want_gb = has_data(grad_bias);
  std::vector<double> sum_dy(static_cast<size_t>(C)), sum_dy_xhat(static_cast<size_t>(C));
  const bool need_sums = want_gw || want_gb || (want_gi && training);
  const ChannelRows* gi = nullptr;
  ChannelRows gi_rows(want_gi ? *grad_input : input, whole);
  if (want_gi) gi = &gi_rows;

  parallel_for(0, C, channel_grain(input), [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len())), gbuf(xbuf.size()), obuf(xbuf.size());
    for (int64_t c = c0; c < c1; ++c) {
      const double mu = mean[c], rs = invstd[c];
      // A channel in one segment is gathered once for both passes (x only where used).
      const bool one = in.segs() == 1, use_x = need_sums || training;
      const T* whole_x = one && use_x ? in.get(c, 0, xbuf.data()) : nullptr;
      const T* whole_dy = one ? go.get(c, 0, gbuf.data()) : nullptr;
      auto x_seg = [&](int64_t k) { return whole_x ? whole_x : in.get(c, k, xbuf.data()); };
      auto dy_seg = [&](int64_t k) { return whole_dy ? whole_dy : go.get(c, k, gbuf.data()); };
      if (need_sums) {
        double sdy = 0, sdyx = 0;
        for (int64_t k = 0; k < in.segs(); ++k) {
          const T* x = x_seg(k);
          const T* dy = dy_seg(k);
          sdy += seg_sum(dy, in.len());
          sdyx += seg_sum_prod(dy, x, in.len(), mu);
        }
        sum_dy[c] = sdy;
        sum_dy_xhat[c] = sdyx * rs;
      }
      if (!gi) continue;
      // dx = a * dy + b * x + d  (training), a * dy (eval).
      const double a = w[c] * rs;
      double bcoef = 0, d = 0;
      if (training && n > 0) {
        bcoef = -a * rs * sum_dy_xhat[c] / n;
        d = -a * sum_dy[c] / n - bcoef * mu;
      }
      const T ta = T(a), tb = T(bcoef), td = T(d);
      for (int64_t k = 0; k < in.segs(); ++k) {
        const T* dy = dy_seg(k);
        T* dx = gi->target(c, k, obuf.data());
        if (training) {
          const T* x = x_seg(k);
          for (int64_t i = 0; i < in.len(); ++i) dx[i] = ta * dy[i] + tb * x[i] + td;
        } else {
          for (int64_t i = 0; i < in.len(); ++i) dx[i] = ta * dy[i];
        }
        gi->put(c, k, dx);
      }
    }
  });
  if (want_gw) store_vector(*grad_weight, sum_dy_xhat.data());
  if (want_gb) store_vector(*grad_bias, sum_dy.data());
}

template <class T>
void group_norm_backward_typed(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                               const TensorDesc* grad_bias, const TensorDesc& grad_output,
                               const TensorDesc& input, const TensorDesc& mean_t,
                               const TensorDesc& rstd_t, const TensorDesc* weight,
                               int64_t group) {
  NPU_KERNEL_ASSERT(input.ndim == 3 && grad_output.ndim == 3,
                    "group_norm_backward takes [N, C, HxW] descriptors");
  const int64_t N = input.sizes[0], C = input.sizes[1], HxW = input.sizes[2];
  NPU_KERNEL_ASSERT(group > 0 && C % group == 0, "group_norm_backward: C % group != 0");
  NPU_KERNEL_ASSERT(mean_t.numel() == N * group && rstd_t.numel() == N * group,
                    "group_norm_backward: mean / rstd must hold N * group values");
  const int64_t D = C / group;
  const Rows x_rows(input, 1), dy_rows(grad_output, 1);
  const std::vector<double> w = load_vector<double>(weight, C, 1.0),
                            mean = load_vector<double>(&mean_t, N * group, 0.0),
                            rstd = load_vector<double>(&rstd_t, N * group, 0.0);
  // Pass 1: per (n, c) row, sum(dy * x) and sum(dy).
  std::vector<double> ds(static_cast<size_t>(N * C)), db(ds.size());
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(HxW, 1));
  parallel_for(0, N * C, grain, [&](int64_t r0, int64_t r1) {
    std::vector<T> xbuf(static_cast<size_t>(HxW)), gbuf(xbuf.size());
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = x_rows.direct<T>(r);
      if (!x) x_rows.load(r, xbuf.data()), x = xbuf.data();
      const T* dy = dy_rows.direct<T>(r);
      if (!dy) dy_rows.load(r, gbuf.data()), dy = gbuf.data();
      double sdyx = 0, sdy = 0;
      for (int64_t i = 0; i < HxW; ++i) {
        sdyx += double(dy[i]) * x[i];
        sdy += dy[i];
      }
      ds[r] = sdyx, db[r] = sdy;
    }
  });
  if (has_data(grad_weight) || has_data(grad_bias)) {
    std::vector<double> gw(static_cast<size_t>(C), 0.0), gb(gw.size(), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t ng = n * group + c / D;
        gw[c] += (ds[n * C + c] - db[n * C + c] * mean[ng]) * rstd[ng];
        gb[c] += db[n * C + c];
      }
    }
    if (has_data(grad_weight)) store_vector(*grad_weight, gw.data());
    if (has_data(grad_bias)) store_vector(*grad_bias, gb.data());
  }
  if (!has_data(grad_input)) return;
  // grad_input = a[c] * dy + b * x + d, b and d per (n, group).
  const double s = 1.0 / static_cast<double>(D * HxW);
  std::vector<double> bcoef(static_cast<size_t>(N * group)), dcoef(bcoef.size());
  for (int64_t ng = 0; ng < N * group; ++ng) {
    const int64_t n = ng / group, c0 = (ng % group) * D;
    double dsg = 0, dbg = 0;
    for (int64_t c = c0; c < c0 + D; ++c) {
      dsg += ds[n * C + c] * w[c];
      dbg += db[n * C + c] * w[c];
    }
    const double rs = rstd[ng], mu = mean[ng];
    bcoef[ng] = (dbg * mu - dsg) * rs * rs * rs * s;
    dcoef[ng] = -bcoef[ng] * mu - dbg * rs * s;
  }
  const Rows gi_rows(*grad_input, 1);
  parallel_for(0, N * C, grain, [&](int64_t r0, int64_t r1) {
    std::vector<T> xbuf(static_cast<size_t>(HxW)), gbuf(xbuf.size()), obuf(xbuf.size());
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / C, c = r % C, ng = n * group + c / D;
      const T* x = x_rows.direct<T>(r);
      if (!x) x_rows.load(r, xbuf.data()), x = xbuf.data();
      const T* dy = dy_rows.direct<T>(r);
      if (!dy) dy_rows.load(r, gbuf.data()), dy = gbuf.data();
      T* dx = gi_rows.direct<T>(r);
      T* out = dx ? dx : obuf.data();
      const T a = T(rstd[ng] * w[c]), b = T(bcoef[ng]), d = T(dcoef[ng]);
      for (int64_t i = 0; i < HxW; ++i) out[i] = a * dy[i] + b * x[i] + d;
      if (!dx) gi_rows.store(r, out);
    }
  });
}

// ---- SyncBatchNorm's pieces -------------------------------------------------------------

// Calls f(c, seg) for each channel, seg(k) giving segment k of the channel of `in` (a channel
// in one segment is gathered once for all of f's passes).
template <class T, class F>
void for_each_channel(const ChannelRows& in, int64_t C, int64_t grain, F&& f) {
  parallel_for(0, C, grain, [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len()));
    for (int64_t c = c0; c < c1; ++c) {
      const T* whole_x = in.segs() == 1 ? in.get(c, 0, xbuf.data()) : nullptr;
      auto seg = [&](int64_t k) { return whole_x ? whole_x : in.get(c, k, xbuf.data()); };
      f(c, seg);
    }
  });
}

template <class T>
void batch_norm_stats_typed(const TensorDesc& mean_t, const TensorDesc& invstd_t,
                            const TensorDesc& input, double eps) {
  const int64_t C = input.sizes[1];
  const ChannelRows in(input, whole_channels({&input}));
  const int64_t n = in.count();
  std::vector<double> mean(static_cast<size_t>(C)), invstd(mean.size());
  for_each_channel<T>(in, C, channel_grain(input), [&](int64_t c, auto&& seg) {
    double s = 0;
    for (int64_t k = 0; k < in.segs(); ++k) s += seg_sum(seg(k), in.len());
    const double mu = n > 0 ? s / n : 0.0;
    double ss = 0;
    for (int64_t k = 0; k < in.segs(); ++k) ss += seg_sum_sq(seg(k), in.len(), mu);
    mean[c] = mu;
    invstd[c] = inv_std(n > 0 ? ss / n : 0.0, eps);
  });
  store_vector(mean_t, mean.data());
  store_vector(invstd_t, invstd.data());
}

template <class T>
void batch_norm_sums_typed(const TensorDesc& sum_t, const TensorDesc& square_sum_t,
                           const TensorDesc& input) {
  const int64_t C = input.sizes[1];
  const ChannelRows in(input, whole_channels({&input}));
  std::vector<double> sum(static_cast<size_t>(C)), sq(sum.size());
  for_each_channel<T>(in, C, channel_grain(input), [&](int64_t c, auto&& seg) {
    double s = 0, ss = 0;
    for (int64_t k = 0; k < in.segs(); ++k) {
      s += seg_sum(seg(k), in.len());
      ss += seg_sum_sq(seg(k), in.len(), 0.0);
    }
    sum[c] = s, sq[c] = ss;
  });
  store_vector(sum_t, sum.data());
  store_vector(square_sum_t, sq.data());
}

template <class T>
void batch_norm_elemt_typed(const TensorDesc& out, const TensorDesc& input,
                            const TensorDesc* weight, const TensorDesc* bias,
                            const TensorDesc& mean_t, const TensorDesc& invstd_t) {
  const int64_t C = input.sizes[1];
  const bool whole = whole_channels({&input, &out});
  const ChannelRows in(input, whole), o(out, whole);
  const std::vector<double> w = load_vector<double>(weight, C, 1.0),
                            b = load_vector<double>(bias, C, 0.0),
                            mean = load_vector<double>(&mean_t, C, 0.0),
                            invstd = load_vector<double>(&invstd_t, C, 0.0);
  parallel_for(0, C, channel_grain(input), [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len())), ybuf(xbuf.size());
    for (int64_t c = c0; c < c1; ++c) {
      const T scale = T(invstd[c] * w[c]), shift = T(b[c] - mean[c] * invstd[c] * w[c]);
      for (int64_t k = 0; k < in.segs(); ++k) {
        const T* x = in.get(c, k, xbuf.data());
        T* y = o.target(c, k, ybuf.data());
        for (int64_t i = 0; i < in.len(); ++i) y[i] = x[i] * scale + shift;
        o.put(c, k, y);
      }
    }
  });
}

template <class T>
void batch_norm_backward_reduce_typed(const TensorDesc* sum_dy_t, const TensorDesc* sum_dy_xmu_t,
                                      const TensorDesc* grad_weight, const TensorDesc* grad_bias,
                                      const TensorDesc& grad_output, const TensorDesc& input,
                                      const TensorDesc& mean_t, const TensorDesc& invstd_t) {
  const int64_t C = input.sizes[1];
  const bool whole = whole_channels({&input, &grad_output});
  const ChannelRows in(input, whole), go(grad_output, whole);
  const std::vector<double> mean = load_vector<double>(&mean_t, C, 0.0),
                            invstd = load_vector<double>(&invstd_t, C, 0.0);
  std::vector<double> sdy(static_cast<size_t>(C)), sdyx(sdy.size());
  parallel_for(0, C, channel_grain(input), [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len())), gbuf(xbuf.size());
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0, sx = 0;
      for (int64_t k = 0; k < in.segs(); ++k) {
        const T* x = in.get(c, k, xbuf.data());
        const T* dy = go.get(c, k, gbuf.data());
        s += seg_sum(dy, in.len());
        sx += seg_sum_prod(dy, x, in.len(), mean[c]);
      }
      sdy[c] = s, sdyx[c] = sx;
    }
  });
  if (has_data(sum_dy_t)) store_vector(*sum_dy_t, sdy.data());
  if (has_data(sum_dy_xmu_t)) store_vector(*sum_dy_xmu_t, sdyx.data());
  if (has_data(grad_bias)) store_vector(*grad_bias, sdy.data());
  if (has_data(grad_weight)) {
    for (int64_t c = 0; c < C; ++c) sdyx[c] *= invstd[c];
    store_vector(*grad_weight, sdyx.data());
  }
}

template <class T>
void batch_norm_backward_elemt_typed(const TensorDesc& grad_input, const TensorDesc& grad_output,
                                     const TensorDesc& input, const TensorDesc& mean_t,
                                     const TensorDesc& invstd_t, const TensorDesc* weight,
                                     const TensorDesc& sum_dy_t, const TensorDesc& sum_dy_xmu_t,
                                     const TensorDesc& count_t) {
  const int64_t C = input.sizes[1];
  const bool whole = whole_channels({&input, &grad_output, &grad_input});
  const ChannelRows in(input, whole), go(grad_output, whole), gi(grad_input, whole);
  const std::vector<double> w = load_vector<double>(weight, C, 1.0),
                            mean = load_vector<double>(&mean_t, C, 0.0),
                            invstd = load_vector<double>(&invstd_t, C, 0.0),
                            sum_dy = load_vector<double>(&sum_dy_t, C, 0.0),
                            sum_dy_xmu = load_vector<double>(&sum_dy_xmu_t, C, 0.0),
                            counts = load_vector<double>(&count_t, count_t.numel(), 0.0);
  double n = 0;
  for (double k : counts) n += k;
  const double inv_n = 1.0 / n;  // n == 0: inf, NaN gradients, as CUDA's kernel
  parallel_for(0, C, channel_grain(input), [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf(static_cast<size_t>(in.len())), gbuf(xbuf.size()), obuf(xbuf.size());
    for (int64_t c = c0; c < c1; ++c) {
      // dx = a * dy + b * x + d
      const double a = w[c] * invstd[c], bcoef = -a * invstd[c] * invstd[c] * sum_dy_xmu[c] * inv_n;
      const double d = -a * sum_dy[c] * inv_n - bcoef * mean[c];
      const T ta = T(a), tb = T(bcoef), td = T(d);
      for (int64_t k = 0; k < in.segs(); ++k) {
        const T* x = in.get(c, k, xbuf.data());
        const T* dy = go.get(c, k, gbuf.data());
        T* dx = gi.target(c, k, obuf.data());
        for (int64_t i = 0; i < in.len(); ++i) dx[i] = ta * dy[i] + tb * x[i] + td;
        gi.put(c, k, dx);
      }
    }
  });
}

// The running statistics' update shared by both gathers.
void update_running(const TensorDesc* running_mean, const TensorDesc* running_var,
                    const std::vector<double>& mean, const std::vector<double>& var,
                    double momentum) {
  const int64_t C = static_cast<int64_t>(mean.size());
  if (has_data(running_mean)) {
    std::vector<double> rm = load_vector<double>(running_mean, C, 0.0);
    for (int64_t c = 0; c < C; ++c) rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
    store_vector(*running_mean, rm.data());
  }
  if (has_data(running_var)) {
    std::vector<double> rv = load_vector<double>(running_var, C, 0.0);
    for (int64_t c = 0; c < C; ++c) rv[c] = (1 - momentum) * rv[c] + momentum * var[c];
    store_vector(*running_var, rv.data());
  }
}

}  // namespace
}  // namespace detail

bool batch_norm_supports(DType input) { return detail::is_nn_float(input); }

void batch_norm(const TensorDesc& out, const TensorDesc* save_mean,
                const TensorDesc* save_invstd, const TensorDesc& input, const TensorDesc* weight,
                const TensorDesc* bias, const TensorDesc* running_mean,
                const TensorDesc* running_var, bool training, double momentum, double eps) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_typed<T>(out, save_mean, save_invstd, input, weight, bias, running_mean,
                                running_var, training, momentum, eps);
  });
}

void batch_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& input, const TensorDesc* weight,
                         const TensorDesc* running_mean, const TensorDesc* running_var,
                         const TensorDesc* save_mean, const TensorDesc* save_invstd,
                         bool training, double eps) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_backward_typed<T>(grad_input, grad_weight, grad_bias, grad_output, input,
                                         weight, running_mean, running_var, save_mean,
                                         save_invstd, training, eps);
  });
}

void group_norm_backward(const TensorDesc* grad_input, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_output,
                         const TensorDesc& input, const TensorDesc& mean, const TensorDesc& rstd,
                         const TensorDesc* weight, int64_t group) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::group_norm_backward_typed<T>(grad_input, grad_weight, grad_bias, grad_output, input,
                                         mean, rstd, weight, group);
  });
}

void batch_norm_stats(const TensorDesc& mean, const TensorDesc& invstd, const TensorDesc& input,
                      double eps) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_stats_typed<T>(mean, invstd, input, eps);
  });
}

void batch_norm_sums(const TensorDesc& sum, const TensorDesc& square_sum,
                     const TensorDesc& input) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_sums_typed<T>(sum, square_sum, input);
  });
}

void batch_norm_elemt(const TensorDesc& out, const TensorDesc& input, const TensorDesc* weight,
                      const TensorDesc* bias, const TensorDesc& mean, const TensorDesc& invstd) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_elemt_typed<T>(out, input, weight, bias, mean, invstd);
  });
}

void batch_norm_backward_reduce(const TensorDesc* sum_dy, const TensorDesc* sum_dy_xmu,
                                const TensorDesc* grad_weight, const TensorDesc* grad_bias,
                                const TensorDesc& grad_output, const TensorDesc& input,
                                const TensorDesc& mean, const TensorDesc& invstd) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_backward_reduce_typed<T>(sum_dy, sum_dy_xmu, grad_weight, grad_bias,
                                                grad_output, input, mean, invstd);
  });
}

void batch_norm_backward_elemt(const TensorDesc& grad_input, const TensorDesc& grad_output,
                               const TensorDesc& input, const TensorDesc& mean,
                               const TensorDesc& invstd, const TensorDesc* weight,
                               const TensorDesc& sum_dy, const TensorDesc& sum_dy_xmu,
                               const TensorDesc& count) {
  detail::dispatch_compute_float(input.dtype, [&]<class T>() {
    detail::batch_norm_backward_elemt_typed<T>(grad_input, grad_output, input, mean, invstd,
                                               weight, sum_dy, sum_dy_xmu, count);
  });
}

void batch_norm_gather_stats(const TensorDesc& mean_out, const TensorDesc& invstd_out,
                             const TensorDesc& mean, const TensorDesc& invstd,
                             const TensorDesc* running_mean, const TensorDesc* running_var,
                             double momentum, double eps, const TensorDesc& counts) {
  NPU_KERNEL_ASSERT(mean.ndim == 2 && invstd.ndim == 2, "gather_stats takes [W, C] statistics");
  const int64_t W = mean.sizes[0], C = mean.sizes[1];
  const std::vector<double> m = detail::load_vector<double>(&mean, W * C, 0.0),
                            is = detail::load_vector<double>(&invstd, W * C, 0.0),
                            cnt = detail::load_vector<double>(&counts, W, 0.0);
  std::vector<double> mu(static_cast<size_t>(C)), out_is(mu.size()), unbiased(mu.size());
  for (int64_t c = 0; c < C; ++c) {
    double n = 0, s = 0;
    for (int64_t j = 0; j < W; ++j) {
      if (cnt[j] == 0) continue;
      n += cnt[j];
      s += cnt[j] * m[j * C + c];
    }
    const double avg = s / n;
    double var_n = 0;
    for (int64_t j = 0; j < W; ++j) {
      if (cnt[j] == 0) continue;
      const double v = 1.0 / is[j * C + c], dm = m[j * C + c] - avg;
      var_n += cnt[j] * (v * v - eps + dm * dm);
    }
    mu[c] = avg;
    out_is[c] = detail::inv_std(var_n / n, eps);
    unbiased[c] = var_n / (n - 1);
  }
  detail::store_vector(mean_out, mu.data());
  detail::store_vector(invstd_out, out_is.data());
  detail::update_running(running_mean, running_var, mu, unbiased, momentum);
}

void batch_norm_gather_stats_update(const TensorDesc& mean_out, const TensorDesc& invstd_out,
                                    const TensorDesc& sum, const TensorDesc& square_sum,
                                    const TensorDesc* running_mean,
                                    const TensorDesc* running_var, double momentum, double eps,
                                    const TensorDesc& counts) {
  NPU_KERNEL_ASSERT(sum.ndim == 2 && square_sum.ndim == 2,
                    "gather_stats_update takes [W, C] sums");
  const int64_t W = sum.sizes[0], C = sum.sizes[1];
  const std::vector<double> s = detail::load_vector<double>(&sum, W * C, 0.0),
                            sq = detail::load_vector<double>(&square_sum, W * C, 0.0),
                            cnt = detail::load_vector<double>(&counts, W, 0.0);
  double n = 0;
  for (double k : cnt) n += k;
  std::vector<double> mu(static_cast<size_t>(C)), var(mu.size()), out_is(mu.size());
  for (int64_t c = 0; c < C; ++c) {
    double t = 0, tq = 0;
    for (int64_t j = 0; j < W; ++j) t += s[j * C + c], tq += sq[j * C + c];
    mu[c] = t / n;
    var[c] = tq / n - mu[c] * mu[c];
    out_is[c] = detail::inv_std(var[c], eps);
  }
  detail::store_vector(mean_out, mu.data());
  detail::store_vector(invstd_out, out_is.data());
  detail::update_running(running_mean, running_var, mu, var, momentum);
}

}  // namespace npu::kernels
