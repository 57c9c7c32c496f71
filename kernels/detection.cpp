// Detection kernels (npu/kernels/detection.h): greedy NMS, rotated-rectangle intersection,
// RoI Align and position-sensitive RoI pooling.
#include "npu/kernels/detection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace npu::kernels {
namespace {

// Indices of the boxes whose score is above `score_threshold`, by descending score (stable).
std::vector<int64_t> byScore(const float* scores, int64_t n, float score_threshold) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (scores[i] > score_threshold) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [scores](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}

template <typename Overlap>
int64_t greedy(const float* scores, int64_t n, float iou_threshold, float score_threshold,
               int64_t max_out, int64_t* keep, Overlap overlap) {
  int64_t kept = 0;
  for (int64_t i : byScore(scores, n, score_threshold)) {
    if (max_out >= 0 && kept >= max_out) break;
    bool ok = true;
    for (int64_t k = 0; k < kept && ok; ++k) ok = overlap(i, keep[k]) <= iou_threshold;
    if (ok) keep[kept++] = i;
  }
  return kept;
}

struct Pt {
  double x, y;
};

double cross(Pt o, Pt a, Pt b) { return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x); }

// The four corners of (cx, cy, w, h, angle in degrees) in counter-clockwise order.
void corners(const double r[5], Pt p[4]) {
  const double theta = r[4] * M_PI / 180.0;
  const double b = std::cos(theta) * 0.5, a = std::sin(theta) * 0.5;
  p[0] = {r[0] - a * r[3] - b * r[2], r[1] + b * r[3] - a * r[2]};
  p[1] = {r[0] + a * r[3] - b * r[2], r[1] - b * r[3] - a * r[2]};
  p[2] = {2 * r[0] - p[0].x, 2 * r[1] - p[0].y};
  p[3] = {2 * r[0] - p[1].x, 2 * r[1] - p[1].y};
  if (cross(p[0], p[1], p[2]) < 0) std::swap(p[1], p[3]);
}

double polygonArea(const std::vector<Pt>& poly) {
  double s = 0;
  for (size_t i = 0; i < poly.size(); ++i) {
    const Pt& p = poly[i];
    const Pt& q = poly[(i + 1) % poly.size()];
    s += p.x * q.y - p.y * q.x;
  }
  return std::fabs(s) * 0.5;
}

// Bilinear sample of one H x W plane at (y, x), as RoI Align reads it: 0 outside
// [-1, H] x [-1, W], clamped to the border inside. The four weights and offsets go to w / off.
bool bilinear(int64_t H, int64_t W, double y, double x, double w[4], int64_t off[4]) {
  if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) {
    return false;
  }
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= H - 1) {
    y0 = y1 = H - 1;
    y = static_cast<double>(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= W - 1) {
    x0 = x1 = W - 1;
    x = static_cast<double>(x0);
  } else {
    x1 = x0 + 1;
  }
  const double ly = y - y0, lx = x - x0, hy = 1 - ly, hx = 1 - lx;
  w[0] = hy * hx;
  w[1] = hy * lx;
  w[2] = ly * hx;
  w[3] = ly * lx;
  off[0] = y0 * W + x0;
  off[1] = y0 * W + x1;
  off[2] = y1 * W + x0;
  off[3] = y1 * W + x1;
  return true;
}

struct RoiGeom {
  int64_t batch;
  double start_h, start_w, bin_h, bin_w;
  int64_t grid_h, grid_w;
};

RoiGeom roiAlignGeom(const float* roi, float scale, int64_t ph, int64_t pw, int64_t sample_num,
                     int roi_end_mode) {
  RoiGeom g{};
  g.batch = static_cast<int64_t>(roi[0]);
  const double end_off = roi_end_mode == 1 ? 1.0 : 0.0;
  g.start_w = roi[1] * static_cast<double>(scale);
  g.start_h = roi[2] * static_cast<double>(scale);
  const double end_w = (roi[3] + end_off) * static_cast<double>(scale);
  const double end_h = (roi[4] + end_off) * static_cast<double>(scale);
  const double roi_w = std::max(end_w - g.start_w, 1.0);
  const double roi_h = std::max(end_h - g.start_h, 1.0);
  g.bin_h = roi_h / static_cast<double>(ph);
  g.bin_w = roi_w / static_cast<double>(pw);
  g.grid_h = sample_num > 0 ? sample_num : static_cast<int64_t>(std::ceil(roi_h / ph));
  g.grid_w = sample_num > 0 ? sample_num : static_cast<int64_t>(std::ceil(roi_w / pw));
  return g;
}

// The pixel range [h0, h1) x [w0, w1) of bin (i, j) of a position-sensitive RoI.
struct PsBin {
  int64_t batch, h0, h1, w0, w1;
};

PsBin psBin(const float* roi, float scale, int64_t group, int64_t i, int64_t j, int64_t H,
            int64_t W) {
  const double s = static_cast<double>(scale);
  const double start_w = std::round(roi[1]) * s, start_h = std::round(roi[2]) * s;
  const double end_w = (std::round(roi[3]) + 1.0) * s, end_h = (std::round(roi[4]) + 1.0) * s;
  const double roi_w = std::max(end_w - start_w, 0.1), roi_h = std::max(end_h - start_h, 0.1);
  const double bin_h = roi_h / static_cast<double>(group);
  const double bin_w = roi_w / static_cast<double>(group);
  PsBin b{};
  b.batch = static_cast<int64_t>(roi[0]);
  auto clip = [](double v, int64_t hi) {
    return std::min(std::max(static_cast<int64_t>(v), int64_t{0}), hi);
  };
  b.h0 = clip(std::floor(i * bin_h + start_h), H);
  b.h1 = clip(std::ceil((i + 1) * bin_h + start_h), H);
  b.w0 = clip(std::floor(j * bin_w + start_w), W);
  b.w1 = clip(std::ceil((j + 1) * bin_w + start_w), W);
  return b;
}

}  // namespace

int64_t nms_boxes(const float* boxes, const float* scores, int64_t n, float iou_threshold,
                  float score_threshold, int64_t max_out, float offset, int64_t* keep) {
  auto area = [&](int64_t i) {
    const float* b = boxes + i * 4;
    return (std::fabs(b[2] - b[0]) + offset) * (std::fabs(b[3] - b[1]) + offset);
  };
  auto iou = [&](int64_t i, int64_t j) {
    const float* a = boxes + i * 4;
    const float* b = boxes + j * 4;
    const float iw = std::min(std::max(a[0], a[2]), std::max(b[0], b[2])) -
                     std::max(std::min(a[0], a[2]), std::min(b[0], b[2])) + offset;
    const float ih = std::min(std::max(a[1], a[3]), std::max(b[1], b[3])) -
                     std::max(std::min(a[1], a[3]), std::min(b[1], b[3])) + offset;
    if (iw <= 0 || ih <= 0) return 0.0f;
    const float inter = iw * ih;
    const float uni = area(i) + area(j) - inter;
    return uni > 0 ? inter / uni : 0.0f;
  };
  return greedy(scores, n, iou_threshold, score_threshold, max_out, keep, iou);
}

double rotated_intersection(const double a[5], const double b[5], double* area_a,
                            double* area_b) {
  *area_a = a[2] * a[3];
  *area_b = b[2] * b[3];
  if (*area_a <= 0 || *area_b <= 0) return 0.0;
  // Shift both to their mean centre: the clipping then works on small coordinates.
  const double mx = (a[0] + b[0]) * 0.5, my = (a[1] + b[1]) * 0.5;
  const double sa[5] = {a[0] - mx, a[1] - my, a[2], a[3], a[4]};
  const double sb[5] = {b[0] - mx, b[1] - my, b[2], b[3], b[4]};
  Pt pa[4], pb[4];
  corners(sa, pa);
  corners(sb, pb);
  // Sutherland-Hodgman: clip a's polygon by each edge of b (both counter-clockwise).
  std::vector<Pt> poly(pa, pa + 4);
  for (int e = 0; e < 4 && !poly.empty(); ++e) {
    const Pt c = pb[e], d = pb[(e + 1) % 4];
    std::vector<Pt> next;
    for (size_t i = 0; i < poly.size(); ++i) {
      const Pt p = poly[i], q = poly[(i + 1) % poly.size()];
      const double sp = cross(c, d, p), sq = cross(c, d, q);
      if (sp >= 0) next.push_back(p);
      if ((sp >= 0) != (sq >= 0)) {
        const double t = sp / (sp - sq);
        next.push_back({p.x + (q.x - p.x) * t, p.y + (q.y - p.y) * t});
      }
    }
    poly.swap(next);
  }
  if (poly.size() < 3) return 0.0;
  return std::min(polygonArea(poly), std::min(*area_a, *area_b));
}

int64_t nms_rotated_boxes(const float* boxes, const float* scores, int64_t n,
                          float iou_threshold, float score_threshold, int64_t max_out, int mode,
                          int64_t* keep) {
  std::vector<double> rect(static_cast<size_t>(n) * 5);
  for (int64_t i = 0; i < n; ++i) {
    const float* b = boxes + i * 5;
    double* r = rect.data() + i * 5;
    if (mode == 0) {
      for (int k = 0; k < 5; ++k) r[k] = b[k];
    } else {
      r[0] = (b[0] + b[2]) * 0.5;
      r[1] = (b[1] + b[3]) * 0.5;
      r[2] = b[2] - b[0];
      r[3] = b[3] - b[1];
      r[4] = -static_cast<double>(b[4]);
    }
  }
  auto iou = [&](int64_t i, int64_t j) {
    double aa = 0, ab = 0;
    const double inter = rotated_intersection(rect.data() + i * 5, rect.data() + j * 5, &aa, &ab);
    const double uni = aa + ab - inter;
    return uni > 0 ? static_cast<float>(inter / uni) : 0.0f;
  };
  return greedy(scores, n, iou_threshold, score_threshold, max_out, keep, iou);
}

void roi_align_forward(const float* input, int64_t N, int64_t C, int64_t H, int64_t W,
                       const float* rois, int64_t R, float spatial_scale, int64_t ph,
                       int64_t pw, int64_t sample_num, int roi_end_mode, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    const RoiGeom g = roiAlignGeom(rois + r * 5, spatial_scale, ph, pw, sample_num, roi_end_mode);
    float* o = out + r * C * ph * pw;
    if (g.batch < 0 || g.batch >= N || g.grid_h <= 0 || g.grid_w <= 0) {
      std::fill(o, o + C * ph * pw, 0.0f);
      continue;
    }
    const double count = static_cast<double>(g.grid_h * g.grid_w);
    for (int64_t c = 0; c < C; ++c) {
      const float* plane = input + (g.batch * C + c) * H * W;
      for (int64_t i = 0; i < ph; ++i) {
        for (int64_t j = 0; j < pw; ++j) {
          double acc = 0;
          for (int64_t iy = 0; iy < g.grid_h; ++iy) {
            const double y = g.start_h + i * g.bin_h + (iy + 0.5) * g.bin_h / g.grid_h;
            for (int64_t ix = 0; ix < g.grid_w; ++ix) {
              const double x = g.start_w + j * g.bin_w + (ix + 0.5) * g.bin_w / g.grid_w;
              double w[4];
              int64_t off[4];
              if (!bilinear(H, W, y, x, w, off)) continue;
              for (int k = 0; k < 4; ++k) acc += w[k] * plane[off[k]];
            }
          }
          o[(c * ph + i) * pw + j] = static_cast<float>(acc / count);
        }
      }
    }
  }
}

void roi_align_backward(const float* grad_out, const float* rois, int64_t R, int64_t N,
                        int64_t C, int64_t H, int64_t W, float spatial_scale, int64_t ph,
                        int64_t pw, int64_t sample_num, int roi_end_mode, float* grad_input) {
  std::vector<double> acc(static_cast<size_t>(N * C * H * W), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const RoiGeom g = roiAlignGeom(rois + r * 5, spatial_scale, ph, pw, sample_num, roi_end_mode);
    if (g.batch < 0 || g.batch >= N || g.grid_h <= 0 || g.grid_w <= 0) continue;
    const double count = static_cast<double>(g.grid_h * g.grid_w);
    for (int64_t c = 0; c < C; ++c) {
      double* plane = acc.data() + (g.batch * C + c) * H * W;
      const float* go = grad_out + (r * C + c) * ph * pw;
      for (int64_t i = 0; i < ph; ++i) {
        for (int64_t j = 0; j < pw; ++j) {
          const double gbin = go[i * pw + j] / count;
          for (int64_t iy = 0; iy < g.grid_h; ++iy) {
            const double y = g.start_h + i * g.bin_h + (iy + 0.5) * g.bin_h / g.grid_h;
            for (int64_t ix = 0; ix < g.grid_w; ++ix) {
              const double x = g.start_w + j * g.bin_w + (ix + 0.5) * g.bin_w / g.grid_w;
              double w[4];
              int64_t off[4];
              if (!bilinear(H, W, y, x, w, off)) continue;
              for (int k = 0; k < 4; ++k) plane[off[k]] += w[k] * gbin;
            }
          }
        }
      }
    }
  }
  for (size_t k = 0; k < acc.size(); ++k) grad_input[k] = static_cast<float>(acc[k]);
}

void ps_roi_pooling_forward(const float* input, int64_t N, int64_t H, int64_t W,
                            const float* rois, int64_t R, float spatial_scale, int64_t group,
                            int64_t output_dim, float* out) {
  const int64_t C = output_dim * group * group;
  for (int64_t r = 0; r < R; ++r) {
    const float* roi = rois + r * 5;
    for (int64_t c = 0; c < output_dim; ++c) {
      for (int64_t i = 0; i < group; ++i) {
        for (int64_t j = 0; j < group; ++j) {
          const PsBin b = psBin(roi, spatial_scale, group, i, j, H, W);
          float& o = out[((r * output_dim + c) * group + i) * group + j];
          o = 0.0f;
          if (b.h1 <= b.h0 || b.w1 <= b.w0 || b.batch < 0 || b.batch >= N) continue;
          const float* plane = input + (b.batch * C + (c * group + i) * group + j) * H * W;
          double s = 0;
          for (int64_t y = b.h0; y < b.h1; ++y) {
            for (int64_t x = b.w0; x < b.w1; ++x) s += plane[y * W + x];
          }
          o = static_cast<float>(s / static_cast<double>((b.h1 - b.h0) * (b.w1 - b.w0)));
        }
      }
    }
  }
}

void ps_roi_pooling_backward(const float* grad_out, const float* rois, int64_t R, int64_t N,
                             int64_t H, int64_t W, float spatial_scale, int64_t group,
                             int64_t output_dim, float* grad_input) {
  const int64_t C = output_dim * group * group;
  std::vector<double> acc(static_cast<size_t>(N * C * H * W), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const float* roi = rois + r * 5;
    for (int64_t c = 0; c < output_dim; ++c) {
      for (int64_t i = 0; i < group; ++i) {
        for (int64_t j = 0; j < group; ++j) {
          const PsBin b = psBin(roi, spatial_scale, group, i, j, H, W);
          if (b.h1 <= b.h0 || b.w1 <= b.w0 || b.batch < 0 || b.batch >= N) continue;
          const double g = grad_out[((r * output_dim + c) * group + i) * group + j] /
                           static_cast<double>((b.h1 - b.h0) * (b.w1 - b.w0));
          double* plane = acc.data() + (b.batch * C + (c * group + i) * group + j) * H * W;
          for (int64_t y = b.h0; y < b.h1; ++y) {
            for (int64_t x = b.w0; x < b.w1; ++x) plane[y * W + x] += g;
          }
        }
      }
    }
  }
  for (size_t k = 0; k < acc.size(); ++k) grad_input[k] = static_cast<float>(acc[k]);
}

}  // namespace npu::kernels

namespace npu::kernels {
namespace {

// One tap's sampling: the four corners' plane offsets (-1: outside), their bilinear weights
// and the fractional parts.
struct Tap {
  int64_t idx[4];
  float w[4];
  float fy, fx;
  bool inside;  // the position lies in (-1, H) x (-1, W)
};

Tap tapAt(float y, float x, int64_t H, int64_t W) {
  Tap t{};
  const float y0 = std::floor(y), x0 = std::floor(x);
  t.fy = y - y0;
  t.fx = x - x0;
  const int64_t iy = static_cast<int64_t>(y0), ix = static_cast<int64_t>(x0);
  const int64_t ys[4] = {iy, iy + 1, iy, iy + 1}, xs[4] = {ix, ix, ix + 1, ix + 1};
  // corners: (floor y, floor x), (ceil y, floor x), (floor y, ceil x), (ceil y, ceil x)
  t.w[0] = (1 - t.fy) * (1 - t.fx);
  t.w[1] = t.fy * (1 - t.fx);
  t.w[2] = (1 - t.fy) * t.fx;
  t.w[3] = t.fy * t.fx;
  for (int k = 0; k < 4; ++k) {
    const bool ok = ys[k] >= 0 && ys[k] < H && xs[k] >= 0 && xs[k] < W;
    t.idx[k] = ok ? ys[k] * W + xs[k] : -1;
  }
  t.inside = y > -1 && y < static_cast<float>(H) && x > -1 && x < static_cast<float>(W);
  return t;
}

template <class Fn>
void forEachTap(const DeformableGeometry& g, const float* offsets, Fn fn) {
  const int64_t K = g.KH * g.KW, plane = g.Ho * g.Wo;
  for (int64_t n = 0; n < g.N; ++n) {
    const float* off = offsets + n * 3 * g.groups * K * plane;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t ch = grp * K + kh * g.KW + kw;
          for (int64_t ho = 0; ho < g.Ho; ++ho) {
            for (int64_t wo = 0; wo < g.Wo; ++wo) {
              const int64_t p = ho * g.Wo + wo;
              const float dx = off[ch * plane + p];
              const float dy = off[(g.groups * K + ch) * plane + p];
              const float scale = g.modulated ? off[(2 * g.groups * K + ch) * plane + p] : 1.0f;
              const float y =
                  static_cast<float>(ho * g.stride_h - g.pad_top + kh * g.dilation_h) + dy;
              const float x =
                  static_cast<float>(wo * g.stride_w - g.pad_left + kw * g.dilation_w) + dx;
              const int64_t out_pos = (ho * g.KH + kh) * (g.Wo * g.KW) + wo * g.KW + kw;
              fn(n, grp, ch, p, out_pos, tapAt(y, x, g.H, g.W), scale);
            }
          }
        }
      }
    }
  }
}

}  // namespace

void deformable_offsets_forward(const DeformableGeometry& g, const float* x, const float* offsets,
                                float* out) {
  const int64_t cg = g.C / g.groups, in_plane = g.H * g.W;
  const int64_t out_plane = g.Ho * g.KH * g.Wo * g.KW;
  forEachTap(g, offsets, [&](int64_t n, int64_t grp, int64_t, int64_t, int64_t out_pos,
                             const Tap& t, float scale) {
    for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
      const float* src = x + (n * g.C + c) * in_plane;
      float v = 0;
      for (int k = 0; k < 4; ++k) {
        if (t.idx[k] >= 0) v += src[t.idx[k]] * t.w[k];
      }
      out[(n * g.C + c) * out_plane + out_pos] = v * scale;
    }
  });
}

void deformable_offsets_backward(const DeformableGeometry& g, const float* grad_out,
                                 const float* x, const float* offsets, float* grad_x,
                                 float* grad_offsets) {
  const int64_t cg = g.C / g.groups, in_plane = g.H * g.W;
  const int64_t out_plane = g.Ho * g.KH * g.Wo * g.KW;
  const int64_t K = g.KH * g.KW, plane = g.Ho * g.Wo;
  std::vector<double> gx(static_cast<size_t>(g.N * g.C * in_plane), 0.0);
  std::fill(grad_offsets, grad_offsets + g.N * 3 * g.groups * K * plane, 0.0f);
  forEachTap(g, offsets, [&](int64_t n, int64_t grp, int64_t ch, int64_t p, int64_t out_pos,
                             const Tap& t, float scale) {
    if (!t.inside) return;
    double d_dy = 0, d_dx = 0, d_scale = 0;
    for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
      const double gy = grad_out[(n * g.C + c) * out_plane + out_pos];
      const float* src = x + (n * g.C + c) * in_plane;
      double* dst = gx.data() + (n * g.C + c) * in_plane;
      double v[4];
      for (int k = 0; k < 4; ++k) {
        v[k] = t.idx[k] >= 0 ? src[t.idx[k]] : 0.0;
        if (t.idx[k] >= 0) dst[t.idx[k]] += gy * scale * t.w[k];
      }
      const double fy = t.fy, fx = t.fx;
      d_dy += gy * scale * ((v[1] - v[0]) * (1 - fx) + (v[3] - v[2]) * fx);
      d_dx += gy * scale * ((v[2] - v[0]) * (1 - fy) + (v[3] - v[1]) * fy);
      d_scale += gy * (v[0] * t.w[0] + v[1] * t.w[1] + v[2] * t.w[2] + v[3] * t.w[3]);
    }
    float* go = grad_offsets + n * 3 * g.groups * K * plane;
    go[ch * plane + p] = static_cast<float>(d_dx);
    go[(g.groups * K + ch) * plane + p] = static_cast<float>(d_dy);
    if (g.modulated) go[(2 * g.groups * K + ch) * plane + p] = static_cast<float>(d_scale);
  });
  for (size_t k = 0; k < gx.size(); ++k) grad_x[k] = static_cast<float>(gx[k]);
}

}  // namespace npu::kernels
