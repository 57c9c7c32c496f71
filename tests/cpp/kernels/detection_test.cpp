// The detection kernels (npu/kernels/detection.h) on cases whose answers are known in closed
// form: greedy NMS order and suppression, rotated-rectangle intersections (disjoint, nested,
// a square against itself turned 45 degrees), RoI Align and PS RoI pooling of planes whose
// samples are known, and the deformable sampling with zero offsets (a plain im2col).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "npu/kernels/detection.h"

namespace {

namespace nk = npu::kernels;

TEST(DetectionNms, KeepsByScoreAndSuppressesOverlaps) {
  // 0 and 1 overlap with IoU 81 / 119; 2 is apart; 3 is below the score threshold.
  const std::vector<float> boxes = {0, 0, 10, 10, 1, 1, 11, 11, 20, 20, 30, 30, 0, 0, 10, 10};
  const std::vector<float> scores = {0.8f, 0.9f, 0.7f, 0.05f};
  std::vector<int64_t> keep(4);
  EXPECT_EQ(nk::nms_boxes(boxes.data(), scores.data(), 4, 0.5f, 0.1f, -1, 0.0f, keep.data()), 2);
  EXPECT_EQ(keep[0], 1);
  EXPECT_EQ(keep[1], 2);
  // a threshold above their IoU keeps both; max_out stops early
  EXPECT_EQ(nk::nms_boxes(boxes.data(), scores.data(), 4, 0.7f, 0.1f, 2, 0.0f, keep.data()), 2);
  EXPECT_EQ(keep[0], 1);
  EXPECT_EQ(keep[1], 0);
}

TEST(DetectionRotated, IntersectionAreas) {
  double aa = 0, ab = 0;
  const double square[5] = {0, 0, 2, 2, 0};
  const double turned[5] = {0, 0, 2, 2, 45};
  EXPECT_NEAR(nk::rotated_intersection(square, turned, &aa, &ab), 8 * (std::sqrt(2.0) - 1),
              1e-9);
  const double far[5] = {10, 10, 2, 2, 30};
  EXPECT_EQ(nk::rotated_intersection(square, far, &aa, &ab), 0.0);
  const double inner[5] = {0.2, -0.1, 0.5, 0.4, 77};
  EXPECT_NEAR(nk::rotated_intersection(square, inner, &aa, &ab), 0.2, 1e-9);
  EXPECT_DOUBLE_EQ(aa, 4.0);
  EXPECT_DOUBLE_EQ(ab, 0.2);
}

TEST(DetectionRoiAlign, LinearPlaneIsSampledExactly) {
  // value = x + 10 y is linear, so each bin's mean is the value at the bin's centre.
  const int64_t H = 6, W = 8;
  std::vector<float> plane(H * W);
  for (int64_t y = 0; y < H; ++y) {
    for (int64_t x = 0; x < W; ++x) plane[y * W + x] = static_cast<float>(x + 10 * y);
  }
  const std::vector<float> roi = {0, 1, 1, 5, 3};  // x 1..5, y 1..3
  std::vector<float> out(2 * 2);
  nk::roi_align_forward(plane.data(), 1, 1, H, W, roi.data(), 1, 1.0f, 2, 2, 2, 0, out.data());
  EXPECT_NEAR(out[0], 2.0f + 10 * 1.5f, 1e-5);
  EXPECT_NEAR(out[1], 4.0f + 10 * 1.5f, 1e-5);
  EXPECT_NEAR(out[2], 2.0f + 10 * 2.5f, 1e-5);
  EXPECT_NEAR(out[3], 4.0f + 10 * 2.5f, 1e-5);
  // the backward spreads each bin's gradient over weights summing to one
  std::vector<float> grad_in(H * W);
  const std::vector<float> grad_out = {1, 1, 1, 1};
  nk::roi_align_backward(grad_out.data(), roi.data(), 1, 1, 1, H, W, 1.0f, 2, 2, 2, 0,
                         grad_in.data());
  double total = 0;
  for (float v : grad_in) total += v;
  EXPECT_NEAR(total, 4.0, 1e-6);
}

TEST(DetectionPsRoiPooling, EachBinReadsItsOwnChannel) {
  const int64_t group = 2, dim = 1, H = 4, W = 4;
  std::vector<float> input(group * group * H * W);
  for (int64_t c = 0; c < group * group; ++c) {
    for (int64_t i = 0; i < H * W; ++i) input[c * H * W + i] = static_cast<float>(c + 1);
  }
  const std::vector<float> roi = {0, 0, 0, 3, 3};
  std::vector<float> out(group * group);
  nk::ps_roi_pooling_forward(input.data(), 1, H, W, roi.data(), 1, 1.0f, group, dim, out.data());
  for (int64_t k = 0; k < group * group; ++k) EXPECT_FLOAT_EQ(out[k], static_cast<float>(k + 1));
}

TEST(DetectionDeformable, ZeroOffsetsAreIm2col) {
  nk::DeformableGeometry g{};
  g.N = 1;
  g.C = 1;
  g.H = 3;
  g.W = 3;
  g.Ho = 3;
  g.Wo = 3;
  g.KH = 3;
  g.KW = 3;
  g.stride_h = g.stride_w = 1;
  g.pad_top = g.pad_left = 1;
  g.dilation_h = g.dilation_w = 1;
  g.groups = 1;
  g.modulated = true;
  std::vector<float> x(9);
  for (int i = 0; i < 9; ++i) x[i] = static_cast<float>(i + 1);
  std::vector<float> offsets(3 * 9 * 9, 0.0f);
  for (int i = 2 * 81; i < 3 * 81; ++i) offsets[i] = 1.0f;  // scales
  std::vector<float> out(81);
  nk::deformable_offsets_forward(g, x.data(), offsets.data(), out.data());
  for (int ho = 0; ho < 3; ++ho) {
    for (int wo = 0; wo < 3; ++wo) {
      for (int kh = 0; kh < 3; ++kh) {
        for (int kw = 0; kw < 3; ++kw) {
          const int y = ho - 1 + kh, xx = wo - 1 + kw;
          const float want = (y >= 0 && y < 3 && xx >= 0 && xx < 3) ? x[y * 3 + xx] : 0.0f;
          EXPECT_FLOAT_EQ(out[(ho * 3 + kh) * 9 + wo * 3 + kw], want);
        }
      }
    }
  }
}

}  // namespace
