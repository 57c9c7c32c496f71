// Indexing and shape kernels against direct element-by-element references.
#include <gtest/gtest.h>

#include <tuple>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

// Flat row-major index from coordinates.
int64_t flat(const std::vector<int64_t>& sizes, const std::vector<int64_t>& c) {
  int64_t f = 0;
  for (size_t d = 0; d < sizes.size(); ++d) f = f * sizes[d] + c[d];
  return f;
}
std::vector<int64_t> coords(const std::vector<int64_t>& sizes, int64_t f) {
  std::vector<int64_t> c(sizes.size());
  for (int d = int(sizes.size()) - 1; d >= 0; --d) c[d] = f % sizes[d], f /= sizes[d];
  return c;
}

HostTensor random_index(DType t, std::vector<int64_t> sizes, int64_t bound) {
  HostTensor idx(t, sizes);
  fill_uniform(idx, 0, static_cast<double>(bound - 1));
  return idx;
}

TEST(IndexSelect, EveryDimBothIndexDtypesTransposedInput) {
  for (DType it : {DType::Int64, DType::Int32}) {
    for (int dim = 0; dim < 3; ++dim) {
      std::vector<int64_t> sizes = {6, 7, 8};
      HostTensor in(DType::Float32, sizes, Layout::Transposed);
      fill_uniform(in, -1, 1);
      HostTensor idx = random_index(it, {11}, sizes[dim]);
      std::vector<int64_t> os = sizes;
      os[dim] = 11;
      HostTensor out(DType::Float32, os), exp(DType::Float32, os);
      nk::index_select(out.desc(), in.desc(), dim, idx.desc());
      for (int64_t f = 0; f < exp.numel(); ++f) {
        auto c = coords(os, f);
        c[dim] = idx.get_int(c[dim]);
        exp.set(f, in.get(flat(sizes, c)));
      }
      EXPECT_TRUE(all_close(out, exp, 0, 0)) << "dim " << dim;
    }
  }
}

TEST(IndexAdd, DuplicatesAccumulateWithAlpha) {
  for (int dim = 0; dim < 2; ++dim) {
    std::vector<int64_t> sizes = {5, 9};
    HostTensor out(DType::Float64, sizes), src_shape_holder;
    fill_uniform(out, -1, 1);
    HostTensor idx(DType::Int64, {7});
    int64_t vals[7] = {0, 2, 2, 4, 0, 1, 2};
    for (int i = 0; i < 7; ++i) idx.set_int(i, vals[i] % sizes[dim]);
    std::vector<int64_t> ss = sizes;
    ss[dim] = 7;
    HostTensor src(DType::Float32, ss, Layout::Transposed);
    fill_uniform(src, -1, 1);
    HostTensor exp = out;
    for (int64_t f = 0; f < src.numel(); ++f) {
      auto c = coords(ss, f);
      c[dim] = idx.get_int(c[dim]);
      int64_t o = flat(sizes, c);
      exp.set(o, exp.get(o) + 0.5 * src.get(f));
    }
    nk::index_add(out.desc(), dim, idx.desc(), src.desc(), 0.5);
    EXPECT_TRUE(all_close(out, exp, 1e-7, 1e-7)) << "dim " << dim;
  }
}

TEST(Embedding, ForwardAndBackwardWithPadding) {
  const int64_t V = 50, D = 33;
  HostTensor w(DType::Float32, {V, D});
  fill_uniform(w, -1, 1);
  HostTensor idx = random_index(DType::Int64, {4, 6}, V);
  idx.set_int(0, 3), idx.set_int(1, 3), idx.set_int(2, 7);  // duplicates and the padding row
  HostTensor out(DType::Float32, {4, 6, D});
  nk::embedding(out.desc(), w.desc(), idx.desc());
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < D; ++j) ASSERT_EQ(out.get(i * D + j), w.get(idx.get_int(i) * D + j));

  HostTensor g(DType::Float32, {4, 6, D}), gw(DType::Float32, {V, D});
  fill_uniform(g, -1, 1);
  fill_uniform(gw, 5, 6);  // overwritten
  nk::embedding_backward(gw.desc(), g.desc(), idx.desc(), /*padding_idx=*/7);
  HostTensor exp(DType::Float32, {V, D});
  for (int64_t i = 0; i < 24; ++i) {
    int64_t v = idx.get_int(i);
    if (v == 7) continue;
    for (int64_t j = 0; j < D; ++j) exp.set(v * D + j, exp.get(v * D + j) + g.get(i * D + j));
  }
  EXPECT_TRUE(all_close(gw, exp, 1e-6, 1e-6));
}

TEST(Embedding, FloatBackwardSumsEachRowInLookupOrder) {
  // float32 rows read in place, grouped by a counting sort (a table no larger than the lookups
  // allow) or a comparison sort (a table of 100000 rows): each gradient row is the sum of its
  // lookups' rows in lookup order, bit for bit; the padding row and unused rows stay zero.
  for (auto [V, D, N] : {std::tuple<int64_t, int64_t, int64_t>{256, 128, 4096}, {8, 33, 2048},
                         {100000, 20, 64}}) {
    HostTensor idx = random_index(DType::Int64, {N}, V);
    idx.set_int(0, 7), idx.set_int(1, 7);
    HostTensor g(DType::Float32, {N, D}), gw(DType::Float32, {V, D});
    fill_uniform(g, -1, 1);
    fill_uniform(gw, 5, 6);  // overwritten
    const int64_t pad = V > 1000 ? 7 : -1;
    nk::embedding_backward(gw.desc(), g.desc(), idx.desc(), pad);
    std::vector<float> acc(static_cast<size_t>(V * D), 0.0f);
    for (int64_t i = 0; i < N; ++i) {
      if (idx.get_int(i) == pad) continue;
      for (int64_t j = 0; j < D; ++j)
        acc[idx.get_int(i) * D + j] += static_cast<float>(g.get(i * D + j));
    }
    for (int64_t k = 0; k < V * D; ++k)
      ASSERT_EQ(gw.get(k), acc[k]) << "element " << k << " of " << V << " x " << D;
  }
}

TEST(Embedding, HalfBackwardSumsInFloatAndRoundsOnce) {
  // 2048 lookups of 8 rows: each gradient row is a sum of ~256 half values. The kernel sums in
  // float (row order) and rounds once; rounding after every row would differ in most elements.
  const int64_t V = 8, D = 33, N = 2048;
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    HostTensor idx = random_index(DType::Int64, {N}, V);
    HostTensor g(dt, {N, D}), gw(dt, {V, D});
    fill_uniform(g, -1, 1);
    nk::embedding_backward(gw.desc(), g.desc(), idx.desc(), /*padding_idx=*/-1);
    std::vector<float> acc(static_cast<size_t>(V * D), 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < D; ++j)
        acc[idx.get_int(i) * D + j] += static_cast<float>(g.get(i * D + j));
    HostTensor exp(dt, {V, D});
    for (int64_t k = 0; k < V * D; ++k) exp.set(k, acc[k]);
    for (int64_t k = 0; k < V * D; ++k)
      ASSERT_EQ(gw.get(k), exp.get(k)) << "element " << k << " dtype " << int(dt);
  }
}

TEST(GatherScatter, EveryDimAndReduction) {
  std::vector<int64_t> sizes = {4, 5, 6}, isizes = {3, 4, 5};
  for (int dim = 0; dim < 3; ++dim) {
    HostTensor in(DType::Int32, sizes, Layout::Transposed);
    fill_uniform(in, -100, 100);
    HostTensor idx = random_index(DType::Int64, isizes, sizes[dim]);
    HostTensor out(DType::Int32, isizes), exp(DType::Int32, isizes);
    nk::gather(out.desc(), in.desc(), dim, idx.desc());
    for (int64_t f = 0; f < idx.numel(); ++f) {
      auto c = coords(isizes, f);
      c[dim] = idx.get_int(f);
      exp.set_int(f, in.get_int(flat(sizes, c)));
    }
    EXPECT_TRUE(all_close(out, exp, 0, 0)) << "gather dim " << dim;

    for (auto red : {nk::ScatterReduce::None, nk::ScatterReduce::Add, nk::ScatterReduce::Multiply,
                     nk::ScatterReduce::Amax, nk::ScatterReduce::Amin}) {
      HostTensor dst(DType::Int32, sizes), src(DType::Int32, isizes);
      fill_uniform(dst, -5, 5);
      fill_uniform(src, -5, 5);
      HostTensor e = dst;
      for (int64_t f = 0; f < idx.numel(); ++f) {  // in index order
        auto c = coords(isizes, f);
        c[dim] = idx.get_int(f);
        int64_t o = flat(sizes, c);
        int64_t a = e.get_int(o), b = src.get_int(f);
        int64_t r = red == nk::ScatterReduce::None ? b
                    : red == nk::ScatterReduce::Add ? a + b
                    : red == nk::ScatterReduce::Multiply ? a * b
                    : red == nk::ScatterReduce::Amax ? std::max(a, b) : std::min(a, b);
        e.set_int(o, r);
      }
      nk::scatter(dst.desc(), dim, idx.desc(), src.desc(), red);
      EXPECT_TRUE(all_close(dst, e, 0, 0)) << "scatter dim " << dim << " reduce " << int(red);
    }
  }
  // A scalar source.
  HostTensor dst(DType::Float32, {3, 4});
  HostTensor idx = random_index(DType::Int64, {3, 2}, 4);
  float v = 9.5f;
  nk::scatter(dst.desc(), 1, idx.desc(), TensorDesc::broadcast_scalar(&v, DType::Float32, idx.desc()));
  for (int64_t f = 0; f < idx.numel(); ++f) EXPECT_EQ(dst.get((f / 2) * 4 + idx.get_int(f)), 9.5);
}

TEST(Factories, ArangeAndLinspace) {
  HostTensor a(DType::Float32, {100}), b(DType::Int64, {7});
  nk::arange(a.desc(), 1.5, 0.25);
  nk::arange(b.desc(), int64_t{-3}, int64_t{2});
  for (int i = 0; i < 100; ++i) ASSERT_FLOAT_EQ(a.get(i), 1.5f + 0.25f * i);
  for (int i = 0; i < 7; ++i) ASSERT_EQ(b.get_int(i), -3 + 2 * i);
  HostTensor l(DType::Float64, {11});
  nk::linspace(l.desc(), -1.0, 1.0);
  EXPECT_EQ(l.get(0), -1.0);
  EXPECT_EQ(l.get(10), 1.0);  // exact at both ends
  for (int i = 0; i < 11; ++i) EXPECT_NEAR(l.get(i), -1.0 + 0.2 * i, 1e-15);
  HostTensor one(DType::Float32, {1});
  nk::linspace(one.desc(), 3.0, 7.0);
  EXPECT_EQ(one.get(0), 3.0);
}

// The unit-stride loop (vectorised) and the strided one give the same values, over several
// pool chunks (32768 elements each) and into every third element of a buffer.
TEST(Factories, ArangeContiguousAndStrided) {
  const int64_t n = 70001;
  std::vector<int64_t> ints(static_cast<size_t>(n));
  std::vector<float> floats(static_cast<size_t>(n));
  nk::arange(TensorDesc::make(ints.data(), DType::Int64, {n}), int64_t{-5}, int64_t{3});
  nk::arange(TensorDesc::make(floats.data(), DType::Float32, {n}), 0.5, 0.125);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ints[i], -5 + 3 * i) << i;
    ASSERT_EQ(floats[i], static_cast<float>(0.5 + 0.125 * static_cast<double>(i))) << i;
  }
  std::vector<int32_t> every_third(3 * 40, -1);
  nk::arange(TensorDesc::make(every_third.data(), DType::Int32, {40}, {3}), int64_t{7},
             int64_t{-2});
  for (int64_t i = 0; i < 3 * 40; ++i) {
    ASSERT_EQ(every_third[i], i % 3 == 0 ? 7 - 2 * (i / 3) : -1) << i;
  }
}

TEST(TrilTriu, DiagonalsAndBatches) {
  std::vector<int64_t> sizes = {3, 5, 7};
  HostTensor in(DType::Float32, sizes, Layout::Transposed);
  fill_uniform(in, 1, 2);
  for (bool upper : {false, true}) {
    for (int64_t diag : {-2, 0, 1, 9}) {
      HostTensor out(DType::Float32, sizes), exp(DType::Float32, sizes);
      nk::tril_triu(out.desc(), in.desc(), diag, upper);
      for (int64_t f = 0; f < in.numel(); ++f) {
        auto c = coords(sizes, f);
        bool keep = upper ? c[2] - c[1] >= diag : c[2] - c[1] <= diag;
        exp.set(f, keep ? in.get(f) : 0.0);
      }
      EXPECT_TRUE(all_close(out, exp, 0, 0)) << "upper " << upper << " diag " << diag;
    }
  }
}

TEST(FlipRoll, EveryMaskAndShifts) {
  std::vector<int64_t> sizes = {4, 3, 5};
  HostTensor in(DType::Int16, sizes, Layout::Transposed);
  fill_uniform(in, -1000, 1000);
  for (unsigned mask = 0; mask < 8; ++mask) {
    HostTensor out(DType::Int16, sizes), exp(DType::Int16, sizes);
    nk::flip(out.desc(), in.desc(), mask);
    for (int64_t f = 0; f < in.numel(); ++f) {
      auto c = coords(sizes, f);
      for (int d = 0; d < 3; ++d) if (mask >> d & 1) c[d] = sizes[d] - 1 - c[d];
      exp.set_int(f, in.get_int(flat(sizes, c)));
    }
    EXPECT_TRUE(all_close(out, exp, 0, 0)) << "mask " << mask;
  }
  const int64_t shifts[2] = {-7, 2};
  const int dims[2] = {2, 0};
  HostTensor out(DType::Int16, sizes), exp(DType::Int16, sizes);
  nk::roll(out.desc(), in.desc(), shifts, dims, 2);
  for (int64_t f = 0; f < in.numel(); ++f) {
    auto c = coords(sizes, f);  // out[c] = in[c - shift]
    c[2] = ((c[2] + 7) % 5 + 5) % 5;
    c[0] = ((c[0] - 2) % 4 + 4) % 4;
    exp.set_int(f, in.get_int(flat(sizes, c)));
  }
  EXPECT_TRUE(all_close(out, exp, 0, 0));
}

}  // namespace
}  // namespace ktest
