"""torch_npu's detection / bounding-box operators (torch_npu/_detection_ops.py and
adapter/ops/DetectionLibrary.cpp on kernels/detection.cpp) against NumPy float64 references
written here from the operators' documented definitions, plus their refusals of bad input."""

import math

import numpy as np
import pytest
import torch

import torch_npu

RNG = np.random.default_rng(7)


def _npu(a, dtype=torch.float32):
    return torch.from_numpy(np.asarray(a)).to(dtype).npu()


def _xyxy(n, lo=0.0, hi=50.0, size=20.0):
    p = RNG.uniform(lo, hi, (n, 2))
    wh = RNG.uniform(1.0, size, (n, 2))
    return np.concatenate([p, p + wh], axis=1)


# ---- IoU family ------------------------------------------------------------------------------

def _ref_iou(b, g, mode):
    """[M, N] with the card's 0.01 area margin."""
    out = np.zeros((len(g), len(b)))
    for j, gb in enumerate(g):
        for i, bb in enumerate(b):
            iw = max(0.0, min(gb[2], bb[2]) - max(gb[0], bb[0]))
            ih = max(0.0, min(gb[3], bb[3]) - max(gb[1], bb[1]))
            inter = iw * ih
            ag = (gb[2] - gb[0] + 0.01) * (gb[3] - gb[1] + 0.01)
            ab = (bb[2] - bb[0] + 0.01) * (bb[3] - bb[1] + 0.01)
            out[j, i] = inter / ag if mode == 1 else inter / (ag + ab - inter)
    return out


@pytest.mark.parametrize("fn", [torch_npu.npu_iou, torch_npu.npu_ptiou])
@pytest.mark.parametrize("mode", [0, 1])
def test_iou_matches_reference(fn, mode):
    b, g = _xyxy(7), _xyxy(5)
    got = fn(_npu(b), _npu(g), mode)
    assert got.shape == (5, 7) and got.dtype == torch.float32
    np.testing.assert_allclose(got.cpu().numpy(), _ref_iou(b, g, mode), rtol=1e-5, atol=1e-6)
    # identical boxes give slightly less than 1 (the margin), as on the card
    same = fn(_npu(b[:1]), _npu(b[:1]), 0).item()
    assert 0.95 < same < 1.0


def _cols(n):
    """[4, n] xywh boxes around (0.5..1.5)."""
    xy = RNG.uniform(0.5, 1.5, (2, n))
    wh = RNG.uniform(0.2, 1.0, (2, n))
    return np.concatenate([xy, wh]).astype(np.float64)


def _corners(c):
    return c[0] - c[2] / 2, c[1] - c[3] / 2, c[0] + c[2] / 2, c[1] + c[3] / 2


def _ref_giou(a, b):
    ax1, ay1, ax2, ay2 = _corners(a)
    bx1, by1, bx2, by2 = _corners(b)
    inter = np.clip(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), 0, None) * \
        np.clip(np.minimum(ay2, by2) - np.maximum(ay1, by1), 0, None)
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    hull = (np.maximum(ax2, bx2) - np.minimum(ax1, bx1)) * \
        (np.maximum(ay2, by2) - np.minimum(ay1, by1))
    return inter / union - (hull - union) / hull


def _ref_diou_ciou(a, b, eps=1e-9):
    ax1, ay1, ax2, ay2 = _corners(a)
    bx1, by1, bx2, by2 = _corners(b)
    inter = np.clip(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), 0, None) * \
        np.clip(np.minimum(ay2, by2) - np.maximum(ay1, by1), 0, None)
    w1, h1, w2, h2 = ax2 - ax1, ay2 - ay1 + eps, bx2 - bx1, by2 - by1 + eps
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    c2 = (np.maximum(ax2, bx2) - np.minimum(ax1, bx1)) ** 2 + \
        (np.maximum(ay2, by2) - np.minimum(ay1, by1)) ** 2 + eps
    rho2 = ((b[0] - a[0]) ** 2 + (b[1] - a[1]) ** 2)
    diou = iou - rho2 / c2
    v = 4 / math.pi ** 2 * (np.arctan(w2 / h2) - np.arctan(w1 / h1)) ** 2
    return diou, diou - v * v / (1 + eps - iou + v)


def test_giou_diou_ciou_values_and_shapes():
    a, b = _cols(9), _cols(9)
    ta, tb = _npu(a), _npu(b)
    giou = torch_npu.npu_giou(ta, tb, True, False, 0)
    assert giou.shape == (9, 1)
    np.testing.assert_allclose(giou.cpu().numpy()[:, 0], _ref_giou(a, b), rtol=1e-4, atol=1e-5)
    diou_ref, ciou_ref = _ref_diou_ciou(a, b)
    diou = torch_npu.npu_diou(ta, tb, True, False, 0)
    assert diou.shape == (1, 9)
    np.testing.assert_allclose(diou.cpu().numpy()[0], diou_ref, rtol=1e-4, atol=1e-5)
    ciou = torch_npu.npu_ciou(ta, tb, True, False, 0, True)
    assert ciou.shape == (1, 9)
    np.testing.assert_allclose(ciou.cpu().numpy()[0], ciou_ref, rtol=1e-4, atol=1e-5)
    # is_cross: every pair, [M, N]
    cross = torch_npu.npu_giou(ta, _npu(b[:, :4]), True, True, 0)
    assert cross.shape == (4, 9)
    np.testing.assert_allclose(cross.cpu().numpy()[2, 2], _ref_giou(a[:, 2:3], b[:, 2:3])[0],
                               rtol=1e-4)


def test_giou_backward_matches_finite_differences():
    a, b = _cols(3), _cols(3)
    ta, tb = _npu(a).requires_grad_(), _npu(b).requires_grad_()
    torch_npu.npu_giou(ta, tb, True, False, 0).sum().backward()
    h = 1e-6
    num = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[idx] += h
        am[idx] -= h
        num[idx] = (_ref_giou(ap, b).sum() - _ref_giou(am, b).sum()) / (2 * h)
    np.testing.assert_allclose(ta.grad.cpu().numpy(), num, rtol=2e-3, atol=2e-4)
    assert tb.grad is not None and tb.grad.shape == (4, 3)


def test_iou_family_refuses_bad_input():
    with pytest.raises(ValueError, match=r"shape \[n, 4\]"):
        torch_npu.npu_iou(_npu(np.zeros((3, 5))), _npu(np.zeros((3, 4))))
    with pytest.raises(ValueError, match="mode must be 0"):
        torch_npu.npu_iou(_npu(np.zeros((3, 4))), _npu(np.zeros((3, 4))), 2)
    with pytest.raises(ValueError, match="same count"):
        torch_npu.npu_giou(_npu(_cols(3)), _npu(_cols(4)), True, False, 0)
    with pytest.raises(TypeError, match="float16 or float32"):
        torch_npu.npu_diou(torch.zeros(4, 3, dtype=torch.int32).npu(), _npu(_cols(3)))


# ---- box encode / decode ---------------------------------------------------------------------

def test_bounding_box_encode_decode():
    anchors, gts = _xyxy(6), _xyxy(6)
    means, stds = [0.1, -0.1, 0.0, 0.05], [0.1, 0.1, 0.2, 0.2]
    pw, ph = anchors[:, 2] - anchors[:, 0] + 1, anchors[:, 3] - anchors[:, 1] + 1
    px, py = (anchors[:, 0] + anchors[:, 2]) / 2, (anchors[:, 1] + anchors[:, 3]) / 2
    gw, gh = gts[:, 2] - gts[:, 0] + 1, gts[:, 3] - gts[:, 1] + 1
    gx, gy = (gts[:, 0] + gts[:, 2]) / 2, (gts[:, 1] + gts[:, 3]) / 2
    ref = (np.stack([(gx - px) / pw, (gy - py) / ph, np.log(gw / pw), np.log(gh / ph)], 1)
           - means) / stds
    enc = torch_npu.npu_bounding_box_encode(_npu(anchors), _npu(gts), *means, *stds)
    assert enc.dtype == torch.float32
    # the card computes in float16: float16's relative precision
    np.testing.assert_allclose(enc.cpu().numpy(), ref, rtol=1e-2, atol=2e-2)
    dec = torch_npu.npu_bounding_box_decode(_npu(anchors), enc, *means, *stds, (1000, 1000), 1e-3)
    np.testing.assert_allclose(dec.cpu().numpy(), gts, rtol=1e-2, atol=0.1)
    # clamped to the image
    small = torch_npu.npu_bounding_box_decode(_npu(anchors), enc, *means, *stds, (10, 12), 1e-3)
    assert small[:, 0::2].max().item() <= 11 and small[:, 1::2].max().item() <= 9


def test_rotated_box_encode_decode():
    a = np.concatenate([_xyxy(4).T, RNG.uniform(-60, 60, (1, 4))])[None]   # [1, 5, 4]
    g = np.concatenate([_xyxy(4).T, RNG.uniform(-60, 60, (1, 4))])[None]
    w = np.array([1.0, 2.0, 1.0, 0.5, 1.0])
    enc = torch_npu.npu_rotated_box_encode(_npu(a), _npu(g), _npu(w))
    ax, ay = (a[0, 0] + a[0, 2]) / 2, (a[0, 1] + a[0, 3]) / 2
    aw, ah = a[0, 2] - a[0, 0], a[0, 3] - a[0, 1]
    gx, gy = (g[0, 0] + g[0, 2]) / 2, (g[0, 1] + g[0, 3]) / 2
    gw, gh = g[0, 2] - g[0, 0], g[0, 3] - g[0, 1]
    rad = np.pi / 180
    ref = np.stack([(gx - ax) / aw, (gy - ay) / ah, np.log(gw / aw), np.log(gh / ah),
                    np.tan(g[0, 4] * rad) - np.tan(a[0, 4] * rad)]) * w[:, None]
    np.testing.assert_allclose(enc.cpu().numpy()[0], ref, rtol=1e-4, atol=1e-4)
    dec = torch_npu.npu_rotated_box_decode(_npu(a), enc, _npu(w))
    np.testing.assert_allclose(dec.cpu().numpy(), g, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="weight must hold 5"):
        torch_npu.npu_rotated_box_encode(_npu(a), _npu(g), _npu(w[:4]))


def test_yolo_boxes_encode():
    a, g = _xyxy(5), _xyxy(5)
    stride = torch.tensor([8, 16, 32, 8, 16], dtype=torch.int32)
    got = torch_npu.npu_yolo_boxes_encode(_npu(a), _npu(g), stride.npu()).cpu().numpy()
    s = stride.numpy().astype(np.float64)
    eps = 1e-6
    ref = np.stack([
        np.clip(((g[:, 0] + g[:, 2]) - (a[:, 0] + a[:, 2])) / 2 / s + 0.5, eps, 1 - eps),
        np.clip(((g[:, 1] + g[:, 3]) - (a[:, 1] + a[:, 3])) / 2 / s + 0.5, eps, 1 - eps),
        np.log(np.maximum((g[:, 2] - g[:, 0]) / (a[:, 2] - a[:, 0]), eps)),
        np.log(np.maximum((g[:, 3] - g[:, 1]) / (a[:, 3] - a[:, 1]), eps))], 1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


# ---- anchors / assignment / sampling ---------------------------------------------------------

def test_anchor_response_flags():
    boxes = RNG.uniform(0, 60, (30, 4))
    got = torch_npu.npu_anchor_response_flags(_npu(boxes), [8, 10], [8, 8], 3).cpu().numpy()
    ref = np.zeros(80, np.uint8)
    for b in boxes:
        cx, cy = int(np.floor((b[0] + b[2]) / 2 / 8)), int(np.floor((b[1] + b[3]) / 2 / 8))
        if 0 <= cx < 10 and 0 <= cy < 8:
            ref[cy * 10 + cx] = 1
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, np.repeat(ref, 3))


def test_grid_assign_positive():
    n, k = 6, 3
    assigned = RNG.uniform(0, 1, n)
    overlaps = RNG.uniform(0, 1, (k, n))
    overlaps[1, 4] = overlaps[1].max() + 0.5       # gt 1 is best at box 4
    flags = np.array([1, 1, 0, 1, 1, 1], np.uint8)
    max_ov, arg_ov = overlaps.max(0), overlaps.argmax(0).astype(np.int32)
    gt_max, gt_arg = overlaps.max(1), overlaps.argmax(1).astype(np.int32)
    got = torch_npu.npu_grid_assign_positive(
        _npu(assigned), _npu(overlaps), torch.from_numpy(flags).npu(), _npu(max_ov),
        torch.from_numpy(arg_ov).npu(), _npu(gt_max), torch.from_numpy(gt_arg).npu(),
        k, 0.5, 0.0, True).cpu().numpy()
    ref = assigned.copy()
    pos = (max_ov > 0.5) & flags.astype(bool)
    ref[pos] = arg_ov[pos] + 1
    for i in range(k):
        if gt_max[i] > 0.0:
            ref[(overlaps[i] == gt_max[i]) & flags.astype(bool)] = i + 1
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert got[4] == 2


def test_random_choice_with_mask():
    x = torch.from_numpy(RNG.uniform(0, 1, (6, 7)) > 0.6)
    coords, mask = torch_npu.npu_random_choice_with_mask(x.npu(), 5, 1, 2)
    assert coords.dtype == torch.int32 and coords.shape == (5, 2) and mask.shape == (5,)
    chosen = coords.cpu()[mask.cpu()]
    assert chosen.shape[0] == min(5, int(x.sum()))
    assert bool(x[chosen[:, 0].long(), chosen[:, 1].long()].all())
    assert len({tuple(r.tolist()) for r in chosen}) == chosen.shape[0]
    # count above the true elements: all of them, then zero rows the mask leaves out
    coords, mask = torch_npu.npu_random_choice_with_mask(x.npu(), 60)
    assert int(mask.sum()) == int(x.sum())
    assert torch.equal(coords.cpu()[mask.cpu()].long(), torch.nonzero(x))
    with pytest.raises(TypeError, match="bool Tensor"):
        torch_npu.npu_random_choice_with_mask(x.float().npu(), 5)


# ---- NMS -------------------------------------------------------------------------------------

def _ref_nms(boxes, scores, thr, score_thr=-np.inf, limit=None):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep = []
    for i in order:
        if scores[i] <= score_thr or (limit is not None and len(keep) >= limit):
            continue
        ok = True
        for j in keep:
            iw = min(boxes[i][2], boxes[j][2]) - max(boxes[i][0], boxes[j][0])
            ih = min(boxes[i][3], boxes[j][3]) - max(boxes[i][1], boxes[j][1])
            inter = max(iw, 0) * max(ih, 0)
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) > thr:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


def test_nms_v4_and_with_mask():
    boxes, scores = _xyxy(40, 0, 40), RNG.uniform(0, 1, 40)
    ref = _ref_nms(boxes, scores, 0.4, 0.2, 10)
    sel, valid = torch_npu.npu_nms_v4(_npu(boxes), _npu(scores), 10, torch.tensor(0.4).npu(),
                                      torch.tensor(0.2).npu())
    assert sel.dtype == torch.int32 and sel.shape == (10,)
    assert int(valid) == len(ref)
    assert sel.cpu()[:len(ref)].tolist() == ref
    rows = np.concatenate([boxes, scores[:, None]], 1)
    out, idx, mask = torch_npu.npu_nms_with_mask(_npu(rows), 0.4)
    order = sorted(range(40), key=lambda i: (-scores[i], i))
    assert idx.cpu().tolist() == order
    np.testing.assert_allclose(out.cpu().numpy(), rows[order], rtol=1e-6)
    kept = [order[i] for i in np.nonzero(mask.cpu().numpy())[0]]
    assert kept == _ref_nms(boxes, scores, 0.4)


def test_batch_nms():
    B, N, C = 2, 12, 3
    boxes = np.stack([_xyxy(N, 0, 30) for _ in range(B)])[:, :, None, :]   # q = 1
    scores = RNG.uniform(0, 1, (B, N, C))
    ob, os_, oc, on = torch_npu.npu_batch_nms(_npu(boxes), _npu(scores), 0.3, 0.5, 4, 6)
    assert ob.shape == (B, 6, 4) and oc.dtype == torch.float32 and on.dtype == torch.int32
    for b in range(B):
        dets = []
        for c in range(C):
            for i in _ref_nms(boxes[b, :, 0], scores[b, :, c], 0.5, 0.3, 4):
                dets.append((scores[b, i, c], c, i))
        dets.sort(key=lambda d: -d[0])
        dets = dets[:6]
        assert int(on[b]) == len(dets)
        np.testing.assert_allclose(os_[b, :len(dets)].cpu().numpy(), [d[0] for d in dets],
                                   rtol=1e-6)
        assert oc[b, :len(dets)].cpu().tolist() == [float(d[1]) for d in dets]
        np.testing.assert_allclose(ob[b, :len(dets)].cpu().numpy(),
                                   boxes[b, [d[2] for d in dets], 0], rtol=1e-6)
        assert float(os_[b, len(dets):].abs().sum()) == 0.0
    with pytest.raises(NotImplementedError, match="transpose_box"):
        torch_npu.npu_batch_nms(_npu(boxes), _npu(scores), 0.3, 0.5, 4, 6, False, True)
    with pytest.raises(RuntimeError, match=r"\[B, N, q, 4\]"):
        torch_npu.npu_batch_nms(_npu(boxes[:, :, 0]), _npu(scores), 0.3, 0.5, 4, 6)


# ---- rotated boxes ---------------------------------------------------------------------------

def _mc_overlap(a, b, n=1200):
    """Intersection area of two (cx, cy, w, h, angle deg) rectangles by dense grid sampling."""
    def inside(r, x, y):
        t = np.deg2rad(r[4])
        dx, dy = x - r[0], y - r[1]
        u = dx * np.cos(t) + dy * np.sin(t)
        v = -dx * np.sin(t) + dy * np.cos(t)
        return (np.abs(u) <= r[2] / 2) & (np.abs(v) <= r[3] / 2)
    ra = max(a[2], a[3]) / 2 * 1.5
    xs = np.linspace(a[0] - ra, a[0] + ra, n)
    ys = np.linspace(a[1] - ra, a[1] + ra, n)
    x, y = np.meshgrid(xs, ys)
    cell = (xs[1] - xs[0]) * (ys[1] - ys[0])
    return float((inside(a, x, y) & inside(b, x, y)).sum() * cell)


def test_rotated_overlaps_and_iou_against_sampling():
    a = np.array([[[10.0, 10.0, 8.0, 4.0, 30.0], [0.0, 0.0, 4.0, 4.0, 0.0]]])
    b = np.array([[[11.0, 9.0, 6.0, 6.0, -20.0], [0.0, 0.0, 4.0, 4.0, 45.0],
                   [40.0, 40.0, 2.0, 2.0, 0.0]]])
    ov = torch_npu.npu_rotated_overlaps(_npu(a), _npu(b)).cpu().numpy()
    iou = torch_npu.npu_rotated_iou(_npu(a), _npu(b)).cpu().numpy()
    assert ov.shape == (1, 2, 3) and iou.shape == (1, 2, 3)
    for i in range(2):
        for j in range(3):
            ref = _mc_overlap(a[0, i], b[0, j])
            assert abs(ov[0, i, j] - ref) <= 0.02 * max(ref, 1.0)
            union = a[0, i, 2] * a[0, i, 3] + b[0, j, 2] * b[0, j, 3] - ov[0, i, j]
            np.testing.assert_allclose(iou[0, i, j], ov[0, i, j] / union, rtol=1e-5)
    # a square and itself turned 45 degrees: a regular octagon, 8 (sqrt 2 - 1) of the side^2 / 2
    np.testing.assert_allclose(ov[0, 1, 1], 16 * 2 * (math.sqrt(2) - 1), rtol=1e-5)
    with pytest.raises(RuntimeError, match=r"\[B, N, 5\]"):
        torch_npu.npu_rotated_overlaps(_npu(a[0]), _npu(b))


def test_nms_rotated():
    boxes = np.array([[10, 10, 8, 4, 0], [10.5, 10, 8, 4, 5], [30, 30, 4, 4, 45],
                      [10, 10, 8, 4, 90], [30, 30, 4, 4, 40]], np.float64)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.95])
    keep, num = torch_npu.npu_nms_rotated(_npu(boxes), _npu(scores), 0.5)
    # 4 (0.95) keeps; 0 keeps (far from 4); 1 overlaps 0 heavily; 2 overlaps 4 heavily;
    # 3 (the same box turned 90 degrees) overlaps 0 by 16 / (32 + 32 - 16) = 1/3 < 0.5
    assert keep.cpu().tolist() == [4, 0, 3] and num.cpu().tolist() == [3]
    assert keep.dtype == torch.int64


# ---- RoI Align / PS RoI pooling --------------------------------------------------------------

def _bilinear(plane, y, x):
    H, W = plane.shape
    if y < -1 or y > H or x < -1 or x > W:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= H - 1:
        y0 = y1 = H - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= W - 1:
        x0 = x1 = W - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * plane[y0, x0] + (1 - ly) * lx * plane[y0, x1] +
            ly * (1 - lx) * plane[y1, x0] + ly * lx * plane[y1, x1])


def _ref_roi_align(x, rois, scale, ph, pw, sample, end_mode):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    for r, roi in enumerate(rois):
        add = 1.0 if end_mode == 1 else 0.0
        sw, sh = roi[1] * scale, roi[2] * scale
        rw = max((roi[3] + add) * scale - sw, 1.0)
        rh = max((roi[4] + add) * scale - sh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = sample if sample > 0 else math.ceil(rh / ph)
        gw = sample if sample > 0 else math.ceil(rw / pw)
        for c in range(x.shape[1]):
            for i in range(ph):
                for j in range(pw):
                    acc = sum(_bilinear(x[int(roi[0]), c], sh + i * bh + (iy + 0.5) * bh / gh,
                                        sw + j * bw + (ix + 0.5) * bw / gw)
                              for iy in range(gh) for ix in range(gw))
                    out[r, c, i, j] = acc / (gh * gw)
    return out


@pytest.mark.parametrize("sample,end_mode", [(2, 0), (0, 1)])
def test_roi_align_forward_and_adjoint_backward(sample, end_mode):
    x = RNG.uniform(-1, 1, (2, 3, 9, 11))
    rois = np.array([[0, 1.0, 2.0, 30.0, 25.0], [1, -4.0, 0.0, 12.0, 40.0],
                     [1, 20.0, 20.0, 21.0, 21.0]])
    got = torch_npu.npu_roi_align(_npu(x), _npu(rois), 0.25, 3, 4, sample, end_mode)
    ref = _ref_roi_align(x, rois, 0.25, 3, 4, sample, end_mode)
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-5, atol=1e-6)
    # the backward is the forward's adjoint: <A x, g> == <x, A^T g>
    g = RNG.uniform(-1, 1, ref.shape)
    gi = torch_npu.npu_roi_alignbk(_npu(g), _npu(rois), list(x.shape), 4, 3, 0.25, sample,
                                   end_mode).cpu().numpy()
    np.testing.assert_allclose((ref * g).sum(), (x * gi).sum(), rtol=1e-5)
    # autograd reaches npu_roi_alignbk
    tx = _npu(x).requires_grad_()
    torch_npu.npu_roi_align(tx, _npu(rois), 0.25, 3, 4, sample, end_mode).backward(_npu(g))
    np.testing.assert_allclose(tx.grad.cpu().numpy(), gi, rtol=1e-5, atol=1e-6)


def test_ps_roi_pooling_forward_and_backward():
    group, dim = 2, 3
    x = RNG.uniform(0, 1, (2, dim * group * group, 8, 8))
    rois = np.array([[[0, 1], [2, 0], [2, 4], [20, 30], [14, 30]]], np.float64)  # [1, 5, 2]
    scale = 0.5
    got = torch_npu.npu_ps_roi_pooling(_npu(x), _npu(rois), scale, group, dim).cpu().numpy()
    ref = np.zeros((2, dim, group, group))
    for r in range(2):
        bi, x1, y1, x2, y2 = rois[0, :, r]
        sw, sh = round(x1) * scale, round(y1) * scale
        rw = max((round(x2) + 1) * scale - sw, 0.1)
        rh = max((round(y2) + 1) * scale - sh, 0.1)
        for c in range(dim):
            for i in range(group):
                for j in range(group):
                    h0 = min(max(int(math.floor(i * rh / group + sh)), 0), 8)
                    h1 = min(max(int(math.ceil((i + 1) * rh / group + sh)), 0), 8)
                    w0 = min(max(int(math.floor(j * rw / group + sw)), 0), 8)
                    w1 = min(max(int(math.ceil((j + 1) * rw / group + sw)), 0), 8)
                    if h1 > h0 and w1 > w0:
                        ref[r, c, i, j] = x[int(bi), (c * group + i) * group + j,
                                            h0:h1, w0:w1].mean()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    tx = _npu(x).requires_grad_()
    g = RNG.uniform(-1, 1, ref.shape)
    torch_npu.npu_ps_roi_pooling(tx, _npu(rois), scale, group, dim).backward(_npu(g))
    np.testing.assert_allclose((ref * g).sum(), (x * tx.grad.cpu().numpy()).sum(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="output_dim \\* group_size"):
        torch_npu.npu_ps_roi_pooling(_npu(x[:, :5]), _npu(rois), scale, group, dim)


def test_roi_align_refuses_bad_input():
    x = _npu(np.zeros((1, 1, 4, 4)))
    with pytest.raises(RuntimeError, match=r"rois must have shape \[R, 5\]"):
        torch_npu.npu_roi_align(x, _npu(np.zeros((2, 4))), 1.0, 2, 2, 2, 0)
    with pytest.raises(RuntimeError, match="roi_end_mode must be 0 or 1"):
        torch_npu.npu_roi_align(x, _npu(np.zeros((2, 5))), 1.0, 2, 2, 2, 3)
    with pytest.raises(RuntimeError, match="found at least two devices"):
        torch_npu.npu_roi_align(x, torch.zeros(2, 5), 1.0, 2, 2, 2, 0)


# ---- deformable convolution ------------------------------------------------------------------

def _ref_deformable_sample(x, off, k, stride, pad_top, pad_left, G):
    """NumPy float64 model of the sampling step: [N, C, Ho * KH, Wo * KW]."""
    N, C, H, W = x.shape
    _, _, Ho, Wo = off.shape
    KH, KW = k
    out = np.zeros((N, C, Ho * KH, Wo * KW))
    cg = C // G
    for n in range(N):
        for g in range(G):
            for kh in range(KH):
                for kw in range(KW):
                    ch = g * KH * KW + kh * KW + kw
                    for ho in range(Ho):
                        for wo in range(Wo):
                            px = wo * stride - pad_left + kw + off[n, ch, ho, wo]
                            py = ho * stride - pad_top + kh + off[n, G * KH * KW + ch, ho, wo]
                            s = off[n, 2 * G * KH * KW + ch, ho, wo]
                            y0, x0 = math.floor(py), math.floor(px)
                            fy, fx = py - y0, px - x0
                            v = np.zeros(cg)
                            corners = ((y0, x0, (1 - fy) * (1 - fx)), (y0 + 1, x0, fy * (1 - fx)),
                                       (y0, x0 + 1, (1 - fy) * fx), (y0 + 1, x0 + 1, fy * fx))
                            for yy, xx, w in corners:
                                if 0 <= yy < H and 0 <= xx < W:
                                    v += w * x[n, g * cg:(g + 1) * cg, yy, xx]
                            out[n, g * cg:(g + 1) * cg, ho * KH + kh, wo * KW + kw] = v * s
    return out


@pytest.fixture
def no_hf32():
    """Convolutions in full float32 (torch_npu's default reads float32 as HF32)."""
    saved = torch.npu.conv.allow_hf32
    torch.npu.conv.allow_hf32 = False
    yield
    torch.npu.conv.allow_hf32 = saved


def test_deformable_conv2d_forward_and_backward(no_hf32):
    N, C, H, W, Cout, k, G = 1, 4, 6, 7, 3, (3, 3), 2
    x = RNG.uniform(-1, 1, (N, C, H, W))
    weight = RNG.uniform(-1, 1, (Cout, C, *k))
    bias = RNG.uniform(-1, 1, Cout)
    off = RNG.uniform(-1.5, 1.5, (N, 3 * G * 9, H, W))
    out, sampled = torch_npu.npu_deformable_conv2d(
        _npu(x), _npu(weight), _npu(off), _npu(bias), [3, 3], [1, 1, 1, 1], [1, 1, 1, 1],
        deformable_groups=G)
    ref_s = _ref_deformable_sample(x, off, k, 1, 1, 1, G)
    np.testing.assert_allclose(sampled.cpu().numpy(), ref_s, rtol=1e-5, atol=1e-5)
    ref_out = torch.nn.functional.conv2d(torch.from_numpy(ref_s), torch.from_numpy(weight),
                                         torch.from_numpy(bias), stride=3).numpy()
    assert out.shape == (N, Cout, H, W)
    np.testing.assert_allclose(out.cpu().numpy(), ref_out, rtol=1e-4, atol=1e-4)
    # the sampling's backward is its adjoint in x (linear in x)
    g = RNG.uniform(-1, 1, ref_s.shape)
    gx, goff = torch.ops.npu._npu_deformable_offsets_backward(
        _npu(g), _npu(x), _npu(off), [3, 3], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], G, True)
    np.testing.assert_allclose((ref_s * g).sum(), (x * gx.cpu().numpy()).sum(), rtol=1e-5)
    # offset gradients against central differences of the float64 model (positions kept away
    # from integer crossings by the small step)
    h = 1e-5
    for idx in [(0, 3, 2, 2), (0, 3 + G * 9, 4, 1), (0, 5 + 2 * G * 9, 1, 5)]:
        op_, om = off.copy(), off.copy()
        op_[idx] += h
        om[idx] -= h
        num = ((_ref_deformable_sample(x, op_, k, 1, 1, 1, G) -
                _ref_deformable_sample(x, om, k, 1, 1, 1, G)) * g).sum() / (2 * h)
        np.testing.assert_allclose(goff.cpu().numpy()[idx], num, rtol=1e-3, atol=1e-4)
    # autograd and npu_deformable_conv2dbk agree
    tx, to = _npu(x).requires_grad_(), _npu(off).requires_grad_()
    tw, tb = _npu(weight).requires_grad_(), _npu(bias).requires_grad_()
    o, s = torch_npu.npu_deformable_conv2d(tx, tw, to, tb, [3, 3], [1, 1, 1, 1], [1, 1, 1, 1],
                                           deformable_groups=G)
    go = _npu(RNG.uniform(-1, 1, tuple(o.shape)))
    o.backward(go)
    dx, dw, doff, db = torch_npu.npu_deformable_conv2dbk(
        _npu(x), go, s.detach(), _npu(weight), _npu(off), [3, 3], [1, 1, 1, 1], [1, 1, 1, 1],
        deformable_groups=G)
    for a, b in ((tx.grad, dx), (tw.grad, dw), (to.grad, doff), (tb.grad, db)):
        np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="3 \\* deformable_groups"):
        torch_npu.npu_deformable_conv2d(_npu(x), _npu(weight), _npu(off[:, :10]), None, [3, 3],
                                        [1, 1, 1, 1], [1, 1, 1, 1])


def test_npu_conv2d_matches_cpu(no_hf32):
    x, w = RNG.uniform(-1, 1, (2, 3, 8, 8)), RNG.uniform(-1, 1, (4, 3, 3, 3))
    got = torch_npu.npu_conv2d(_npu(x), _npu(w), None, [2, 2], [1, 1, 1, 1], [1, 1], 1)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                     padding=1)
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(NotImplementedError, match="asymmetric padding"):
        torch_npu.npu_conv2d(_npu(x), _npu(w), None, [1, 1], [1, 0, 1, 1], [1, 1], 1)


def test_fake_kernels_give_the_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.rand(2, 8, 16, 16).npu()
        assert torch_npu.npu_roi_align(x, torch.rand(5, 5).npu(), 0.5, 3, 4, 2, 0).shape == \
            (5, 8, 3, 4)
        assert torch_npu.npu_ps_roi_pooling(x, torch.rand(2, 5, 3).npu(), 0.5, 2, 2).shape == \
            (6, 2, 2, 2)
        sel, valid = torch_npu.npu_nms_v4(torch.rand(9, 4).npu(), torch.rand(9).npu(), 4,
                                          torch.tensor(0.5).npu(), torch.tensor(0.1).npu())
        assert sel.shape == (4,) and sel.dtype == torch.int32 and valid.shape == ()
        out, sampled = torch_npu.npu_deformable_conv2d(
            x, torch.rand(4, 8, 3, 3).npu(), torch.rand(2, 27, 16, 16).npu(), None, [3, 3],
            [1, 1, 1, 1], [1, 1, 1, 1])
        assert out.shape == (2, 4, 16, 16) and sampled.shape == (2, 8, 48, 48)
        assert torch_npu.npu_rotated_iou(torch.rand(1, 3, 5).npu(),
                                         torch.rand(1, 4, 5).npu()).shape == (1, 3, 4)
