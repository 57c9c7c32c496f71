// Detection kernels: greedy non-maximum suppression (axis-aligned and rotated boxes), the
// intersection of two rotated rectangles, RoI Align and position-sensitive RoI pooling, forward
// and backward.
//
// Unlike the elementwise kernels these take contiguous float32 buffers (the adapter converts
// other dtypes and layouts first): each box, RoI or output element is a short serial loop over
// a few numbers, so descriptors buy nothing here. Pointers are row-major as the shapes say.
#pragma once

#include <cstdint>

namespace npu::kernels {

// Greedy NMS over `n` boxes [n, 4] (two opposite corners; either order) with `scores` [n]:
// boxes are visited by descending score (ties: lower index first); a box whose score is not
// above `score_threshold` is dropped; a box is kept when its IoU with every kept box is at
// most `iou_threshold`. Stops after `max_out` kept boxes (max_out < 0: no limit). The kept
// original indices go to `keep` (room for min(n, max_out)) in the order kept; returns their
// count. `offset` is added to widths and heights (1 for the legacy pixel convention, else 0).
int64_t nms_boxes(const float* boxes, const float* scores, int64_t n, float iou_threshold,
                  float score_threshold, int64_t max_out, float offset, int64_t* keep);

// The same over rotated boxes [n, 5]: mode 0 (cx, cy, w, h, angle in degrees), mode 1
// (x1, y1, x2, y2, angle in degrees, counter-clockwise: the rectangle's angle is -angle).
int64_t nms_rotated_boxes(const float* boxes, const float* scores, int64_t n,
                          float iou_threshold, float score_threshold, int64_t max_out, int mode,
                          int64_t* keep);

// The area of the intersection of two rotated rectangles given as (cx, cy, w, h, angle in
// degrees); area_a / area_b receive w * h of each. Computed in double.
double rotated_intersection(const double a[5], const double b[5], double* area_a,
                            double* area_b);

// RoI Align. input [N, C, H, W]; rois [R, 5] (batch index, x1, y1, x2, y2 in input-image
// coordinates, scaled by spatial_scale); out [R, C, ph, pw]: the mean of bilinear samples on a
// grid of sample_num x sample_num points per bin (sample_num <= 0: ceil(roi size / bins)).
// roi_end_mode 1 adds one pixel to the end coordinates before scaling. A RoI whose batch index
// is outside [0, N) gives zeros.
void roi_align_forward(const float* input, int64_t N, int64_t C, int64_t H, int64_t W,
                       const float* rois, int64_t R, float spatial_scale, int64_t ph,
                       int64_t pw, int64_t sample_num, int roi_end_mode, float* out);
// grad_input [N, C, H, W] is overwritten with the sum of each sample's bilinear weights times
// its bin's gradient / sample count.
void roi_align_backward(const float* grad_out, const float* rois, int64_t R, int64_t N,
                        int64_t C, int64_t H, int64_t W, float spatial_scale, int64_t ph,
                        int64_t pw, int64_t sample_num, int roi_end_mode, float* grad_input);

// Position-sensitive RoI pooling (R-FCN). input [N, output_dim * group^2, H, W]; rois [R, 5]
// (batch index, x1, y1, x2, y2); out [R, output_dim, group, group]: bin (i, j) of channel c is
// the mean of input channel (c * group + i) * group + j over the bin's pixels (0 when empty).
void ps_roi_pooling_forward(const float* input, int64_t N, int64_t H, int64_t W,
                            const float* rois, int64_t R, float spatial_scale, int64_t group,
                            int64_t output_dim, float* out);
// grad_input [N, output_dim * group^2, H, W], overwritten.
void ps_roi_pooling_backward(const float* grad_out, const float* rois, int64_t R, int64_t N,
                             int64_t H, int64_t W, float spatial_scale, int64_t group,
                             int64_t output_dim, float* grad_input);

}  // namespace npu::kernels

namespace npu::kernels {

// The sampling step of a deformable convolution (CANN's DeformableOffsets). x [N, C, H, W];
// offsets [N, 3 * G * KH * KW, Ho, Wo], channel (part * G + g) * KH * KW + kh * KW + kw with
// part 0 the x (width) offset, 1 the y offset, 2 the modulation scale; G deformable groups of
// C / G channels. Tap (kh, kw) of output position (ho, wo) samples group g's channels at
//   y = ho * stride_h - pad_top + kh * dilation_h + dy,  x = wo * stride_w - pad_left + ... + dx
// bilinearly (corners outside the image read 0), times the scale when `modulated`.
// out [N, C, Ho * KH, Wo * KW]: tap (kh, kw) of (ho, wo) at row ho * KH + kh, column wo * KW + kw.
struct DeformableGeometry {
  int64_t N, C, H, W, Ho, Wo, KH, KW, stride_h, stride_w, pad_top, pad_left, dilation_h,
      dilation_w, groups;
  bool modulated;
};
void deformable_offsets_forward(const DeformableGeometry& g, const float* x, const float* offsets,
                                float* out);
// grad_out [N, C, Ho * KH, Wo * KW] -> grad_x [N, C, H, W] and grad_offsets (offsets' shape),
// both overwritten. The offset gradients are the bilinear weights' derivatives (the floor is
// held fixed); a tap whose position is outside (-1, H) x (-1, W) gets none.
void deformable_offsets_backward(const DeformableGeometry& g, const float* grad_out,
                                 const float* x, const float* offsets, float* grad_x,
                                 float* grad_offsets);

}  // namespace npu::kernels
