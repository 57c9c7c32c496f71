// torch_npu's detection / bounding-box operators (torch.ops.npu.*): their schemas, with torch_npu's
// names, defaults and output tuples, and the npu kernels of the loop operators (NMS variants,
// RoI Align, position-sensitive RoI pooling, rotated-box overlaps) on kernels/detection.cpp.
// The formula operators (npu_iou, npu_giou, box encode / decode, ...) are Python composites
// (torch_npu/_detection_ops.py), registered there as CompositeImplicitAutograd kernels.
//
// The kernels read contiguous float32 copies of their inputs (made on the stream, so they are
// ordered with the kernel) and write float32 outputs that are cast back to the input's dtype.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

#include "KernelBridge.h"
#include "NPUStream.h"
#include "npu/kernels/detection.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  // Composites (torch_npu/_detection_ops.py).
  m.def("npu_iou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor");
  m.def("npu_ptiou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor");
  m.def("npu_giou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=False, "
        "int mode=0) -> Tensor");
  m.def("npu_diou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=False, "
        "int mode=0) -> Tensor");
  m.def("npu_ciou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=True, "
        "int mode=0, bool atan_sub_flag=False) -> Tensor");
  m.def("npu_bounding_box_encode(Tensor anchor_box, Tensor ground_truth_box, float means0, "
        "float means1, float means2, float means3, float stds0, float stds1, float stds2, "
        "float stds3) -> Tensor");
  m.def("npu_bounding_box_decode(Tensor rois, Tensor deltas, float means0, float means1, "
        "float means2, float means3, float stds0, float stds1, float stds2, float stds3, "
        "int[1] max_shape, float wh_ratio_clip) -> Tensor");
  m.def("npu_rotated_box_encode(Tensor self, Tensor gt_bboxes, Tensor weight) -> Tensor");
  m.def("npu_rotated_box_decode(Tensor self, Tensor deltas, Tensor weight) -> Tensor");
  m.def("npu_anchor_response_flags(Tensor self, int[2] featmap_size, int[2] stride, "
        "int num_base_anchors) -> Tensor");
  m.def("npu_random_choice_with_mask(Tensor x, int count=256, int seed=0, int seed2=0) -> "
        "(Tensor, Tensor)");
  m.def("npu_yolo_boxes_encode(Tensor self, Tensor gt_bboxes, Tensor stride, "
        "bool performance_mode=False) -> Tensor");
  m.def("npu_grid_assign_positive(Tensor self, Tensor overlaps, Tensor box_responsible_flags, "
        "Tensor max_overlaps, Tensor argmax_overlaps, Tensor gt_max_overlaps, "
        "Tensor gt_argmax_overlaps, int num_gts, float pos_iou_thr, float min_pos_iou, "
        "bool gt_max_assign_all) -> Tensor");
  // Kernels below.
  m.def("npu_nms_v4(Tensor self, Tensor scores, Scalar max_output_size, Tensor iou_threshold, "
        "Tensor scores_threshold, bool pad_to_max_output_size=False) -> (Tensor, Tensor)");
  m.def("npu_nms_with_mask(Tensor input, Scalar iou_threshold) -> (Tensor, Tensor, Tensor)");
  m.def("npu_batch_nms(Tensor self, Tensor scores, float score_threshold, float iou_threshold, "
        "int max_size_per_class, int max_total_size, bool change_coordinate_frame=False, "
        "bool transpose_box=False) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("npu_nms_rotated(Tensor self, Tensor scores, float iou_threshold, "
        "float scores_threshold=0, int max_output_size=-1, int mode=0) -> (Tensor, Tensor)");
  m.def("npu_roi_align(Tensor self, Tensor rois, float spatial_scale, int pooled_height, "
        "int pooled_width, int sample_num, int roi_end_mode) -> Tensor");
  m.def("npu_roi_alignbk(Tensor self, Tensor rois, int[] xdiff_shape, int pooled_width, "
        "int pooled_height, float spatial_scale, int sample_num, int? roi_end_mode=None) -> "
        "Tensor");
  m.def("npu_ps_roi_pooling(Tensor self, Tensor rois, float spatial_scale, int group_size, "
        "int output_dim) -> Tensor");
  m.def("npu_ps_roi_pooling_backward(Tensor output_grad, Tensor rois, float spatial_scale, "
        "int group_size, int output_dim, SymInt[] input_size) -> Tensor");
  m.def("npu_rotated_overlaps(Tensor self, Tensor query_boxes, bool trans=False) -> Tensor");
  m.def("npu_deformable_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor? bias, "
        "int[2] kernel_size, int[] stride, int[] padding, int[] dilation=[1,1,1,1], "
        "int groups=1, int deformable_groups=1, bool modulated=True) -> (Tensor, Tensor)");
  m.def("npu_deformable_conv2dbk(Tensor input, Tensor grad_output, Tensor offset_out, "
        "Tensor weight, Tensor offset, int[2] kernel_size, int[] stride, int[] padding, "
        "int[] dilation=[1,1,1,1], int groups=1, int deformable_groups=1, bool modulated=True) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  // The sampling step of npu_deformable_conv2d (CANN's DeformableOffsets) and its gradient;
  // the convolution around it is PyTorch's (torch_npu/_detection_ops.py).
  m.def("_npu_deformable_offsets(Tensor x, Tensor offsets, int[2] kernel_size, int[] stride, "
        "int[] padding, int[] dilation, int deformable_groups, bool modulated) -> Tensor");
  m.def("_npu_deformable_offsets_backward(Tensor grad, Tensor x, Tensor offsets, "
        "int[2] kernel_size, int[] stride, int[] padding, int[] dilation, int deformable_groups, "
        "bool modulated) -> (Tensor, Tensor)");
  m.def("npu_rotated_iou(Tensor self, Tensor query_boxes, bool trans=False, int mode=0, "
        "bool is_cross=True, float v_threshold=0.0, float e_threshold=0.0) -> Tensor");
}

namespace torch_npu::native {
namespace {

// torch_npu's check of its own ops' tensors (and TensorIterator's message): all on one device.
void sameDevice(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  std::optional<c10::Device> common;
  for (const at::Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!common) {
      common = t->device();
    } else if (t->device() != *common) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two ",
                  "devices, ", *common, " and ", t->device(), "! (in ", op, ")");
    }
  }
}

// A contiguous float32 copy of a floating npu tensor, checked.
at::Tensor floatInput(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": ", name,
              " must be an npu tensor, got one on ", t.device());
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name,
              " must be float16, bfloat16 or float32, got ", t.scalar_type());
  return t.to(at::kFloat).contiguous();
}

const float* fptr(const at::Tensor& t) { return static_cast<const float*>(t.data_ptr()); }
float* fmut(at::Tensor& t) { return static_cast<float*>(t.data_ptr()); }

void checkShape(bool ok, const char* op, const char* name, const char* want,
                const at::Tensor& t) {
  TORCH_CHECK(ok, op, ": ", name, " must have shape ", want, ", got ", t.sizes());
}

// ---- NMS -----------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> npu_nms_v4(const at::Tensor& self, const at::Tensor& scores,
                                              const at::Scalar& max_output_size,
                                              const at::Tensor& iou_threshold,
                                              const at::Tensor& scores_threshold,
                                              bool pad_to_max_output_size) {
  const char* op = "npu_nms_v4";
  sameDevice(op, {&self, &scores});  // the thresholds may be CPU scalars
  at::Tensor boxes = floatInput(self, op, "boxes");
  at::Tensor sc = floatInput(scores, op, "scores");
  checkShape(boxes.dim() == 2 && boxes.size(1) == 4, op, "boxes", "[N, 4]", self);
  checkShape(sc.dim() == 1 && sc.size(0) == boxes.size(0), op, "scores", "[N] (N = boxes' rows)",
             scores);
  TORCH_CHECK(iou_threshold.numel() == 1 && scores_threshold.numel() == 1, op,
              ": iou_threshold and scores_threshold must be one-element tensors");
  const int64_t max_out = max_output_size.toLong();
  TORCH_CHECK(max_out >= 0, op, ": max_output_size must be >= 0, got ", max_out);
  const c10::DeviceGuard guard(self.device());
  at::Tensor iou_t =
      floatInput(iou_threshold.to(self.device()), op, "iou_threshold").reshape({1});
  at::Tensor sc_t =
      floatInput(scores_threshold.to(self.device()), op, "scores_threshold").reshape({1});
  at::Tensor selected = at::empty({max_out}, self.options().dtype(at::kInt));
  at::Tensor valid = at::empty({}, self.options().dtype(at::kInt));
  const int64_t n = boxes.size(0);
  launchTask(streamOf(self), op,
             [b = fptr(boxes), s = fptr(sc), it = fptr(iou_t), st = fptr(sc_t), n, max_out,
              sel = static_cast<int32_t*>(selected.data_ptr()),
              v = static_cast<int32_t*>(valid.data_ptr())] {
               std::vector<int64_t> keep(static_cast<size_t>(std::max<int64_t>(n, 1)));
               const int64_t k = nk::nms_boxes(b, s, n, *it, *st, max_out, 0.0f, keep.data());
               for (int64_t i = 0; i < max_out; ++i) {
                 sel[i] = i < k ? static_cast<int32_t>(keep[i]) : 0;
               }
               *v = static_cast<int32_t>(k);
             });
  (void)pad_to_max_output_size;  // the output always has max_output_size entries
  return {selected, valid};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_nms_with_mask(const at::Tensor& input,
                                                                  const at::Scalar& iou_threshold) {
  const char* op = "npu_nms_with_mask";
  at::Tensor in = floatInput(input, op, "input");
  checkShape(in.dim() == 2 && in.size(1) == 5, op, "input", "[N, 5] (x1, y1, x2, y2, score)",
             input);
  const c10::DeviceGuard guard(input.device());
  const int64_t n = in.size(0);
  at::Tensor boxes = at::empty({n, 5}, in.options());
  at::Tensor idx = at::empty({n}, input.options().dtype(at::kInt));
  at::Tensor mask = at::empty({n}, input.options().dtype(at::kByte));
  const float thr = static_cast<float>(iou_threshold.toDouble());
  if (n > 0) {
    launchTask(streamOf(input), op,
               [src = fptr(in), dst = fmut(boxes), ix = static_cast<int32_t*>(idx.data_ptr()),
                mk = static_cast<uint8_t*>(mask.data_ptr()), n, thr] {
                 // Sorted by descending score; the mask says which of the sorted boxes survive.
                 std::vector<float> b(static_cast<size_t>(n) * 4), s(static_cast<size_t>(n));
                 std::vector<int64_t> order(static_cast<size_t>(n));
                 for (int64_t i = 0; i < n; ++i) order[i] = i;
                 std::stable_sort(order.begin(), order.end(), [src](int64_t a, int64_t c) {
                   return src[a * 5 + 4] > src[c * 5 + 4];
                 });
                 for (int64_t i = 0; i < n; ++i) {
                   const float* row = src + order[i] * 5;
                   std::copy(row, row + 5, dst + i * 5);
                   std::copy(row, row + 4, b.data() + i * 4);
                   s[i] = row[4];
                   ix[i] = static_cast<int32_t>(order[i]);
                   mk[i] = 0;
                 }
                 std::vector<int64_t> keep(static_cast<size_t>(n));
                 const float lowest = -std::numeric_limits<float>::infinity();
                 const int64_t k = nk::nms_boxes(b.data(), s.data(), n, thr, lowest, -1, 0.0f,
                                                 keep.data());
                 for (int64_t i = 0; i < k; ++i) mk[keep[i]] = 1;
               });
  }
  return {boxes.to(input.scalar_type()), idx, mask};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_batch_nms(
    const at::Tensor& self, const at::Tensor& scores, double score_threshold,
    double iou_threshold, int64_t max_size_per_class, int64_t max_total_size,
    bool change_coordinate_frame, bool transpose_box) {
  const char* op = "npu_batch_nms";
  sameDevice(op, {&self, &scores});
  if (change_coordinate_frame || transpose_box) {
    throw c10::NotImplementedError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "npu_batch_nms: change_coordinate_frame=True and transpose_box=True are not built in "
        "SimNPU; pass boxes as [B, N, q, 4] (x1, y1, x2, y2) with both False");
  }
  at::Tensor boxes = floatInput(self, op, "boxes");
  at::Tensor sc = floatInput(scores, op, "scores");
  checkShape(boxes.dim() == 4 && boxes.size(3) == 4, op, "boxes", "[B, N, q, 4]", self);
  checkShape(sc.dim() == 3 && sc.size(0) == boxes.size(0) && sc.size(1) == boxes.size(1), op,
             "scores", "[B, N, C] (B, N as boxes)", scores);
  const int64_t B = boxes.size(0), N = boxes.size(1), q = boxes.size(2), C = sc.size(2);
  TORCH_CHECK(q == 1 || q == C, op, ": boxes' third dimension q must be 1 or the class count ",
              C, ", got ", q);
  TORCH_CHECK(max_size_per_class >= 0 && max_total_size >= 0, op,
              ": max_size_per_class and max_total_size must be >= 0");
  const c10::DeviceGuard guard(self.device());
  const int64_t T = max_total_size;
  at::Tensor ob = at::empty({B, T, 4}, boxes.options());
  at::Tensor os = at::empty({B, T}, boxes.options());
  at::Tensor oc = at::empty({B, T}, boxes.options());
  at::Tensor on = at::empty({B}, self.options().dtype(at::kInt));
  launchTask(streamOf(self), op,
             [bx = fptr(boxes), s = fptr(sc), b_out = fmut(ob), s_out = fmut(os), c_out = fmut(oc),
              n_out = static_cast<int32_t*>(on.data_ptr()), B, N, q, C, T, max_size_per_class,
              st = static_cast<float>(score_threshold), it = static_cast<float>(iou_threshold)] {
               std::vector<float> cb(static_cast<size_t>(N) * 4), cs(static_cast<size_t>(N));
               std::vector<int64_t> keep(static_cast<size_t>(std::max<int64_t>(N, 1)));
               struct Det {
                 float score;
                 int64_t cls, box;
               };
               for (int64_t b = 0; b < B; ++b) {
                 std::vector<Det> dets;
                 for (int64_t c = 0; c < C; ++c) {
                   const int64_t qc = q == 1 ? 0 : c;
                   for (int64_t i = 0; i < N; ++i) {
                     std::copy_n(bx + ((b * N + i) * q + qc) * 4, 4, cb.data() + i * 4);
                     cs[i] = s[(b * N + i) * C + c];
                   }
                   const int64_t k = nk::nms_boxes(cb.data(), cs.data(), N, it, st,
                                                   max_size_per_class, 0.0f, keep.data());
                   for (int64_t j = 0; j < k; ++j) {
                     dets.push_back({cs[keep[j]], c, ((b * N + keep[j]) * q + qc) * 4});
                   }
                 }
                 std::stable_sort(dets.begin(), dets.end(),
                                  [](const Det& x, const Det& y) { return x.score > y.score; });
                 const int64_t k = std::min<int64_t>(T, static_cast<int64_t>(dets.size()));
                 for (int64_t j = 0; j < T; ++j) {
                   float* ob_row = b_out + (b * T + j) * 4;
                   if (j < k) {
                     std::copy_n(bx + dets[j].box, 4, ob_row);
                     s_out[b * T + j] = dets[j].score;
                     c_out[b * T + j] = static_cast<float>(dets[j].cls);
                   } else {
                     std::fill(ob_row, ob_row + 4, 0.0f);
                     s_out[b * T + j] = 0.0f;
                     c_out[b * T + j] = 0.0f;
                   }
                 }
                 n_out[b] = static_cast<int32_t>(k);
               }
             });
  const auto dt = self.scalar_type();
  return {ob.to(dt), os.to(dt), oc.to(dt), on};
}

std::tuple<at::Tensor, at::Tensor> npu_nms_rotated(const at::Tensor& self,
                                                   const at::Tensor& scores,
                                                   double iou_threshold, double scores_threshold,
                                                   int64_t max_output_size, int64_t mode) {
  const char* op = "npu_nms_rotated";
  sameDevice(op, {&self, &scores});
  TORCH_CHECK(mode == 0 || mode == 1, op, ": mode must be 0 (x, y, w, h, angle) or 1 ",
              "(x1, y1, x2, y2, angle), got ", mode);
  at::Tensor boxes = floatInput(self, op, "boxes");
  at::Tensor sc = floatInput(scores, op, "scores");
  checkShape(boxes.dim() == 2 && boxes.size(1) == 5, op, "boxes", "[N, 5]", self);
  checkShape(sc.dim() == 1 && sc.size(0) == boxes.size(0), op, "scores", "[N] (N = boxes' rows)",
             scores);
  const c10::DeviceGuard guard(self.device());
  const int64_t n = boxes.size(0);
  // keep[0..n) then the count; the count decides the output's length, so it is read back.
  at::Tensor keep = at::empty({n + 1}, self.options().dtype(at::kLong));
  launchTask(streamOf(self), op,
             [b = fptr(boxes), s = fptr(sc), n, k = static_cast<int64_t*>(keep.data_ptr()),
              it = static_cast<float>(iou_threshold), st = static_cast<float>(scores_threshold),
              max_output_size, mode = static_cast<int>(mode)] {
               // scores_threshold keeps scores at or above it ("score < threshold" is dropped).
               const float below = std::nextafter(st, -std::numeric_limits<float>::infinity());
               k[n] = nk::nms_rotated_boxes(b, s, n, it, below, max_output_size, mode, k);
             });
  // Clamped: under shadow execution (NPU_SIM_SHADOW=1) the kernel does not run.
  const int64_t count = std::clamp<int64_t>(keep[n].item<int64_t>(), 0, n);
  at::Tensor num = at::empty({1}, self.options().dtype(at::kInt)).fill_(count);
  return {keep.narrow(0, 0, count).clone(), num};
}

// ---- rotated overlaps ----------------------------------------------------------------------

at::Tensor rotatedPairs(const at::Tensor& self, const at::Tensor& query, bool trans, int mode,
                        bool overlap_only, const char* op) {
  sameDevice(op, {&self, &query});
  at::Tensor a = floatInput(self, op, "self");
  at::Tensor b = floatInput(query, op, "query_boxes");
  checkShape(a.dim() == 3 && a.size(2) == 5, op, "self", "[B, N, 5]", self);
  checkShape(b.dim() == 3 && b.size(2) == 5 && b.size(0) == a.size(0), op, "query_boxes",
             "[B, K, 5] (B as self)", query);
  TORCH_CHECK(mode == 0 || mode == 1, op, ": mode must be 0 (IoU) or 1 (IoF), got ", mode);
  const c10::DeviceGuard guard(self.device());
  const int64_t B = a.size(0), N = a.size(1), K = b.size(1);
  at::Tensor out = at::empty({B, N, K}, a.options());
  launchTask(streamOf(self), op,
             [pa = fptr(a), pb = fptr(b), o = fmut(out), B, N, K, trans, mode, overlap_only] {
               auto rect = [trans](const float* p, double r[5]) {
                 if (trans) {
                   r[0] = (p[0] + p[2]) * 0.5;
                   r[1] = (p[1] + p[3]) * 0.5;
                   r[2] = p[2] - p[0];
                   r[3] = p[3] - p[1];
                   r[4] = -static_cast<double>(p[4]);
                 } else {
                   for (int i = 0; i < 5; ++i) r[i] = p[i];
                 }
               };
               for (int64_t bb = 0; bb < B; ++bb) {
                 for (int64_t i = 0; i < N; ++i) {
                   double ra[5];
                   rect(pa + (bb * N + i) * 5, ra);
                   for (int64_t j = 0; j < K; ++j) {
                     double rb[5], area_a = 0, area_b = 0;
                     rect(pb + (bb * K + j) * 5, rb);
                     const double inter = nk::rotated_intersection(ra, rb, &area_a, &area_b);
                     double v = inter;
                     if (!overlap_only) {
                       const double den = mode == 1 ? area_a : area_a + area_b - inter;
                       v = den > 0 ? inter / den : 0.0;
                     }
                     o[(bb * N + i) * K + j] = static_cast<float>(v);
                   }
                 }
               }
             });
  return out.to(self.scalar_type());
}

at::Tensor npu_rotated_overlaps(const at::Tensor& self, const at::Tensor& query_boxes,
                                bool trans) {
  return rotatedPairs(self, query_boxes, trans, 0, true, "npu_rotated_overlaps");
}

at::Tensor npu_rotated_iou(const at::Tensor& self, const at::Tensor& query_boxes, bool trans,
                           int64_t mode, bool is_cross, double v_threshold, double e_threshold) {
  (void)v_threshold;
  (void)e_threshold;
  at::Tensor out = rotatedPairs(self, query_boxes, trans, static_cast<int>(mode), false,
                                "npu_rotated_iou");
  if (is_cross) return out;
  TORCH_CHECK(self.size(1) == query_boxes.size(1), "npu_rotated_iou: is_cross=False pairs box i ",
              "with query box i, so self and query_boxes need the same count, got ",
              self.size(1), " and ", query_boxes.size(1));
  return out.diagonal(0, 1, 2).contiguous();
}

// ---- RoI Align / PS RoI pooling ------------------------------------------------------------

at::Tensor checkRois(const at::Tensor& rois, const char* op) {
  at::Tensor r = floatInput(rois, op, "rois");
  checkShape(r.dim() == 2 && r.size(1) == 5, op, "rois", "[R, 5] (batch, x1, y1, x2, y2)", rois);
  return r;
}

at::Tensor npu_roi_align(const at::Tensor& self, const at::Tensor& rois, double spatial_scale,
                         int64_t pooled_height, int64_t pooled_width, int64_t sample_num,
                         int64_t roi_end_mode) {
  const char* op = "npu_roi_align";
  sameDevice(op, {&self, &rois});
  at::Tensor x = floatInput(self, op, "self");
  checkShape(x.dim() == 4, op, "self", "[N, C, H, W]", self);
  at::Tensor r = checkRois(rois, op);
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, op,
              ": pooled_height and pooled_width must be positive");
  TORCH_CHECK(roi_end_mode == 0 || roi_end_mode == 1, op, ": roi_end_mode must be 0 or 1, got ",
              roi_end_mode);
  const c10::DeviceGuard guard(self.device());
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), R = r.size(0);
  at::Tensor out = at::empty({R, C, pooled_height, pooled_width}, x.options());
  if (out.numel() > 0) {
    launchTask(streamOf(self), op,
               [in = fptr(x), rr = fptr(r), o = fmut(out), N, C, H, W, R,
                s = static_cast<float>(spatial_scale), pooled_height, pooled_width, sample_num,
                mode = static_cast<int>(roi_end_mode)] {
                 nk::roi_align_forward(in, N, C, H, W, rr, R, s, pooled_height, pooled_width,
                                       sample_num, mode, o);
               });
  }
  return out.to(self.scalar_type());
}

at::Tensor npu_roi_alignbk(const at::Tensor& self, const at::Tensor& rois,
                           at::IntArrayRef xdiff_shape, int64_t pooled_width,
                           int64_t pooled_height, double spatial_scale, int64_t sample_num,
                           std::optional<int64_t> roi_end_mode) {
  const char* op = "npu_roi_alignbk";
  sameDevice(op, {&self, &rois});
  at::Tensor g = floatInput(self, op, "grad (self)");
  at::Tensor r = checkRois(rois, op);
  TORCH_CHECK(xdiff_shape.size() == 4, op, ": xdiff_shape must be [N, C, H, W], got ",
              xdiff_shape);
  const int64_t N = xdiff_shape[0], C = xdiff_shape[1], H = xdiff_shape[2], W = xdiff_shape[3];
  const int64_t R = r.size(0);
  checkShape(g.dim() == 4 && g.size(0) == R && g.size(1) == C && g.size(2) == pooled_height &&
                 g.size(3) == pooled_width,
             op, "grad (self)", "[R, C, pooled_height, pooled_width]", self);
  const int64_t mode = roi_end_mode.value_or(1);
  TORCH_CHECK(mode == 0 || mode == 1, op, ": roi_end_mode must be 0 or 1, got ", mode);
  const c10::DeviceGuard guard(self.device());
  at::Tensor gi = at::empty({N, C, H, W}, g.options());
  if (gi.numel() > 0) {
    launchTask(streamOf(self), op,
               [go = fptr(g), rr = fptr(r), o = fmut(gi), N, C, H, W, R,
                s = static_cast<float>(spatial_scale), pooled_height, pooled_width, sample_num,
                m = static_cast<int>(mode)] {
                 nk::roi_align_backward(go, rr, R, N, C, H, W, s, pooled_height, pooled_width,
                                        sample_num, m, o);
               });
  }
  return gi.to(self.scalar_type());
}

// rois [B, 5, R'] as torch_npu takes them: R = B * R' RoIs, each a column.
at::Tensor psRois(const at::Tensor& rois, const char* op) {
  at::Tensor r = floatInput(rois, op, "rois");
  checkShape(r.dim() == 3 && r.size(1) == 5, op, "rois", "[B, 5, R] (batch, x1, y1, x2, y2)",
             rois);
  return r.transpose(1, 2).reshape({-1, 5}).contiguous();
}

at::Tensor npu_ps_roi_pooling(const at::Tensor& self, const at::Tensor& rois,
                              double spatial_scale, int64_t group_size, int64_t output_dim) {
  const char* op = "npu_ps_roi_pooling";
  sameDevice(op, {&self, &rois});
  at::Tensor x = floatInput(self, op, "self");
  checkShape(x.dim() == 4, op, "self", "[N, C, H, W]", self);
  TORCH_CHECK(group_size > 0 && output_dim > 0, op, ": group_size and output_dim must be > 0");
  TORCH_CHECK(x.size(1) == output_dim * group_size * group_size, op, ": self needs output_dim * ",
              "group_size^2 = ", output_dim * group_size * group_size, " channels, got ",
              x.size(1));
  at::Tensor r = psRois(rois, op);
  const c10::DeviceGuard guard(self.device());
  const int64_t N = x.size(0), H = x.size(2), W = x.size(3), R = r.size(0);
  at::Tensor out = at::empty({R, output_dim, group_size, group_size}, x.options());
  if (out.numel() > 0) {
    launchTask(streamOf(self), op,
               [in = fptr(x), rr = fptr(r), o = fmut(out), N, H, W, R,
                s = static_cast<float>(spatial_scale), group_size, output_dim] {
                 nk::ps_roi_pooling_forward(in, N, H, W, rr, R, s, group_size, output_dim, o);
               });
  }
  return out.to(self.scalar_type());
}

at::Tensor npu_ps_roi_pooling_backward(const at::Tensor& output_grad, const at::Tensor& rois,
                                       double spatial_scale, int64_t group_size,
                                       int64_t output_dim, c10::SymIntArrayRef input_size) {
  const char* op = "npu_ps_roi_pooling_backward";
  sameDevice(op, {&output_grad, &rois});
  at::Tensor g = floatInput(output_grad, op, "output_grad");
  at::Tensor r = psRois(rois, op);
  TORCH_CHECK(input_size.size() == 2 || input_size.size() == 4, op,
              ": input_size must be [H, W] (or the input's whole shape [N, C, H, W]), got ",
              input_size.size(), " values");
  const int64_t R = r.size(0);
  checkShape(g.dim() == 4 && g.size(0) == R && g.size(1) == output_dim &&
                 g.size(2) == group_size && g.size(3) == group_size,
             op, "output_grad", "[R, output_dim, group_size, group_size]", output_grad);
  const size_t k = input_size.size();
  const int64_t H = input_size[k - 2].expect_int(), W = input_size[k - 1].expect_int();
  // [H, W] as torch_npu: the input's batch is rois' first dimension. Autograd passes the
  // input's whole shape, whose batch may differ.
  const int64_t N = k == 4 ? input_size[0].expect_int() : rois.size(0);
  const int64_t C = output_dim * group_size * group_size;
  TORCH_CHECK(k == 2 || input_size[1].expect_int() == C, op, ": input_size's channels must be ",
              "output_dim * group_size^2 = ", C, ", got ", input_size[1].expect_int());
  const c10::DeviceGuard guard(output_grad.device());
  at::Tensor gi = at::empty({N, C, H, W}, g.options());
  if (gi.numel() > 0) {
    launchTask(streamOf(output_grad), op,
               [go = fptr(g), rr = fptr(r), o = fmut(gi), N, H, W, R,
                s = static_cast<float>(spatial_scale), group_size, output_dim] {
                 nk::ps_roi_pooling_backward(go, rr, R, N, H, W, s, group_size, output_dim, o);
               });
  }
  return gi.to(output_grad.scalar_type());
}

// ---- deformable offsets --------------------------------------------------------------------

// stride / dilation as torch_npu takes them: 4 values in NCHW order ([1, 1, sh, sw]) or 2
// ([sh, sw]); padding 4 values (top, bottom, left, right) or 2 (h, w).
std::pair<int64_t, int64_t> hw(at::IntArrayRef v, const char* op, const char* name) {
  TORCH_CHECK(v.size() == 2 || v.size() == 4, op, ": ", name, " must have 2 values (h, w) or 4 ",
              "(NCHW order: 1, 1, h, w), got ", v);
  return v.size() == 2 ? std::pair{v[0], v[1]} : std::pair{v[2], v[3]};
}

nk::DeformableGeometry deformableGeometry(const at::Tensor& x, const at::Tensor& offsets,
                                          at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation,
                                          int64_t groups, bool modulated, const char* op) {
  checkShape(x.dim() == 4, op, "input", "[N, C, H, W]", x);
  checkShape(offsets.dim() == 4 && offsets.size(0) == x.size(0), op, "offset",
             "[N, 3 * deformable_groups * KH * KW, Ho, Wo]", offsets);
  TORCH_CHECK(kernel_size.size() == 2 && kernel_size[0] > 0 && kernel_size[1] > 0, op,
              ": kernel_size must be 2 positive values, got ", kernel_size);
  TORCH_CHECK(groups > 0 && x.size(1) % groups == 0, op, ": deformable_groups (", groups,
              ") must be positive and divide the input's channels (", x.size(1), ")");
  const int64_t K = kernel_size[0] * kernel_size[1];
  TORCH_CHECK(offsets.size(1) == 3 * groups * K, op, ": offset needs 3 * deformable_groups * ",
              "KH * KW = ", 3 * groups * K, " channels (x offsets, y offsets, scales), got ",
              offsets.size(1));
  TORCH_CHECK(padding.size() == 2 || padding.size() == 4, op, ": padding must have 2 values ",
              "(h, w) or 4 (top, bottom, left, right), got ", padding);
  const auto [sh, sw] = hw(stride, op, "stride");
  const auto [dh, dw] = hw(dilation, op, "dilation");
  nk::DeformableGeometry g{};
  g.N = x.size(0);
  g.C = x.size(1);
  g.H = x.size(2);
  g.W = x.size(3);
  g.Ho = offsets.size(2);
  g.Wo = offsets.size(3);
  g.KH = kernel_size[0];
  g.KW = kernel_size[1];
  g.stride_h = sh;
  g.stride_w = sw;
  g.pad_top = padding[0];
  g.pad_left = padding.size() == 4 ? padding[2] : padding[1];
  g.dilation_h = dh;
  g.dilation_w = dw;
  g.groups = groups;
  g.modulated = modulated;
  return g;
}

at::Tensor npu_deformable_offsets(const at::Tensor& x, const at::Tensor& offsets,
                                  at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t deformable_groups, bool modulated) {
  const char* op = "npu_deformable_conv2d";
  sameDevice(op, {&x, &offsets});
  at::Tensor xf = floatInput(x, op, "input");
  at::Tensor of = floatInput(offsets, op, "offset");
  const nk::DeformableGeometry g = deformableGeometry(xf, of, kernel_size, stride, padding,
                                                      dilation, deformable_groups, modulated, op);
  const c10::DeviceGuard guard(x.device());
  at::Tensor out = at::empty({g.N, g.C, g.Ho * g.KH, g.Wo * g.KW}, xf.options());
  if (out.numel() > 0) {
    launchTask(streamOf(x), op, [g, px = fptr(xf), po = fptr(of), o = fmut(out)] {
      nk::deformable_offsets_forward(g, px, po, o);
    });
  }
  return out.to(x.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> npu_deformable_offsets_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& offsets,
    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, int64_t deformable_groups, bool modulated) {
  const char* op = "npu_deformable_conv2dbk";
  sameDevice(op, {&grad, &x, &offsets});
  at::Tensor gf = floatInput(grad, op, "grad");
  at::Tensor xf = floatInput(x, op, "input");
  at::Tensor of = floatInput(offsets, op, "offset");
  const nk::DeformableGeometry g = deformableGeometry(xf, of, kernel_size, stride, padding,
                                                      dilation, deformable_groups, modulated, op);
  checkShape(gf.dim() == 4 && gf.size(0) == g.N && gf.size(1) == g.C &&
                 gf.size(2) == g.Ho * g.KH && gf.size(3) == g.Wo * g.KW,
             op, "the sampled input's gradient", "[N, C, Ho * KH, Wo * KW]", grad);
  const c10::DeviceGuard guard(x.device());
  at::Tensor gx = at::empty(xf.sizes(), xf.options());
  at::Tensor go = at::empty(of.sizes(), of.options());
  if (gf.numel() > 0 && gx.numel() > 0) {
    launchTask(streamOf(x), op,
               [g, pg = fptr(gf), px = fptr(xf), po = fptr(of), ox = fmut(gx), oo = fmut(go)] {
                 nk::deformable_offsets_backward(g, pg, px, po, ox, oo);
               });
  } else {
    gx.zero_();
    go.zero_();
  }
  return {gx.to(x.scalar_type()), go.to(offsets.scalar_type())};
}

}  // namespace

// Registered directly (not NPU_IMPL): these ops check their devices themselves, with the
// message torch_npu's ops give.
TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  m.impl("npu_nms_v4", TORCH_FN(npu_nms_v4));
  m.impl("npu_nms_with_mask", TORCH_FN(npu_nms_with_mask));
  m.impl("npu_batch_nms", TORCH_FN(npu_batch_nms));
  m.impl("npu_nms_rotated", TORCH_FN(npu_nms_rotated));
  m.impl("npu_rotated_overlaps", TORCH_FN(npu_rotated_overlaps));
  m.impl("npu_rotated_iou", TORCH_FN(npu_rotated_iou));
  m.impl("npu_roi_align", TORCH_FN(npu_roi_align));
  m.impl("npu_roi_alignbk", TORCH_FN(npu_roi_alignbk));
  m.impl("npu_ps_roi_pooling", TORCH_FN(npu_ps_roi_pooling));
  m.impl("npu_ps_roi_pooling_backward", TORCH_FN(npu_ps_roi_pooling_backward));
  m.impl("_npu_deformable_offsets", TORCH_FN(npu_deformable_offsets));
  m.impl("_npu_deformable_offsets_backward", TORCH_FN(npu_deformable_offsets_backward));
}

}  // namespace torch_npu::native
