"""torch_npu's detection / bounding-box operators, with torch_npu's signatures, defaults and output
dtypes.

The formula operators (npu_iou, npu_giou, npu_diou, npu_ciou, the box encoders / decoders, ...)
are composites of PyTorch ops (so they have autograd where torch_npu has a backward); the loop
operators (NMS variants, RoI Align, PS RoI pooling, rotated-box overlaps) are C++ kernels
(adapter/ops/DetectionLibrary.cpp on kernels/detection.cpp), with autograd attached here.
All are also ``torch.ops.npu.<name>``; the schemas are in DetectionLibrary.cpp.

Where the card's result differs from the textbook formula, the difference is kept and said
(npu_iou's areas carry a 0.01 margin, npu_bounding_box_encode rounds through float16).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = [
    "npu_anchor_response_flags", "npu_batch_nms", "npu_bounding_box_decode",
    "npu_bounding_box_encode", "npu_ciou", "npu_conv2d", "npu_conv2d_backward",
    "npu_deformable_conv2d", "npu_deformable_conv2dbk", "npu_diou", "npu_giou",
    "npu_grid_assign_positive",
    "npu_iou", "npu_nms_rotated",
    "npu_nms_v4", "npu_nms_with_mask", "npu_ps_roi_pooling", "npu_ptiou",
    "npu_random_choice_with_mask", "npu_roi_align", "npu_roi_alignbk", "npu_rotated_box_decode",
    "npu_rotated_box_encode", "npu_rotated_iou", "npu_rotated_overlaps", "npu_yolo_boxes_encode",
]


def _float_tensor(x, op: str, arg: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"torch_npu.{op}: {arg} must be a Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"torch_npu.{op}: {arg} must be float16 or float32, got {x.dtype}")
    return x


def _check_mode(mode: int, op: str) -> None:
    if mode not in (0, 1):
        raise ValueError(f"torch_npu.{op}: mode must be 0 (IoU) or 1 (IoF), got {mode}")


# ---- IoU family ------------------------------------------------------------------------------

def _pt_iou(bboxes: torch.Tensor, gtboxes: torch.Tensor, mode: int, op: str) -> torch.Tensor:
    """[M, N] IoU (mode 0) or IoF (mode 1, the overlap over the gt box's area) of N boxes and M gt
    boxes, each [x1, y1, x2, y2]. As the card computes it, each box's area is
    (w + 0.01) * (h + 0.01) while the overlap has no margin: identical boxes give slightly
    under 1, and no area is ever zero."""
    _float_tensor(bboxes, op, "bboxes")
    _float_tensor(gtboxes, op, "gtboxes")
    _check_mode(mode, op)
    for name, t in (("bboxes", bboxes), ("gtboxes", gtboxes)):
        if t.dim() != 2 or t.shape[1] != 4:
            raise ValueError(f"torch_npu.{op}: {name} must have shape [n, 4] (x1, y1, x2, y2), "
                             f"got {list(t.shape)}")
    dtype = bboxes.dtype
    b = bboxes.float()
    g = gtboxes.float()
    eps = 0.01
    area_b = (b[:, 2] - b[:, 0] + eps) * (b[:, 3] - b[:, 1] + eps)          # [N]
    area_g = (g[:, 2] - g[:, 0] + eps) * (g[:, 3] - g[:, 1] + eps)          # [M]
    iw = (torch.minimum(g[:, None, 2], b[None, :, 2]) -
          torch.maximum(g[:, None, 0], b[None, :, 0])).clamp(min=0)         # [M, N]
    ih = (torch.minimum(g[:, None, 3], b[None, :, 3]) -
          torch.maximum(g[:, None, 1], b[None, :, 1])).clamp(min=0)
    inter = iw * ih
    if mode == 1:
        out = inter / area_g[:, None]
    else:
        out = inter / (area_g[:, None] + area_b[None, :] - inter)
    return out.to(dtype)


def npu_iou(bboxes: torch.Tensor, gtboxes: torch.Tensor, mode: int = 0) -> torch.Tensor:
    """IoU / IoF of bboxes [N, 4] against gtboxes [M, 4]: [M, N] (see _pt_iou)."""
    return _pt_iou(bboxes, gtboxes, mode, "npu_iou")


def npu_ptiou(bboxes: torch.Tensor, gtboxes: torch.Tensor, mode: int = 0) -> torch.Tensor:
    """npu_iou's older name (torch_npu deprecates it for npu_iou)."""
    return _pt_iou(bboxes, gtboxes, mode, "npu_ptiou")


def _corners(box: torch.Tensor, trans: bool):
    """x1, y1, x2, y2 rows of a [4, n] box tensor, xywh (trans) or xyxy."""
    if trans:
        x, y, w, h = box[0], box[1], box[2], box[3]
        return x - w / 2, y - h / 2, x + w / 2, y + h / 2
    return box[0], box[1], box[2], box[3]


def _pair_boxes(self, gtboxes, trans, is_cross, mode, op):
    """The corner rows of both box sets, broadcast to the output's pairs: [M, N] when is_cross
    (gt box j against box i at [j, i]), else [N] (box i against gt box i)."""
    _float_tensor(self, op, "self")
    _float_tensor(gtboxes, op, "gtboxes")
    _check_mode(mode, op)
    for name, t in (("self", self), ("gtboxes", gtboxes)):
        if t.dim() != 2 or t.shape[0] != 4:
            raise ValueError(f"torch_npu.{op}: {name} must have shape [4, n] (one box per "
                             f"column), got {list(t.shape)}")
    if not is_cross and self.shape[1] != gtboxes.shape[1]:
        raise ValueError(f"torch_npu.{op}: is_cross=False pairs box i with gt box i, so self and "
                         f"gtboxes need the same count, got {self.shape[1]} and "
                         f"{gtboxes.shape[1]}; pass is_cross=True for every pair")
    b = _corners(self, trans)
    g = _corners(gtboxes, trans)
    if is_cross:
        b = tuple(v[None, :] for v in b)
        g = tuple(v[:, None] for v in g)
    return b, g


def npu_giou(self: torch.Tensor, gtboxes: torch.Tensor, trans: bool = False,
             is_cross: bool = False, mode: int = 0) -> torch.Tensor:
    """GIoU = IoU - (enclosing area - union) / enclosing area, boxes as columns of [4, n]
    tensors (xywh when trans, else xyxy). Output [n, 1], or [m, n] when is_cross. Mode 1
    divides the overlap by the gt box's area instead of the union."""
    (bx1, by1, bx2, by2), (gx1, gy1, gx2, gy2) = _pair_boxes(self, gtboxes, trans, is_cross,
                                                             mode, "npu_giou")
    area_b = (bx2 - bx1) * (by2 - by1)
    area_g = (gx2 - gx1) * (gy2 - gy1)
    inter = ((torch.minimum(bx2, gx2) - torch.maximum(bx1, gx1)).clamp(min=0) *
             (torch.minimum(by2, gy2) - torch.maximum(by1, gy1)).clamp(min=0))
    outer = ((torch.maximum(bx2, gx2) - torch.minimum(bx1, gx1)).abs() *
             (torch.maximum(by2, gy2) - torch.minimum(by1, gy1)).abs())
    union = area_b + area_g - inter + 1e-16
    base = inter / area_g if mode == 1 else inter / union
    out = base - (outer - union) / outer
    return out if is_cross else out[:, None]


def _distance_terms(self, gtboxes, trans, is_cross, mode, op, eps=1e-9):
    (bx1, by1, bx2, by2), (gx1, gy1, gx2, gy2) = _pair_boxes(self, gtboxes, trans, is_cross,
                                                             mode, op)
    inter = ((torch.minimum(bx2, gx2) - torch.maximum(bx1, gx1)).clamp(min=0) *
             (torch.minimum(by2, gy2) - torch.maximum(by1, gy1)).clamp(min=0))
    w1, h1 = bx2 - bx1, by2 - by1 + eps
    w2, h2 = gx2 - gx1, gy2 - gy1 + eps
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / (w2 * h2 + eps) if mode == 1 else inter / union
    cw = torch.maximum(bx2, gx2) - torch.minimum(bx1, gx1)
    ch = torch.maximum(by2, gy2) - torch.minimum(by1, gy1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((gx1 + gx2 - bx1 - bx2) ** 2 + (gy1 + gy2 - by1 - by2) ** 2) / 4
    return iou, rho2 / c2, (w1, h1, w2, h2)


def _pairs_out(out: torch.Tensor, is_cross: bool) -> torch.Tensor:
    return out if is_cross else out[None, :]


def npu_diou(self: torch.Tensor, gtboxes: torch.Tensor, trans: bool = False,
             is_cross: bool = False, mode: int = 0) -> torch.Tensor:
    """DIoU = IoU - (centre distance)^2 / (enclosing diagonal)^2, boxes as columns of [4, n]
    tensors. Output [1, n], or [m, n] when is_cross. The 1e-9 guards are the card's: on the
    heights, the union and the squared diagonal."""
    iou, dist, _ = _distance_terms(self, gtboxes, trans, is_cross, mode, "npu_diou")
    return _pairs_out(iou - dist, is_cross)


def npu_ciou(self: torch.Tensor, gtboxes: torch.Tensor, trans: bool = False,
             is_cross: bool = True, mode: int = 0, atan_sub_flag: bool = False) -> torch.Tensor:
    """CIoU = DIoU - alpha * v, v = 4 / pi^2 (atan(w_gt / h_gt) - atan(w / h))^2,
    alpha = v / (1 + 1e-9 - IoU + v) (a constant for the gradient, as in the CIoU paper).
    atan_sub_flag only chooses what the card keeps for its backward; the value is the same."""
    iou, dist, (w1, h1, w2, h2) = _distance_terms(self, gtboxes, trans, is_cross, mode,
                                                  "npu_ciou")
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        alpha = v / ((1 + 1e-9) - iou + v)
    return _pairs_out(iou - dist - alpha * v, is_cross)


# ---- box encode / decode ---------------------------------------------------------------------

def _rows4(t, op, arg):
    _float_tensor(t, op, arg)
    if t.dim() != 2 or t.shape[1] != 4:
        raise ValueError(f"torch_npu.{op}: {arg} must have shape [n, 4] (x1, y1, x2, y2), got "
                         f"{list(t.shape)}")
    return t


def npu_bounding_box_encode(anchor_box: torch.Tensor, ground_truth_box: torch.Tensor,
                            means0: float, means1: float, means2: float, means3: float,
                            stds0: float, stds1: float, stds2: float, stds3: float
                            ) -> torch.Tensor:
    """Deltas (dx, dy, dw, dh) of gt boxes against anchors, both [n, 4] x1y1x2y2 with the
    legacy +1 on widths and heights, normalised by (delta - mean) / std. The card computes in
    float16 whatever the input dtype, op by op, so the float32 result carries float16's
    rounding (and a negative size gives NaN from the log)."""
    _rows4(anchor_box, "npu_bounding_box_encode", "anchor_box")
    _rows4(ground_truth_box, "npu_bounding_box_encode", "ground_truth_box")
    if anchor_box.shape != ground_truth_box.shape:
        raise ValueError("torch_npu.npu_bounding_box_encode: anchor_box and ground_truth_box must "
                         f"have the same shape, got {list(anchor_box.shape)} and "
                         f"{list(ground_truth_box.shape)}")
    # Every step in float16, as on the card; the std is applied as a multiply by its reciprocal.
    a = anchor_box.half()
    g = ground_truth_box.half()
    pw, ph = a[:, 2] - a[:, 0] + 1, a[:, 3] - a[:, 1] + 1
    px, py = (a[:, 0] + a[:, 2]) * 0.5, (a[:, 1] + a[:, 3]) * 0.5
    gw, gh = g[:, 2] - g[:, 0] + 1, g[:, 3] - g[:, 1] + 1
    gx, gy = (g[:, 0] + g[:, 2]) * 0.5, (g[:, 1] + g[:, 3]) * 0.5
    deltas = torch.stack([(gx - px) / pw, (gy - py) / ph,
                          torch.log(gw / pw), torch.log(gh / ph)], dim=1)
    means = deltas.new_tensor([means0, means1, means2, means3])
    inv_stds = deltas.new_tensor([1 / stds0, 1 / stds1, 1 / stds2, 1 / stds3])
    out = (deltas - means) * inv_stds
    return out.to(anchor_box.dtype)


def npu_bounding_box_decode(rois: torch.Tensor, deltas: torch.Tensor, means0: float,
                            means1: float, means2: float, means3: float, stds0: float,
                            stds1: float, stds2: float, stds3: float,
                            max_shape: Sequence[int], wh_ratio_clip: float) -> torch.Tensor:
    """Boxes from deltas (dx, dy, dw, dh) * std + mean applied to rois [n, 4] (legacy +1 sizes,
    x2 = cx + w / 2 - 0.5), dw / dh clipped to |log(wh_ratio_clip)|, corners clamped to the
    image max_shape = (height, width)."""
    _rows4(rois, "npu_bounding_box_decode", "rois")
    _rows4(deltas, "npu_bounding_box_decode", "deltas")
    if rois.shape != deltas.shape:
        raise ValueError("torch_npu.npu_bounding_box_decode: rois and deltas must have the same "
                         f"shape, got {list(rois.shape)} and {list(deltas.shape)}")
    if len(max_shape) != 2:
        raise ValueError("torch_npu.npu_bounding_box_decode: max_shape must be (height, width), "
                         f"got {list(max_shape)}")
    r = rois.float()
    d = deltas.float()
    stds = d.new_tensor([stds0, stds1, stds2, stds3])
    means = d.new_tensor([means0, means1, means2, means3])
    d = d * stds + means
    max_ratio = abs(math.log(wh_ratio_clip))
    dw = d[:, 2].clamp(-max_ratio, max_ratio)
    dh = d[:, 3].clamp(-max_ratio, max_ratio)
    pw, ph = r[:, 2] - r[:, 0] + 1, r[:, 3] - r[:, 1] + 1
    px, py = (r[:, 0] + r[:, 2]) * 0.5, (r[:, 1] + r[:, 3]) * 0.5
    gw, gh = pw * torch.exp(dw), ph * torch.exp(dh)
    gx, gy = px + pw * d[:, 0], py + ph * d[:, 1]
    height, width = max_shape
    x1 = (gx - gw * 0.5 + 0.5).clamp(0, width - 1)
    y1 = (gy - gh * 0.5 + 0.5).clamp(0, height - 1)
    x2 = (gx + gw * 0.5 - 0.5).clamp(0, width - 1)
    y2 = (gy + gh * 0.5 - 0.5).clamp(0, height - 1)
    return torch.stack([x1, y1, x2, y2], dim=1).to(rois.dtype)


def _rotated_args(self, other, weight, op, other_name):
    _float_tensor(self, op, "self")
    _float_tensor(other, op, other_name)
    _float_tensor(weight, op, "weight")
    if self.dim() != 3 or self.shape[1] != 5 or other.shape != self.shape:
        raise ValueError(f"torch_npu.{op}: self and {other_name} must both have shape [B, 5, N] "
                         f"(x1, y1, x2, y2, angle in degrees), got {list(self.shape)} and "
                         f"{list(other.shape)}")
    if weight.numel() != 5:
        raise ValueError(f"torch_npu.{op}: weight must hold 5 values (x, y, w, h, angle), got "
                         f"{weight.numel()}")
    return weight.float().reshape(1, 5, 1)


def _centre_form(t):
    """(cx, cy, w, h, angle) rows of [B, 5, N] x1y1x2y2-angle boxes."""
    return ((t[:, 0] + t[:, 2]) * 0.5, (t[:, 1] + t[:, 3]) * 0.5,
            t[:, 2] - t[:, 0], t[:, 3] - t[:, 1], t[:, 4])


def npu_rotated_box_encode(self: torch.Tensor, gt_bboxes: torch.Tensor,
                           weight: torch.Tensor) -> torch.Tensor:
    """Deltas of rotated gt boxes against anchors, both [B, 5, N] (x1, y1, x2, y2, angle in
    degrees): dx = (gx - ax) / aw, dy, dw = log(gw / aw), dh, dangle = tan(g) - tan(a), each
    times its weight."""
    w = _rotated_args(self, gt_bboxes, weight, "npu_rotated_box_encode", "gt_bboxes")
    ax, ay, aw, ah, aa = _centre_form(self.float())
    gx, gy, gw, gh, ga = _centre_form(gt_bboxes.float())
    rad = math.pi / 180
    out = torch.stack([(gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw), torch.log(gh / ah),
                       torch.tan(ga * rad) - torch.tan(aa * rad)], dim=1)
    return (out * w).to(self.dtype)


def npu_rotated_box_decode(self: torch.Tensor, deltas: torch.Tensor,
                           weight: torch.Tensor) -> torch.Tensor:
    """npu_rotated_box_encode's inverse: boxes [B, 5, N] (x1, y1, x2, y2, angle in degrees)
    from anchors and deltas / weight; angle = atan(tan(anchor angle) + dangle)."""
    w = _rotated_args(self, deltas, weight, "npu_rotated_box_decode", "deltas")
    ax, ay, aw, ah, aa = _centre_form(self.float())
    d = deltas.float() / w
    rad = math.pi / 180
    cx, cy = ax + d[:, 0] * aw, ay + d[:, 1] * ah
    bw, bh = aw * torch.exp(d[:, 2]), ah * torch.exp(d[:, 3])
    angle = torch.atan(torch.tan(aa * rad) + d[:, 4]) / rad
    out = torch.stack([cx - bw * 0.5, cy - bh * 0.5, cx + bw * 0.5, cy + bh * 0.5, angle], dim=1)
    return out.to(self.dtype)


# ---- anchors / sampling ----------------------------------------------------------------------

def npu_anchor_response_flags(self: torch.Tensor, featmap_size: Sequence[int],
                              stride: Sequence[int], num_base_anchors: int) -> torch.Tensor:
    """uint8 flags [H * W * num_base_anchors]: 1 for every anchor of a feature-map cell that
    holds some gt box's centre (cell = floor(centre / stride)), 0 elsewhere. Centres outside
    the map flag nothing."""
    op = "npu_anchor_response_flags"
    _float_tensor(self, op, "self")
    if self.dim() != 2 or self.shape[1] != 4:
        raise ValueError(f"torch_npu.{op}: self must have shape [n, 4] (x1, y1, x2, y2), got "
                         f"{list(self.shape)}")
    if len(featmap_size) != 2 or len(stride) != 2:
        raise ValueError(f"torch_npu.{op}: featmap_size and stride need 2 values each")
    if stride[0] <= 0 or stride[1] <= 0 or num_base_anchors <= 0:
        raise ValueError(f"torch_npu.{op}: stride and num_base_anchors must be positive, got "
                         f"{list(stride)} and {num_base_anchors}")
    feat_h, feat_w = featmap_size
    b = self.float()
    gx = torch.floor((b[:, 0] + b[:, 2]) * 0.5 / stride[0]).long()
    gy = torch.floor((b[:, 1] + b[:, 3]) * 0.5 / stride[1]).long()
    inside = (gx >= 0) & (gx < feat_w) & (gy >= 0) & (gy < feat_h)
    idx = (gy * feat_w + gx)[inside]
    flags = torch.zeros(feat_h * feat_w, dtype=torch.uint8, device=self.device)
    flags[idx] = 1
    return flags.repeat_interleave(num_base_anchors)


def npu_random_choice_with_mask(x: torch.Tensor, count: int = 256, seed: int = 0,
                                seed2: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` randomly chosen coordinates of x's true elements: int32 [count, x.dim()]
    (listed in index order, zero rows past the chosen ones) and a bool mask [count] saying
    which rows are real. seed / seed2 both 0: the default generator; else a generator seeded
    from them, so the choice repeats."""
    op = "npu_random_choice_with_mask"
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bool:
        raise TypeError(f"torch_npu.{op}: x must be a bool Tensor, got "
                        f"{x.dtype if isinstance(x, torch.Tensor) else type(x).__name__}")
    if x.dim() < 1 or x.dim() > 5:
        raise ValueError(f"torch_npu.{op}: x must have 1 to 5 dims, got {x.dim()}")
    if count <= 0:
        raise ValueError(f"torch_npu.{op}: count must be positive, got {count}")
    coords = torch.nonzero(x)                                          # [k, dim], index order
    k = coords.shape[0]
    if k > count:
        gen = None
        if seed or seed2:
            gen = torch.Generator().manual_seed((seed << 32) ^ seed2)
        pick = torch.randperm(k, generator=gen)[:count].sort().values.to(coords.device)
        coords = coords[pick]
    chosen = coords.shape[0]
    result = torch.zeros(count, x.dim(), dtype=torch.int32, device=x.device)
    result[:chosen] = coords.to(torch.int32)
    mask = torch.zeros(count, dtype=torch.bool, device=x.device)
    mask[:chosen] = True
    return result, mask


def npu_yolo_boxes_encode(self: torch.Tensor, gt_bboxes: torch.Tensor, stride: torch.Tensor,
                          performance_mode: bool = False) -> torch.Tensor:
    """YOLO box targets of gt boxes against anchors, both [n, 4] x1y1x2y2, with the anchors'
    strides [n]: centre offsets (gt - anchor) / stride + 0.5 clamped to [1e-6, 1 - 1e-6], and
    log size ratios with the ratio clamped to >= 1e-6. performance_mode only picks the card's
    faster path; the value is the same."""
    op = "npu_yolo_boxes_encode"
    _rows4(self, op, "anchor_boxes (self)")
    _rows4(gt_bboxes, op, "gt_bboxes")
    if not isinstance(stride, torch.Tensor) or stride.dim() != 1 or \
            stride.shape[0] != self.shape[0]:
        raise ValueError(f"torch_npu.{op}: stride must be a 1-D tensor with one value per box "
                         f"({self.shape[0]}), got "
                         f"{list(stride.shape) if isinstance(stride, torch.Tensor) else stride}")
    if gt_bboxes.shape != self.shape:
        raise ValueError(f"torch_npu.{op}: self and gt_bboxes must have the same shape, got "
                         f"{list(self.shape)} and {list(gt_bboxes.shape)}")
    eps = 1e-6
    a = self.float()
    g = gt_bboxes.float()
    s = stride.to(a.device, torch.float32)
    ax, ay = (a[:, 0] + a[:, 2]) * 0.5, (a[:, 1] + a[:, 3]) * 0.5
    aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    gx, gy = (g[:, 0] + g[:, 2]) * 0.5, (g[:, 1] + g[:, 3]) * 0.5
    gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    out = torch.stack([((gx - ax) / s + 0.5).clamp(eps, 1 - eps),
                       ((gy - ay) / s + 0.5).clamp(eps, 1 - eps),
                       torch.log((gw / aw).clamp(min=eps)),
                       torch.log((gh / ah).clamp(min=eps))], dim=1)
    return out.to(self.dtype)


def npu_grid_assign_positive(self: torch.Tensor, overlaps: torch.Tensor,
                             box_responsible_flags: torch.Tensor, max_overlaps: torch.Tensor,
                             argmax_overlaps: torch.Tensor, gt_max_overlaps: torch.Tensor,
                             gt_argmax_overlaps: torch.Tensor, num_gts: int,
                             pos_iou_thr: float, min_pos_iou: float,
                             gt_max_assign_all: bool) -> torch.Tensor:
    """The positive step of the grid assigner. self: assigned gt indices [n] (returned updated,
    self's dtype); overlaps [k, n] of k gt boxes with n boxes. A responsible box whose best
    overlap is above pos_iou_thr gets argmax_overlaps + 1; then each gt i whose best overlap is
    above min_pos_iou is given (i + 1) to its best responsible boxes: every box whose overlap
    equals it (gt_max_assign_all) or only gt_argmax_overlaps[i]. Later gts win ties. Only the
    first min(num_gts, k) gts take part."""
    op = "npu_grid_assign_positive"
    _float_tensor(self, op, "self")
    _float_tensor(overlaps, op, "overlaps")
    n = self.shape[0] if self.dim() == 1 else -1
    if n < 0 or overlaps.dim() != 2 or overlaps.shape[1] != n:
        raise ValueError(f"torch_npu.{op}: self must be [n] and overlaps [k, n], got "
                         f"{list(self.shape)} and {list(overlaps.shape)}")
    for name, t in (("box_responsible_flags", box_responsible_flags),
                    ("max_overlaps", max_overlaps), ("argmax_overlaps", argmax_overlaps)):
        if t.shape != (n,):
            raise ValueError(f"torch_npu.{op}: {name} must have shape [{n}], got "
                             f"{list(t.shape)}")
    k = min(int(num_gts), overlaps.shape[0])
    flags = box_responsible_flags.bool()
    pos = (max_overlaps > pos_iou_thr) & flags
    out = torch.where(pos, (argmax_overlaps.long() + 1).to(self.dtype), self)
    if k == 0:
        return out
    gt_max = gt_max_overlaps[:k]
    ids = torch.arange(1, k + 1, device=self.device)
    if gt_max_assign_all:
        hit = (overlaps[:k] == gt_max[:, None]) & flags[None, :] & (gt_max > min_pos_iou)[:, None]
    else:
        arg = gt_argmax_overlaps[:k].long()
        hit = torch.zeros(k, n, dtype=torch.bool, device=self.device)
        hit[torch.arange(k, device=self.device), arg] = True
        hit &= flags[None, :] & (gt_max > min_pos_iou)[:, None]
    last = (hit.long() * ids[:, None]).amax(dim=0)                    # the last gt to hit a box
    return torch.where(last > 0, last.to(self.dtype), out)


# ---- kernels (C++) with their autograd -------------------------------------------------------

def npu_nms_v4(self, scores, max_output_size, iou_threshold, scores_threshold,
               pad_to_max_output_size=False):
    """Greedy NMS of boxes [N, 4] by descending score: (int32 [max_output_size] kept indices,
    zero past the kept ones; int32 count)."""
    return torch.ops.npu.npu_nms_v4(self, scores, max_output_size, iou_threshold,
                                    scores_threshold, pad_to_max_output_size)


def npu_nms_with_mask(input, iou_threshold):
    """input [N, 5] (x1, y1, x2, y2, score): (rows sorted by descending score, int32 their
    original indices, uint8 mask of the sorted rows NMS keeps)."""
    return torch.ops.npu.npu_nms_with_mask(input, iou_threshold)


def npu_batch_nms(self, scores, score_threshold, iou_threshold, max_size_per_class,
                  max_total_size, change_coordinate_frame=False, transpose_box=False):
    """Per-class NMS of boxes [B, N, q, 4] with scores [B, N, C]: (boxes [B, T, 4],
    scores [B, T], classes [B, T] (scores' dtype), int32 counts [B]), T = max_total_size,
    zero-padded."""
    return torch.ops.npu.npu_batch_nms(self, scores, score_threshold, iou_threshold,
                                       max_size_per_class, max_total_size,
                                       change_coordinate_frame, transpose_box)


def npu_nms_rotated(self, scores, iou_threshold, scores_threshold=0, max_output_size=-1,
                    mode=0):
    """Greedy NMS of rotated boxes [N, 5]: (int64 kept indices, int32 [1] their count)."""
    return torch.ops.npu.npu_nms_rotated(self, scores, iou_threshold, scores_threshold,
                                         max_output_size, mode)


def npu_rotated_overlaps(self, query_boxes, trans=False):
    """Overlap areas [B, N, K] of rotated boxes [B, N, 5] and [B, K, 5] (xywh + angle in
    degrees; trans: x1y1x2y2 + angle)."""
    return torch.ops.npu.npu_rotated_overlaps(self, query_boxes, trans)


def npu_rotated_iou(self, query_boxes, trans=False, mode=0, is_cross=True, v_threshold=0.0,
                    e_threshold=0.0):
    """IoU (mode 0) or IoF (mode 1) of rotated boxes: [B, N, K], or [B, N] when not is_cross."""
    return torch.ops.npu.npu_rotated_iou(self, query_boxes, trans, mode, is_cross, v_threshold,
                                         e_threshold)


def npu_roi_align(self, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                  roi_end_mode):
    """RoI Align of self [N, C, H, W] over rois [R, 5]: [R, C, pooled_height, pooled_width]."""
    return torch.ops.npu.npu_roi_align(self, rois, spatial_scale, pooled_height, pooled_width,
                                       sample_num, roi_end_mode)


def npu_roi_alignbk(self, rois, xdiff_shape, pooled_width, pooled_height, spatial_scale,
                    sample_num, roi_end_mode=None):
    """npu_roi_align's input gradient, of shape xdiff_shape."""
    return torch.ops.npu.npu_roi_alignbk(self, rois, list(xdiff_shape), pooled_width,
                                         pooled_height, spatial_scale, sample_num, roi_end_mode)


def npu_ps_roi_pooling(self, rois, spatial_scale, group_size, output_dim):
    """Position-sensitive RoI pooling: self [N, output_dim * group^2, H, W], rois [B, 5, R]:
    [B * R, output_dim, group, group]."""
    return torch.ops.npu.npu_ps_roi_pooling(self, rois, spatial_scale, group_size, output_dim)


def _roi_align_setup(ctx, inputs, output):
    self, rois, spatial_scale, ph, pw, sample_num, roi_end_mode = inputs
    ctx.save_for_backward(rois)
    ctx.args = (list(self.shape), pw, ph, spatial_scale, sample_num, roi_end_mode)


def _roi_align_backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    shape, pw, ph, scale, sample_num, mode = ctx.args
    gi = torch.ops.npu.npu_roi_alignbk(grad.contiguous(), rois, shape, pw, ph, scale,
                                       sample_num, mode)
    return gi, None, None, None, None, None, None


def _ps_roi_setup(ctx, inputs, output):
    self, rois, spatial_scale, group_size, output_dim = inputs
    ctx.save_for_backward(rois)
    ctx.args = (spatial_scale, group_size, output_dim, list(self.shape))


def _ps_roi_backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    scale, group, dim, shape = ctx.args
    # the input's whole shape (our extension of torch_npu's [H, W]): its batch may differ from
    # rois' first dimension, which torch_npu's backward takes for it
    gi = torch.ops.npu.npu_ps_roi_pooling_backward(grad.contiguous(), rois, scale, group, dim,
                                                   shape)
    return gi, None, None, None, None


# ---- deformable convolution ------------------------------------------------------------------

def _pair_hw(v, op, name):
    v = list(v)
    if len(v) == 4:
        return v[2], v[3]
    if len(v) == 2:
        return v[0], v[1]
    raise ValueError(f"torch_npu.{op}: {name} must have 2 values (h, w) or 4 (NCHW order), "
                     f"got {v}")


def _conv_padding(padding, op):
    """(ph, pw) of a symmetric padding given as 2 values or 4 (top, bottom, left, right)."""
    p = list(padding)
    if len(p) == 2:
        return p[0], p[1]
    if len(p) == 4:
        if p[0] != p[1] or p[2] != p[3]:
            raise NotImplementedError(f"torch_npu.{op}: asymmetric padding {p} is not built in "
                                      "SimNPU; pad the input with torch.nn.functional.pad first")
        return p[0], p[2]
    raise ValueError(f"torch_npu.{op}: padding must have 2 values (h, w) or 4 (top, bottom, "
                     f"left, right), got {p}")


def npu_conv2d(input, weight, bias, stride, padding, dilation, groups):
    """A 2-D convolution (torch.nn.functional.conv2d) with torch_npu's argument forms: stride
    and dilation as 2 values (or 4 in NCHW order), padding as 2 or 4 (top, bottom, left,
    right)."""
    op = "npu_conv2d"
    return torch.nn.functional.conv2d(input, weight, bias, _pair_hw(stride, op, "stride"),
                                      _conv_padding(padding, op),
                                      _pair_hw(dilation, op, "dilation"), groups)


def npu_conv2d_backward(input, grad_output, weight, stride, padding, dilation, groups,
                        output_mask):
    """npu_conv2d's (grad_input, grad_weight, grad_bias), each None where output_mask is
    False."""
    op = "npu_conv2d_backward"
    gi, gw, gb = torch.ops.aten.convolution_backward(
        grad_output, input, weight, [weight.shape[0]], list(_pair_hw(stride, op, "stride")),
        list(_conv_padding(padding, op)), list(_pair_hw(dilation, op, "dilation")), False,
        [0, 0], groups, list(output_mask))
    return gi, gw, gb


def npu_deformable_conv2d(input, weight, offset, bias, kernel_size, stride, padding,
                          dilation=(1, 1, 1, 1), groups=1, deformable_groups=1, modulated=True):
    """Deformable convolution: input [N, C, H, W] sampled at the offset positions (offset
    [N, 3 * deformable_groups * KH * KW, Ho, Wo]: x offsets, y offsets, scales; see
    kernels/detection.h) into [N, C, Ho * KH, Wo * KW], then a KH x KW convolution of stride
    (KH, KW). Returns (output [N, Cout, Ho, Wo], the sampled input). stride / dilation are
    NCHW-ordered 4-lists (or 2), padding (top, bottom, left, right)."""
    sampled = torch.ops.npu._npu_deformable_offsets(input, offset, list(kernel_size),
                                                    list(stride), list(padding), list(dilation),
                                                    deformable_groups, modulated)
    out = torch.nn.functional.conv2d(sampled, weight, bias, tuple(kernel_size), 0, 1, groups)
    return out, sampled


def npu_deformable_conv2dbk(input, grad_output, offset_out, weight, offset, kernel_size, stride,
                            padding, dilation=(1, 1, 1, 1), groups=1, deformable_groups=1,
                            modulated=True):
    """npu_deformable_conv2d's gradients (input, weight, offset, bias) from grad_output and the
    sampled input offset_out it returned."""
    g_sampled, g_weight, g_bias = torch.ops.aten.convolution_backward(
        grad_output, offset_out, weight, [weight.shape[0]], list(kernel_size), [0, 0], [1, 1],
        False, [0, 0], groups, [True, True, True])
    g_input, g_offset = torch.ops.npu._npu_deformable_offsets_backward(
        g_sampled, input, offset, list(kernel_size), list(stride), list(padding),
        list(dilation), deformable_groups, modulated)
    return g_input, g_weight, g_offset, g_bias


def _offsets_setup(ctx, inputs, output):
    x, offsets, *args = inputs
    ctx.save_for_backward(x, offsets)
    ctx.args = args


def _offsets_backward(ctx, grad):
    x, offsets = ctx.saved_tensors
    gx, go = torch.ops.npu._npu_deformable_offsets_backward(grad.contiguous(), x, offsets,
                                                           *ctx.args)
    return gx, go, None, None, None, None, None, None


# npu_conv2d / npu_conv2d_backward are defined here (Python) only when no other part of the
# package has defined them, since they are not detection operators: the deformable
# convolution's tests need them.
_CONV_SCHEMAS = {
    "npu_conv2d": "npu_conv2d(Tensor input, Tensor weight, Tensor? bias, int[] stride, "
                  "int[] padding, int[] dilation, int groups) -> Tensor",
    "npu_conv2d_backward": "npu_conv2d_backward(Tensor input, Tensor grad_output, Tensor weight, "
                           "int[] stride, int[] padding, int[] dilation, int groups, "
                           "bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
}


# ---- fake (meta) kernels: shapes only, for FakeTensor / torch.compile tracing -----------------

def _register_fakes() -> None:
    fake = torch.library.register_fake

    @fake("npu::npu_nms_v4")
    def _nms_v4(boxes, scores, max_output_size, iou_threshold, scores_threshold,
                pad_to_max_output_size=False):
        return (boxes.new_empty((int(max_output_size),), dtype=torch.int32),
                boxes.new_empty((), dtype=torch.int32))

    @fake("npu::npu_nms_with_mask")
    def _nms_with_mask(input, iou_threshold):
        n = input.shape[0]
        return (input.new_empty((n, 5)), input.new_empty((n,), dtype=torch.int32),
                input.new_empty((n,), dtype=torch.uint8))

    @fake("npu::npu_batch_nms")
    def _batch_nms(boxes, scores, score_threshold, iou_threshold, max_size_per_class,
                   max_total_size, change_coordinate_frame=False, transpose_box=False):
        b = boxes.shape[0]
        return (boxes.new_empty((b, max_total_size, 4)), boxes.new_empty((b, max_total_size)),
                boxes.new_empty((b, max_total_size)), boxes.new_empty((b,), dtype=torch.int32))

    @fake("npu::npu_rotated_overlaps")
    def _rotated_overlaps(boxes, query, trans=False):
        return boxes.new_empty((boxes.shape[0], boxes.shape[1], query.shape[1]))

    @fake("npu::npu_rotated_iou")
    def _rotated_iou(boxes, query, trans=False, mode=0, is_cross=True, v_threshold=0.0,
                     e_threshold=0.0):
        if is_cross:
            return boxes.new_empty((boxes.shape[0], boxes.shape[1], query.shape[1]))
        return boxes.new_empty((boxes.shape[0], boxes.shape[1]))

    @fake("npu::npu_roi_align")
    def _roi_align(x, rois, spatial_scale, ph, pw, sample_num, roi_end_mode):
        return x.new_empty((rois.shape[0], x.shape[1], ph, pw))

    @fake("npu::npu_roi_alignbk")
    def _roi_alignbk(grad, rois, xdiff_shape, pw, ph, spatial_scale, sample_num,
                     roi_end_mode=None):
        return grad.new_empty(tuple(xdiff_shape))

    @fake("npu::npu_ps_roi_pooling")
    def _ps_roi_pooling(x, rois, spatial_scale, group_size, output_dim):
        return x.new_empty((rois.shape[0] * rois.shape[2], output_dim, group_size, group_size))

    @fake("npu::npu_ps_roi_pooling_backward")
    def _ps_roi_pooling_backward(grad, rois, spatial_scale, group_size, output_dim, input_size):
        hw = tuple(input_size)
        shape = hw if len(hw) == 4 else (rois.shape[0], output_dim * group_size ** 2) + hw
        return grad.new_empty(shape)

    @fake("npu::_npu_deformable_offsets")
    def _deformable_offsets(x, offsets, kernel_size, stride, padding, dilation,
                            deformable_groups, modulated):
        kh, kw = kernel_size
        return x.new_empty((x.shape[0], x.shape[1], offsets.shape[2] * kh, offsets.shape[3] * kw))

    @fake("npu::_npu_deformable_offsets_backward")
    def _deformable_offsets_backward(grad, x, offsets, *args):
        return x.new_empty(x.shape), offsets.new_empty(offsets.shape)


_COMPOSITES = {
    "npu_deformable_conv2d": npu_deformable_conv2d,
    "npu_deformable_conv2dbk": npu_deformable_conv2dbk,
    "npu_iou": npu_iou, "npu_ptiou": npu_ptiou, "npu_giou": npu_giou, "npu_diou": npu_diou,
    "npu_ciou": npu_ciou, "npu_bounding_box_encode": npu_bounding_box_encode,
    "npu_bounding_box_decode": npu_bounding_box_decode,
    "npu_rotated_box_encode": npu_rotated_box_encode,
    "npu_rotated_box_decode": npu_rotated_box_decode,
    "npu_anchor_response_flags": npu_anchor_response_flags,
    "npu_yolo_boxes_encode": npu_yolo_boxes_encode,
    "npu_grid_assign_positive": npu_grid_assign_positive,
    "npu_random_choice_with_mask": npu_random_choice_with_mask,
}
_library = None


def _register() -> None:
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("npu", "FRAGMENT")  # kept alive: dropping it unregisters
    for name, fn in _COMPOSITES.items():
        _library.impl(name, fn, "CompositeImplicitAutograd")
    conv = {"npu_conv2d": npu_conv2d, "npu_conv2d_backward": npu_conv2d_backward}
    for name, schema in _CONV_SCHEMAS.items():
        if not hasattr(torch.ops.npu, name):
            _library.define(schema)
            _library.impl(name, conv[name], "CompositeImplicitAutograd")
    reg = torch.library.register_autograd
    reg("npu::npu_roi_align", _roi_align_backward, setup_context=_roi_align_setup)
    reg("npu::npu_ps_roi_pooling", _ps_roi_backward, setup_context=_ps_roi_setup)
    reg("npu::_npu_deformable_offsets", _offsets_backward, setup_context=_offsets_setup)


_register()
_register_fakes()
