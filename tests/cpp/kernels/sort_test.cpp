// sort / topk against an insertion sort written here (stable by construction): every dim,
// both directions, ties (small integer values), NaN and -0.0, float / int / 16-bit / bool
// dtypes, transposed inputs and outputs, argsort (no values), k = 0 / k = n, 0-dim input.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "npu/kernels/sort.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

// "a before b" with NaN largest; equal values keep input order (stable).
bool ref_before(double a, double b, bool descending) {
  if (std::isnan(a) || std::isnan(b)) return descending ? !std::isnan(b) : !std::isnan(a);
  return descending ? a > b : a < b;
}

// Flat indices of line j along dim (row-major).
std::vector<std::vector<int64_t>> lines_of(const std::vector<int64_t>& sizes, int dim) {
  int64_t inner = 1, total = 1;
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  for (int64_t s : sizes) total *= s;
  const int64_t L = sizes[dim];
  std::vector<std::vector<int64_t>> out;
  if (total == 0) return out;
  for (int64_t o = 0; o < total / (L * inner); ++o)
    for (int64_t j = 0; j < inner; ++j) {
      std::vector<int64_t> l;
      for (int64_t i = 0; i < L; ++i) l.push_back((o * L + i) * inner + j);
      out.push_back(l);
    }
  return out;
}

// Positions within the line, in stable sorted order.
std::vector<int64_t> ref_order(const HostTensor& x, const std::vector<int64_t>& line, bool desc) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < int64_t(line.size()); ++i) {
    auto pos = order.end();
    while (pos != order.begin() && ref_before(x.get(line[i]), x.get(line[*(pos - 1)]), desc)) --pos;
    order.insert(pos, i);
  }
  return order;
}

void fill_with_ties(HostTensor& x) {
  fill_uniform(x, -3, 3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = std::round(x.get(i));  // many equal values
    if (npu::kernels::is_floating(x.dtype)) {
      if (i % 11 == 3) v = NAN;
      if (i % 13 == 5) v = -0.0;
    }
    x.set(i, x.dtype == DType::Bool ? double(int64_t(v) & 1) : v);
  }
}

void check_sort(DType dt, std::vector<int64_t> sizes, int dim, bool desc, Layout layout,
                bool with_values) {
  SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " dim " << dim << " desc " << desc
                                    << " layout " << int(layout) << " values " << with_values);
  HostTensor x(dt, sizes, layout), v(dt, sizes, layout), idx(DType::Int64, sizes);
  fill_with_ties(x);
  nk::sort(with_values ? v.desc() : TensorDesc::make(nullptr, dt, {}), idx.desc(), x.desc(), dim,
           desc);
  HostTensor ev(dt, sizes), eidx(DType::Int64, sizes);
  for (const auto& l : lines_of(sizes, dim)) {
    auto order = ref_order(x, l, desc);
    for (size_t j = 0; j < l.size(); ++j) {
      eidx.set_int(l[j], order[j]);
      ev.set(l[j], x.get(l[order[j]]));
    }
  }
  EXPECT_TRUE(all_close(idx, eidx, 0, 0));
  if (with_values) {
    EXPECT_TRUE(all_close(v, ev, 0, 0));
  }
}

TEST(Sort, StableEveryDimDirectionAndDtype) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Float16,
                   DType::BFloat16, DType::UInt8, DType::Int8, DType::Bool}) {
    for (int dim = 0; dim < 3; ++dim) {
      for (bool desc : {false, true}) {
        check_sort(dt, {4, 9, 6}, dim, desc, Layout::Contiguous, true);
      }
    }
    check_sort(dt, {5, 7}, 0, true, Layout::Transposed, true);
    check_sort(dt, {5, 7}, 1, false, Layout::Transposed, false);  // argsort
  }
}

TEST(Sort, LongLineZeroDimAndEmpty) {
  check_sort(DType::Float32, {3, 3000}, 1, true, Layout::Contiguous, true);
  HostTensor x(DType::Float32, {}), v(DType::Float32, {}), idx(DType::Int64, {});
  x.set(0, 2.5);
  idx.set_int(0, 9);
  nk::sort(v.desc(), idx.desc(), x.desc(), 0, false);
  EXPECT_EQ(v.get(0), 2.5);
  EXPECT_EQ(idx.get_int(0), 0);
  HostTensor e(DType::Float32, {0, 4}), ei(DType::Int64, {0, 4});
  nk::sort(e.desc(), ei.desc(), e.desc(), 1, false);  // nothing to do, must not crash
  EXPECT_TRUE(nk::sort_supports(DType::Bool));
}

void check_topk(DType dt, std::vector<int64_t> sizes, int dim, int64_t k, bool largest,
                Layout layout) {
  SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " dim " << dim << " k " << k
                                    << " largest " << largest << " layout " << int(layout));
  std::vector<int64_t> os = sizes;
  os[dim] = k;
  HostTensor x(dt, sizes, layout), v(dt, os, layout), idx(DType::Int64, os, layout),
      ev(dt, os), eidx(DType::Int64, os);
  fill_with_ties(x);
  nk::topk(v.desc(), idx.desc(), x.desc(), k, dim, largest);
  auto in_lines = lines_of(sizes, dim), out_lines = lines_of(os, dim);
  for (size_t j = 0; j < out_lines.size(); ++j) {
    auto order = ref_order(x, in_lines[j], largest);
    for (int64_t i = 0; i < k; ++i) {
      eidx.set_int(out_lines[j][i], order[i]);
      ev.set(out_lines[j][i], x.get(in_lines[j][order[i]]));
    }
  }
  EXPECT_TRUE(all_close(idx, eidx, 0, 0));
  EXPECT_TRUE(all_close(v, ev, 0, 0));
}

TEST(Topk, LargestSmallestTiesAndK) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Float16}) {
    for (int dim = 0; dim < 3; ++dim) {
      for (bool largest : {true, false}) {
        check_topk(dt, {5, 8, 7}, dim, 3, largest, Layout::Contiguous);
      }
    }
    check_topk(dt, {6, 9}, 1, 9, true, Layout::Transposed);  // k == n
    check_topk(dt, {6, 9}, 0, 1, false, Layout::Transposed);
  }
  check_topk(DType::Float32, {2, 5000}, 1, 17, true, Layout::Contiguous);
  // k == 0 writes nothing.
  HostTensor x(DType::Float32, {3, 4}), v(DType::Float32, {3, 0}), idx(DType::Int64, {3, 0});
  nk::topk(v.desc(), idx.desc(), x.desc(), 0, 1, true);
  EXPECT_EQ(v.numel(), 0);
}

}  // namespace
}  // namespace ktest
