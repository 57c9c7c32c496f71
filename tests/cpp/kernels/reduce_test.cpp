// reduce(), arg_reduce() and scan() against naive references: every op of the tables, each
// supported dtype, several reduced-dim sets and layouts (contiguous, transposed, broadcast,
// 0-dim, empty), and sizes that take the segmented (full reduction) and tiled (outer
// reduction) paths of the driver.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;
using nk::ReduceOp;

const DType kTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                        DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};

struct RCase {
  ReduceOp op;
  DType compute;
};

DType out_dtype(ReduceOp op, DType compute) {
  switch (op) {
    case ReduceOp::Any: case ReduceOp::All: return DType::Bool;
    case ReduceOp::CountNonzero: return DType::Int64;
    case ReduceOp::Sum: case ReduceOp::Prod:
      return nk::is_floating(compute) ? compute : DType::Int64;
    default: return compute;
  }
}

nk::Scalar param(ReduceOp op) {
  if (op == ReduceOp::Norm) return 2.0;
  if (op == ReduceOp::Var || op == ReduceOp::Std) return 1.0;
  return {};
}

// The reference: row holds the reduced elements in row-major order.
double ref_reduce(ReduceOp op, const std::vector<double>& row, nk::Scalar p, bool integral) {
  double n = static_cast<double>(row.size());
  switch (op) {
    case ReduceOp::Sum: { double s = 0; for (double v : row) s += v; return s; }
    case ReduceOp::Mean: { double s = 0; for (double v : row) s += v; return s / n; }
    case ReduceOp::Prod: { double s = 1; for (double v : row) s *= v; return s; }
    case ReduceOp::Amax: case ReduceOp::Amin: {
      double m = op == ReduceOp::Amax ? -INFINITY : INFINITY;
      if (integral && row.empty()) return m;
      for (double v : row) {
        if (std::isnan(v)) return NAN;
        m = op == ReduceOp::Amax ? std::max(m, v) : std::min(m, v);
      }
      return m;
    }
    case ReduceOp::Any: { for (double v : row) if (v != 0) return 1; return 0; }
    case ReduceOp::All: { for (double v : row) if (v == 0) return 0; return 1; }
    case ReduceOp::CountNonzero: { double c = 0; for (double v : row) c += v != 0; return c; }
    case ReduceOp::Norm: {
      double q = p.f, s = 0;
      if (std::isinf(q)) {
        s = q > 0 ? 0 : INFINITY;
        for (double v : row) s = q > 0 ? std::max(s, std::fabs(v)) : std::min(s, std::fabs(v));
        return s;
      }
      if (q == 0) { for (double v : row) s += v != 0; return s; }
      for (double v : row) s += std::pow(std::fabs(v), q);
      return std::pow(s, 1 / q);
    }
    case ReduceOp::Var: case ReduceOp::Std: {
      double mean = 0, m2 = 0;
      for (double v : row) mean += v;
      mean /= n;
      for (double v : row) m2 += (v - mean) * (v - mean);
      double var = m2 / std::max(0.0, n - p.f);
      return op == ReduceOp::Std ? std::sqrt(var) : var;
    }
    case ReduceOp::LogSumExp: {
      double m = -INFINITY, s = 0;
      for (double v : row) m = std::max(m, v);
      if (std::isinf(m)) m = 0;
      for (double v : row) s += std::exp(v - m);
      return std::log(s) + m;
    }
  }
  return NAN;
}

// Reduces `in` over `dims` with the kernel and the reference, and compares.
void check_reduce(ReduceOp op, DType compute, const HostTensor& in, const std::set<int>& dims,
                  nk::Scalar p) {
  std::vector<int64_t> osizes = in.sizes;
  for (int d : dims) osizes[d] = 1;
  HostTensor out(out_dtype(op, compute), osizes);
  nk::reduce(op, out.desc(), in.desc(), compute, p);

  HostTensor expected(out.dtype, osizes);
  std::vector<std::vector<double>> rows(static_cast<size_t>(expected.numel()));
  std::vector<double> mags(rows.size());
  for (int64_t i = 0; i < in.numel(); ++i) {  // row-major order: reduced positions in order
    int64_t rem = i, o = 0, mul = 1;
    for (int d = in.ndim() - 1; d >= 0; --d) {
      int64_t idx = rem % in.sizes[d];
      rem /= in.sizes[d];
      if (!dims.count(d)) o += idx * mul;
      mul *= osizes[d];
    }
    rows[o].push_back(in.get(i));
    mags[o] += std::fabs(in.get(i));
  }
  bool integral = !nk::is_floating(compute);
  for (int64_t o = 0; o < expected.numel(); ++o) {
    double r = ref_reduce(op, rows[o], p, integral);
    if (integral && op == ReduceOp::Sum) expected.set_int(o, static_cast<int64_t>(r));
    else expected.set(o, r);
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      mags[o] /= op == ReduceOp::Mean ? std::max<double>(1, rows[o].size()) : 1;
    } else {
      mags[o] = std::fabs(r);
    }
  }
  double rtol = std::max(default_rtol(out.dtype), nk::is_floating(compute) ? 1e-5 : 0.0);
  if (compute == DType::Float64) rtol = 1e-10;
  // Sums are judged against sum |x| (the scale their rounding error has).
  int bad = 0;
  for (int64_t o = 0; o < expected.numel(); ++o) {
    double a = out.get(o), e = expected.get(o);
    bool ok = (std::isnan(e) && std::isnan(a)) || a == e ||
              std::fabs(a - e) <= rtol * mags[o] + 1e-30;
    if (!ok && bad++ < 5) ADD_FAILURE() << "out[" << o << "] = " << a << ", want " << e;
  }
  EXPECT_EQ(bad, 0) << nk::op_name(op) << " " << dtype_str(compute);
}

class ReduceTable : public ::testing::TestWithParam<RCase> {};

void fill_for(ReduceOp op, HostTensor& t) {
  if (op == ReduceOp::Prod) fill_uniform(t, 0.5, 1.5);
  else fill_uniform(t, -3, 3);
  if (!nk::is_floating(t.dtype) && op == ReduceOp::Prod) fill_uniform(t, -2, 2);
  if (t.dtype == DType::UInt8) fill_uniform(t, 0, op == ReduceOp::Prod ? 2 : 20);
}

TEST_P(ReduceTable, DimSetsAndLayouts) {
  auto [op, compute] = GetParam();
  nk::Scalar p = param(op);
  const std::set<int> dim_sets[] = {{1}, {0, 2}, {0, 1, 2}, {2}, {0}, {}};
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    HostTensor in(compute, {13, 7, 5}, layout);
    fill_for(op, in);
    for (const auto& dims : dim_sets) {
      SCOPED_TRACE(::testing::Message() << "layout " << int(layout) << " dims " << dims.size()
                                        << (dims.empty() ? -1 : *dims.begin()));
      check_reduce(op, compute, in, dims, p);
    }
  }
  // Broadcast input (stride 0), 0-dim input, empty reduction, empty output.
  HostTensor small(compute, {13, 1, 5});
  fill_for(op, small);
  check_reduce(op, compute, small.expanded(1, 6), {1}, p);
  check_reduce(op, compute, small.expanded(1, 6), {0, 1}, p);
  HostTensor scalar(compute, {});
  fill_for(op, scalar);
  check_reduce(op, compute, scalar, {}, p);
  if (op != ReduceOp::Amax && op != ReduceOp::Amin) {
    check_reduce(op, compute, HostTensor(compute, {0, 4}), {0}, p);  // identity
  }
  check_reduce(op, compute, HostTensor(compute, {0, 4}), {1}, p);  // nothing to write
}

TEST_P(ReduceTable, LargeFullAndOuterReductions) {
  auto [op, compute] = GetParam();
  if (op == ReduceOp::Prod) return;  // a product of a million values is 0 or inf
  if (compute != DType::Float32 && compute != DType::Int32 && compute != DType::BFloat16) return;
  nk::Scalar p = param(op);
  HostTensor big(compute, {(1 << 20) + 3});
  fill_for(op, big);
  check_reduce(op, compute, big, {0}, p);  // segmented over the pool
  HostTensor mat(compute, {1031, 515});
  fill_for(op, mat);
  check_reduce(op, compute, mat, {0}, p);  // tiled: 16 columns at a time
  check_reduce(op, compute, mat, {1}, p);
  HostTensor tall(compute, {70000, 3});
  fill_for(op, tall);
  check_reduce(op, compute, tall, {0}, p);  // few outputs, long strided rows: tiles + segments
}

std::vector<RCase> reduce_cases() {
  std::vector<RCase> cases;
#define NPU_CASE(name, str) \
  for (DType t : kTypes) if (nk::reduce_supports(ReduceOp::name, t)) cases.push_back({ReduceOp::name, t});
  NPU_KERNELS_REDUCE_OPS(NPU_CASE)
#undef NPU_CASE
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, ReduceTable, ::testing::ValuesIn(reduce_cases()),
                         [](const ::testing::TestParamInfo<RCase>& info) {
                           return std::string(nk::op_name(info.param.op)) + "_" +
                                  dtype_str(info.param.compute);
                         });

TEST(Reduce, NormOrdersAndVarianceCorrections) {
  HostTensor in(DType::Float32, {9, 31});
  fill_uniform(in, -2, 2);
  for (double q : {0.0, 1.0, 2.0, 3.0, double(INFINITY), -double(INFINITY)}) {
    SCOPED_TRACE(q);
    check_reduce(ReduceOp::Norm, DType::Float32, in, {1}, q);
  }
  for (double corr : {0.0, 1.0, 2.0}) {
    check_reduce(ReduceOp::Var, DType::Float32, in, {0}, corr);
    check_reduce(ReduceOp::Std, DType::Float32, in, {1}, corr);
  }
}

TEST(Reduce, VarianceIsAccurateWithALargeMean) {
  std::vector<float> x(100000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1e4f + float(i % 7) * 0.25f;
  double mean = 0, m2 = 0;
  for (float v : x) mean += v;
  mean /= x.size();
  for (float v : x) m2 += (v - mean) * (v - mean);
  float out = 0;
  nk::reduce(ReduceOp::Var, TensorDesc::make(&out, DType::Float32, {1}),
             TensorDesc::make(x.data(), DType::Float32, {int64_t(x.size())}), DType::Float32, 1.0);
  EXPECT_NEAR(out, m2 / (x.size() - 1), 1e-5 * m2 / x.size());
}

TEST(Reduce, Float32SumIsAccurateLikeCascadeSummation) {
  // 16M copies of 0.1f: naive sequential float summation drifts by ~10%; PyTorch's cascade
  // sum is within ~1e-6 relative. So must we be.
  const int64_t n = 16 << 20;
  std::vector<float> x(n, 0.1f);
  float out = 0;
  nk::reduce(ReduceOp::Sum, TensorDesc::make(&out, DType::Float32, {1}),
             TensorDesc::make(x.data(), DType::Float32, {n}), DType::Float32);
  EXPECT_NEAR(out, double(0.1f) * n, 1e-6 * double(0.1f) * n);
}

TEST(Reduce, NanPropagatesThroughAmaxAndSum) {
  float x[5] = {1, NAN, 3, -1, 2};
  float mx = 0, s = 0;
  TensorDesc in = TensorDesc::make(x, DType::Float32, {5});
  nk::reduce(ReduceOp::Amax, TensorDesc::make(&mx, DType::Float32, {1}), in, DType::Float32);
  nk::reduce(ReduceOp::Sum, TensorDesc::make(&s, DType::Float32, {1}), in, DType::Float32);
  EXPECT_TRUE(std::isnan(mx));
  EXPECT_TRUE(std::isnan(s));
}

TEST(ArgReduce, IndicesValuesTiesAndNan) {
  for (DType t : {DType::Float32, DType::Int32, DType::BFloat16}) {
    for (int dim = 0; dim < 2; ++dim) {
      HostTensor in(t, {37, 23}, dim ? Layout::Transposed : Layout::Contiguous);
      fill_uniform(in, -3, 3);  // integers repeat: ties
      for (int64_t i = 0; i < in.numel(); ++i) in.set(i, std::round(in.get(i)));
      if (t == DType::Float32) in.set(40, NAN), in.set(41, NAN);
      std::vector<int64_t> os = {37, 23};
      os[dim] = 1;
      for (auto op : {nk::ArgReduceOp::Max, nk::ArgReduceOp::Min}) {
        HostTensor vals(t, os), idx(DType::Int64, os);
        nk::arg_reduce(op, vals.desc(), idx.desc(), in.desc(), t);
        for (int64_t o = 0; o < idx.numel(); ++o) {
          int64_t best = -1;
          double bv = 0;
          for (int64_t k = 0; k < in.sizes[dim]; ++k) {
            int64_t flat = dim == 0 ? k * 23 + o : o * 23 + k;
            double v = in.get(flat);
            bool better = best < 0 || (!std::isnan(bv) && (std::isnan(v) ||
                                       (op == nk::ArgReduceOp::Max ? v > bv : v < bv)));
            if (better) best = k, bv = v;
          }
          ASSERT_EQ(idx.get_int(o), best) << "dim " << dim << " out " << o;
          if (std::isnan(bv)) {
            ASSERT_TRUE(std::isnan(vals.get(o)));
          } else {
            ASSERT_EQ(vals.get(o), bv);
          }
        }
      }
    }
  }
  // argmax over everything: the flat index; values may be omitted.
  HostTensor big(DType::Float32, {300, 1000});
  fill_uniform(big, -1, 1);
  big.set(123456, 5.0);
  int64_t index = -1;
  nk::arg_reduce(nk::ArgReduceOp::Max, TensorDesc::make(nullptr, DType::Float32, {1, 1}),
                 TensorDesc::make(&index, DType::Int64, {1, 1}), big.desc(), DType::Float32);
  EXPECT_EQ(index, 123456);
}

// Long float32 rows take 16 lanes at a time (the extremum, then its first index): every row
// against the loop's rule (first of the equal extrema; the first NaN wins). Rows of lengths
// around a vector and the driver's 4096-element chunks, the extremum repeated in later blocks,
// NaN in the first block, only in the tail, after the extremum, +-0, all -inf / +inf.
TEST(ArgReduce, LongFloatRowsTiesNanAndZeros) {
  for (int64_t len : {16, 17, 31, 100, 4096 + 21, 32000}) {
    const int64_t rows = 9;
    std::vector<float> x(rows * len);
    uint32_t state = 99;
    for (float& v : x) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<int>(state >> 24) % 7) - 3.0f;  // many ties
    }
    float* r = x.data();
    r[0 * len + len - 1] = 9.0f, r[0 * len + len / 2] = 9.0f;  // row 0: max twice, late
    r[1 * len + 3] = NAN;                                       // row 1: NaN in block 0
    r[2 * len + len - 1] = NAN;                                 // row 2: NaN in the tail
    r[3 * len + 1] = 9.0f, r[3 * len + len - 2] = NAN;          // row 3: NaN after the max
    std::fill_n(r + 4 * len, len, 0.0f);                        // row 4: -0 first, then +0
    r[4 * len + 1] = -0.0f;
    std::fill_n(r + 5 * len, len, -INFINITY);                   // row 5: all -inf
    std::fill_n(r + 6 * len, len, INFINITY);                    // row 6: all +inf
    r[7 * len + len - 1] = -9.0f;                                // row 7: min last
    for (auto op : {nk::ArgReduceOp::Max, nk::ArgReduceOp::Min}) {
      const bool max = op == nk::ArgReduceOp::Max;
      std::vector<float> vals(rows);
      std::vector<int64_t> idx(rows);
      nk::arg_reduce(op, TensorDesc::make(vals.data(), DType::Float32, {rows, 1}),
                     TensorDesc::make(idx.data(), DType::Int64, {rows, 1}),
                     TensorDesc::make(x.data(), DType::Float32, {rows, len}), DType::Float32);
      for (int64_t row = 0; row < rows; ++row) {
        const float* v = r + row * len;
        int64_t best = 0;
        for (int64_t k = 1; k < len; ++k) {
          const bool better = !std::isnan(v[best]) &&
                              (std::isnan(v[k]) || (max ? v[k] > v[best] : v[k] < v[best]));
          if (better) best = k;
        }
        ASSERT_EQ(idx[row], best) << "len " << len << " row " << row << " max " << max;
        ASSERT_EQ(std::signbit(vals[row]), std::signbit(v[best]));
        if (!std::isnan(v[best])) {
          ASSERT_EQ(vals[row], v[best]);
        }
      }
    }
  }
}

// ---- scans ------------------------------------------------------------------------------

void check_scan(nk::ScanOp op, DType compute, const HostTensor& in, int dim) {
  bool with_idx = op == nk::ScanOp::Cummax || op == nk::ScanOp::Cummin;
  DType odt = (op == nk::ScanOp::Cumsum || op == nk::ScanOp::Cumprod) && !nk::is_floating(compute)
                  ? DType::Int64
                  : compute;
  HostTensor out(odt, in.sizes, Layout::Transposed), idx(DType::Int64, in.sizes);
  TensorDesc id = idx.desc();
  nk::scan(op, out.desc(), with_idx ? &id : nullptr, in.desc(), dim, compute);
  HostTensor expected(odt, in.sizes);
  HostTensor eidx(DType::Int64, in.sizes);
  int64_t inner = 1;
  for (int d = dim + 1; d < in.ndim(); ++d) inner *= in.sizes[d];
  int64_t L = in.sizes[dim], outer = in.numel() / std::max<int64_t>(1, L * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      double acc = op == nk::ScanOp::Cumprod ? 1 : (op == nk::ScanOp::Cumsum ? 0 : NAN);
      int64_t best = -1;
      for (int64_t k = 0; k < L; ++k) {
        int64_t flat = (o * L + k) * inner + j;
        double v = in.get(flat);
        switch (op) {
          case nk::ScanOp::Cumsum: acc += v; break;
          case nk::ScanOp::Cumprod: acc *= v; break;
          case nk::ScanOp::Cummax: case nk::ScanOp::Cummin:
            if (best < 0 || std::isnan(v) ||
                (!std::isnan(acc) && (op == nk::ScanOp::Cummax ? v >= acc : v <= acc))) {
              acc = v, best = k;
            }
            eidx.set_int(flat, best);
            break;
          case nk::ScanOp::LogCumSumExp:
            acc = k == 0 ? v : std::max(acc, v) + std::log1p(std::exp(-std::fabs(acc - v)));
            break;
        }
        expected.set(flat, acc);
      }
    }
  }
  double rtol = nk::is_floating(compute) ? std::max(1e-6, default_rtol(odt)) : 0;
  EXPECT_TRUE(all_close(out, expected, rtol, rtol)) << nk::op_name(op) << " dim " << dim;
  if (with_idx) {
    EXPECT_TRUE(all_close(idx, eidx, 0, 0)) << nk::op_name(op) << " indices";
  }
}

TEST(Scan, EveryOpDimAndLayout) {
  for (auto op : {nk::ScanOp::Cumsum, nk::ScanOp::Cumprod, nk::ScanOp::Cummax,
                  nk::ScanOp::Cummin, nk::ScanOp::LogCumSumExp}) {
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int32, DType::Bool}) {
      if (!nk::scan_supports(op, t)) continue;
      SCOPED_TRACE(std::string(nk::op_name(op)) + " " + dtype_str(t));
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        HostTensor in(t, {37, 29, 3}, layout);
        if (op == nk::ScanOp::Cumprod) fill_uniform(in, 0.7, 1.3);
        else fill_uniform(in, -3, 3);
        if (op == nk::ScanOp::Cumprod && !nk::is_floating(t)) fill_uniform(in, -1, 1);
        for (int dim = 0; dim < 3; ++dim) check_scan(op, t, in, dim);
      }
    }
  }
  HostTensor longline(DType::Float32, {3, 5000});
  fill_uniform(longline, -1, 1);
  check_scan(nk::ScanOp::Cumsum, DType::Float32, longline, 1);
  HostTensor wide(DType::Float32, {40, 10000});
  fill_uniform(wide, -1, 1);
  check_scan(nk::ScanOp::Cumsum, DType::Float32, wide, 0);
  HostTensor empty(DType::Float32, {0, 4});
  check_scan(nk::ScanOp::Cumsum, DType::Float32, empty, 0);
  HostTensor scalar(DType::Float32, {1});
  scalar.set(0, 2.5);
  check_scan(nk::ScanOp::Cummax, DType::Float32, scalar, 0);
}

}  // namespace
}  // namespace ktest
