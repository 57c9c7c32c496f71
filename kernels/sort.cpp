// sort / topk along a dim: each line (the dim moved last, rows.h) is loaded as (value, index)
// pairs of the compute type, ordered with std::stable_sort (sort) or nth_element + sort on a
// total order that breaks ties by index (topk), and stored back. Lines are pool tasks.
#include "npu/kernels/sort.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn_common.h"
#include "npu/kernels/thread_pool.h"

namespace npu::kernels {
namespace detail {
namespace {

template <class T>
bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Strict "a comes before b" by value only, NaN as the largest value.
template <class T>
bool before(T a, T b, bool descending) {
  if (descending) return (a > b) || (is_nan_value(a) && !is_nan_value(b));
  return (a < b) || (is_nan_value(b) && !is_nan_value(a));
}

// Runs fn(line, pairs) over every line of `in` along dim, then stores the first
// `keep` pairs of each line into values (if it has data) and indices.
template <class T, class F>
void for_each_line(const TensorDesc& values, const TensorDesc& indices, const TensorDesc& in,
                   int dim, int64_t keep, F&& fn) {
  // A 0-dim tensor is one line of one element.
  auto lines = [&](const TensorDesc& t) {
    if (t.ndim == 0) return Rows(t, 0);
    return Rows(move_dim_last(t, dim), 1);
  };
  const Rows ri = lines(in), ri_idx = lines(indices);
  const bool want_values = values.data != nullptr;
  const Rows rv = want_values ? lines(values) : ri;
  const int64_t M = ri.M(), n = ri.N();
  if (M == 0 || keep == 0) return;
  parallel_for(0, M, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0,
                                                                              int64_t r1) {
    std::unique_ptr<T[]> v(new T[static_cast<size_t>(n)]);  // not vector<T>: T may be bool
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::vector<std::pair<T, int64_t>> pairs(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      ri.load(r, v.get());
      for (int64_t i = 0; i < n; ++i) pairs[i] = {v[i], i};
      fn(pairs);
      for (int64_t i = 0; i < keep; ++i) v[i] = pairs[i].first, idx[i] = pairs[i].second;
      if (want_values) rv.store(r, v.get());
      ri_idx.store(r, idx.data());
    }
  });
}

}  // namespace
}  // namespace detail

bool sort_supports(DType) { return true; }

void sort(const TensorDesc& values, const TensorDesc& indices, const TensorDesc& in, int dim,
          bool descending) {
  using namespace detail;
  const int64_t n = in.ndim == 0 ? 1 : in.sizes[dim];
  dispatch_compute(in.dtype, [&]<class T>() {
    for_each_line<T>(values, indices, in, dim, n, [&](std::vector<std::pair<T, int64_t>>& p) {
      std::stable_sort(p.begin(), p.end(), [&](const auto& a, const auto& b) {
        return before(a.first, b.first, descending);
      });
    });
  });
}

void topk(const TensorDesc& values, const TensorDesc& indices, const TensorDesc& in, int64_t k,
          int dim, bool largest) {
  using namespace detail;
  dispatch_compute(in.dtype, [&]<class T>() {
    // A total order (ties by index), so nth_element + sort give the stable answer.
    auto cmp = [&](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
      if (before(a.first, b.first, largest)) return true;
      if (before(b.first, a.first, largest)) return false;
      return a.second < b.second;
    };
    for_each_line<T>(values, indices, in, dim, k, [&](std::vector<std::pair<T, int64_t>>& p) {
      const auto mid = p.begin() + k;
      if (mid != p.end()) std::nth_element(p.begin(), mid, p.end(), cmp);
      std::sort(p.begin(), mid, cmp);
    });
  });
}

}  // namespace npu::kernels
