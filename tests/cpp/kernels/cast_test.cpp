// copy() between every pair of dtypes and layouts, and fill().
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

const DType kAll[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                      DType::Int8,    DType::Int16,   DType::Int32,    DType::Int64,
                      DType::UInt8,   DType::Bool};

// The value PyTorch's conversion gives for `v` (already held by `from`) stored into `to`.
double converted(double v, DType to) {
  if (nk::is_floating(to)) return round_to(to, v);
  if (to == DType::Bool) return v != 0;
  return static_cast<double>(wrap_to(to, static_cast<int64_t>(v)));  // truncate, then wrap
}

TEST(Copy, EveryDtypePairEveryLayout) {
  for (DType from : kAll) {
    for (DType to : kAll) {
      for (int layout = 0; layout < 5; ++layout) {
        SCOPED_TRACE(dtype_str(from) + " -> " + dtype_str(to) + " layout " + std::to_string(layout));
        std::vector<int64_t> sizes = {13, 17, 3};
        if (layout == 3) sizes = {};
        if (layout == 4) sizes = {4, 0};
        HostTensor src(from, sizes, layout == 1 ? Layout::Transposed : Layout::Contiguous);
        if (layout == 2) {  // broadcast source
          HostTensor s1(from, {13, 1, 3});
          fill_uniform(s1, -300, 300);
          src = s1.expanded(1, 17);
        } else {
          fill_uniform(src, -300, 300);
        }
        HostTensor dst(to, sizes, layout == 0 ? Layout::Transposed : Layout::Contiguous);
        nk::copy(dst.desc(), src.desc());
        HostTensor expected(to, sizes);
        for (int64_t i = 0; i < expected.numel(); ++i) expected.set(i, converted(src.get(i), to));
        ASSERT_TRUE(all_close(dst, expected, 0, 0));
      }
    }
  }
}

// Bool storage read as bytes: any nonzero byte is true (PyTorch may leave 2 or 255 there), on
// the vectorised unit-stride path (8 at a time, then a tail), from a broadcast byte and from a
// strided view; and where() with such a condition (it converts the condition this way), the
// condition broadcast along rows as a logits processor's vocabulary mask is.
TEST(Copy, BoolBytesToFloatEveryStride) {
  std::vector<uint8_t> bytes(3 * 41);
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<uint8_t>((i * 37) % 5 == 0 ? 0 : (i * 53) % 256);
  }
  for (int64_t n = 0; n <= 41; ++n) {
    for (int64_t ss : {1, 0, 3}) {
      std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f);
      nk::copy(TensorDesc::make(out.data(), DType::Float32, {n}),
               TensorDesc::make(bytes.data(), DType::Bool, {n}, {ss}));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], bytes[static_cast<size_t>(i * ss)] != 0 ? 1.0f : 0.0f)
            << "n " << n << " stride " << ss << " element " << i;
      }
      ASSERT_EQ(out[n], -7.0f) << "wrote past the end, n " << n;
    }
  }
  const int64_t rows = 3, cols = 1000;
  std::vector<uint8_t> cond(cols);
  std::vector<float> x(rows * cols), out(rows * cols);
  for (int64_t j = 0; j < cols; ++j) cond[j] = static_cast<uint8_t>(j % 7 == 0 ? 0 : j % 3);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = 0.5f * static_cast<float>(i);
  const float minus_inf = -INFINITY;
  nk::ternary(nk::TernaryOp::Where, TensorDesc::make(out.data(), DType::Float32, {rows, cols}),
              TensorDesc::make(cond.data(), DType::Bool, {rows, cols}, {0, 1}),
              TensorDesc::make(&minus_inf, DType::Float32, {rows, cols}, {0, 0}),
              TensorDesc::make(x.data(), DType::Float32, {rows, cols}), DType::Float32);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(out[i], cond[i % cols] != 0 ? minus_inf : x[i]) << i;
  }
}

TEST(Copy, FloatToIntTruncatesAndWrapsLikePyTorch) {
  float src[4] = {-1.5f, 300.7f, -300.2f, 2.99f};
  uint8_t u8[4];
  int8_t i8[4];
  nk::copy(TensorDesc::make(u8, DType::UInt8, {4}), TensorDesc::make(src, DType::Float32, {4}));
  nk::copy(TensorDesc::make(i8, DType::Int8, {4}), TensorDesc::make(src, DType::Float32, {4}));
  EXPECT_EQ(u8[0], 255);  // torch.tensor([-1.5, 300.7, -300.2]).to(torch.uint8) = [255, 44, 212]
  EXPECT_EQ(u8[1], 44);
  EXPECT_EQ(u8[2], 212);
  EXPECT_EQ(u8[3], 2);
  EXPECT_EQ(i8[0], -1);
  EXPECT_EQ(i8[1], 44);
}

TEST(Copy, HalfAndBFloat16RoundToNearestEven) {
  float src[5] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 70000.0f, NAN};
  uint16_t h[5], b[5];
  nk::copy(TensorDesc::make(h, DType::Float16, {5}), TensorDesc::make(src, DType::Float32, {5}));
  EXPECT_EQ(h[0], 0x3c00);  // tie rounds to even (down)
  EXPECT_EQ(h[1], 0x3c02);  // tie rounds to even (up)
  EXPECT_EQ(h[2], 0x7bff);
  EXPECT_EQ(h[3], 0x7c00);  // overflow to inf
  EXPECT_EQ(h[4] & 0x7c00, 0x7c00);
  EXPECT_NE(h[4] & 0x3ff, 0);  // NaN stays NaN
  nk::copy(TensorDesc::make(b, DType::BFloat16, {5}), TensorDesc::make(src, DType::Float32, {5}));
  EXPECT_EQ(b[0], 0x3f80);
  EXPECT_EQ(b[4], 0x7fc0);
}

TEST(Copy, LargeTransposeUsesThePoolAndIsExact) {
  HostTensor src(DType::Float32, {1024, 1031}, Layout::Transposed);
  fill_uniform(src, -1, 1);
  HostTensor dst(DType::BFloat16, {1024, 1031});
  nk::copy(dst.desc(), src.desc());
  HostTensor expected(DType::BFloat16, {1024, 1031});
  for (int64_t i = 0; i < expected.numel(); ++i) expected.set(i, src.get(i));
  EXPECT_TRUE(all_close(dst, expected, 0, 0));
}

// The head split and merge around attention: [B, T, H, D] <-> [B, H, T, D] with a short inner
// run (D = 7) and enough elements that the pool's chunks start inside runs; same-dtype copies
// (float32, float16 bits, int64, uint8 and bool) must move every element exactly.
TEST(Copy, HeadSplitAndMergeCopiesEveryElement) {
  const int64_t B = 7, T = 301, H = 6, D = 7, n = B * T * H * D;
  for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::UInt8, DType::Bool}) {
    SCOPED_TRACE(dtype_str(t));
    const size_t es = nk::dtype_size(t);
    std::vector<unsigned char> src(n * es), dst(n * es, 0), back(n * es, 0);
    for (int64_t i = 0; i < n; ++i) {  // distinct bytes per element (bool: 0 or 1)
      for (size_t b = 0; b < es; ++b) {
        src[i * es + b] = t == DType::Bool ? (i * 7 + 3) % 5 % 2 : (i * 31 + b * 7 + 1) % 251;
      }
    }
    // src is a contiguous [B, T, H, D] seen as [B, H, T, D]; dst a contiguous [B, H, T, D].
    const int64_t sizes[4] = {B, H, T, D};
    const int64_t split[4] = {T * H * D, D, H * D, 1};
    nk::copy(TensorDesc::make(dst.data(), t, sizes, 4, nullptr),
             TensorDesc::make(src.data(), t, sizes, 4, split));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t s = 0; s < T; ++s) {
          for (int64_t d = 0; d < D; ++d) {
            const int64_t from = ((b * T + s) * H + h) * D + d, to = ((b * H + h) * T + s) * D + d;
            ASSERT_EQ(0, std::memcmp(&dst[to * es], &src[from * es], es)) << b << h << s << d;
          }
        }
      }
    }
    // And back: the merge writes a strided destination.
    nk::copy(TensorDesc::make(back.data(), t, sizes, 4, split),
             TensorDesc::make(dst.data(), t, sizes, 4, nullptr));
    ASSERT_EQ(back, src);
  }
}

// concat against an element-by-element reference: parts along the last, a middle and the first
// dimension, parts whose outer dimensions are permuted and padded views (a rotary half of a
// transposed [B, S, H, D]), a part of size 0 along dim, dtypes of 2, 4 and 8 bytes; a part
// whose block is not contiguous is refused with out untouched.
TEST(Concat, RowsOfEveryPartInOrder) {
  struct Part {
    std::vector<int64_t> sizes, strides;  // strides in elements of a buffer of `storage` values
    int64_t storage;
  };
  struct Case {
    std::vector<int64_t> out_sizes;
    int dim;
    std::vector<Part> parts;
  };
  const std::vector<Case> cases = {
      // [3, 4, 5, 6] contiguous + [3, 4, 5, 7] seen in a [3, 5, 4, 16] buffer + [3, 4, 5, 0]
      {{3, 4, 5, 13}, 3,
       {{{3, 4, 5, 6}, {120, 30, 6, 1}, 360},
        {{3, 4, 5, 7}, {320, 16, 64, 1}, 960},
        {{3, 4, 5, 0}, {0, 0, 0, 1}, 1}}},
      {{4, 5, 6}, 1, {{{4, 2, 6}, {12, 6, 1}, 48}, {{4, 3, 6}, {18, 6, 1}, 72}}},
      {{5, 3}, 0, {{{2, 3}, {3, 1}, 6}, {{3, 3}, {3, 1}, 9}}},
      {{2, 3, 1}, 1, {{{2, 1, 1}, {1, 7, 7}, 2}, {{2, 2, 1}, {2, 1, 9}, 4}}},
  };
  for (DType t : {DType::Float32, DType::Float16, DType::Int64}) {
    const int64_t es = static_cast<int64_t>(nk::dtype_size(t));
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      SCOPED_TRACE(::testing::Message() << dtype_str(t) << " case " << ci);
      const Case& c = cases[ci];
      const int nd = static_cast<int>(c.out_sizes.size());
      int64_t out_n = 1;
      for (int64_t v : c.out_sizes) out_n *= v;
      std::vector<std::vector<unsigned char>> bufs;
      std::vector<TensorDesc> descs;
      for (size_t k = 0; k < c.parts.size(); ++k) {
        bufs.emplace_back(c.parts[k].storage * es);
        for (size_t b = 0; b < bufs.back().size(); ++b) bufs.back()[b] = (b * 13 + k * 101 + 7) % 251;
      }
      for (size_t k = 0; k < c.parts.size(); ++k) {
        descs.push_back(TensorDesc::make(bufs[k].data(), t, c.parts[k].sizes.data(), nd,
                                         c.parts[k].strides.data()));
      }
      std::vector<unsigned char> out(out_n * es, 0xAB);
      ASSERT_TRUE(nk::concat(TensorDesc::make(out.data(), t, c.out_sizes.data(), nd),
                             descs.data(), static_cast<int>(descs.size()), c.dim));
      // Reference: out element i comes from the part whose range along dim holds its index.
      int bad = 0;
      for (int64_t i = 0; i < out_n; ++i) {
        int64_t idx[8] = {}, rem = i;
        for (int d = nd - 1; d >= 0; --d) {
          idx[d] = rem % c.out_sizes[d];
          rem /= c.out_sizes[d];
        }
        size_t k = 0;
        int64_t at = idx[c.dim];
        while (at >= c.parts[k].sizes[c.dim]) at -= c.parts[k++].sizes[c.dim];
        int64_t off = 0;
        for (int d = 0; d < nd; ++d) off += (d == c.dim ? at : idx[d]) * c.parts[k].strides[d];
        if (std::memcmp(&out[i * es], &bufs[k][off * es], es) != 0 && bad++ < 3) {
          ADD_FAILURE() << "out element " << i << " is not part " << k << "'s element " << off;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
  // A part whose block is strided (a transposed [2, 3] seen as [3, 2] along dim 1): refused.
  std::vector<float> a(6, 1.0f), b(6, 2.0f), out(12, -1.0f);
  const TensorDesc parts[2] = {TensorDesc::make(a.data(), DType::Float32, {3, 2}),
                               TensorDesc::make(b.data(), DType::Float32, {3, 2}, {1, 3})};
  EXPECT_FALSE(nk::concat(TensorDesc::make(out.data(), DType::Float32, {3, 4}), parts, 2, 1));
  EXPECT_EQ(out, std::vector<float>(12, -1.0f));
}

TEST(Fill, WritesEveryElementOfAStridedView) {
  HostTensor t(DType::Int32, {6, 8}, Layout::Transposed);
  nk::fill(t.desc(), nk::Scalar(int64_t{-7}));
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.get_int(i), -7);
  HostTensor h(DType::Float16, {3, 5});
  nk::fill(h.desc(), 0.1);
  for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.get(i), round_to(DType::Float16, 0.1));
  HostTensor b(DType::Bool, {7});
  nk::fill(b.desc(), true);
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.get_int(i), 1);
}

}  // namespace
}  // namespace ktest
