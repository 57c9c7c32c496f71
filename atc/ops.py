"""The operator table of the converter: for each ONNX op, its shape rule and a NumPy body.

The shape rule gives the outputs' (dtype, shape) from the inputs' and the attributes (shape
inference); the NumPy body evaluates the op on constants (constant folding). `ENGINE_OPS` is
what the C++ engine runs (engine/ops.cpp); the other ops here are accepted only where constant
folding removes them (shape arithmetic such as Shape -> Gather -> Concat -> Reshape).
"""

from __future__ import annotations

import math

import numpy as np

# Ops the engine executes (after atc's rewrites: Gemm becomes MatMul, BatchNormalization is
# folded into a Conv or into a per-channel scale and shift, Flatten / Squeeze / Unsqueeze /
# Reshape become Reshape, Identity and Dropout disappear).
ENGINE_OPS = {
    "Conv", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Sigmoid", "Tanh", "Erf",
    "Gelu", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Sin", "Cos", "LeakyRelu",
    "Clip", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "MaxPool",
    "AveragePool", "GlobalAveragePool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    # Data movement, any dtype.
    "Reshape", "Transpose", "Concat", "Split", "Gather", "GatherElements", "Slice", "Expand",
    "Cast", "Where",
    # Tests and masks (they write bool).
    "IsNaN", "IsInf", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not",
    "And", "Or",
}
# Ops only atc writes (fusions), which an ONNX file may not contain.
FUSED_OPS = {"Attention"}
ENGINE_OPS |= FUSED_OPS
# Engine ops that compute in float32: every input must be float32 (the others move data of
# any dtype, or test it).
DATA_OPS = {"Reshape", "Transpose", "Concat", "Split", "Gather", "GatherElements", "Slice",
            "Expand", "Cast", "Where"}
TEST_OPS = {"IsNaN", "IsInf", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
            "Not", "And", "Or"}
FLOAT_OPS = ENGINE_OPS - DATA_OPS - TEST_OPS
# The dtypes a tensor the engine computes (not a weight) may have.
ENGINE_DTYPES = {np.dtype(t) for t in ("float32", "int64", "int32", "bool")}
REDUCE = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}
# ONNX ops atc accepts: the engine's, those it rewrites into them, and shape arithmetic that
# must fold away.
REWRITTEN = {"Gemm", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Constant"}
FOLD_ONLY = {"Shape", "ConstantOfShape", "Range", "Trilu"}
SUPPORTED = (ENGINE_OPS - FUSED_OPS) | REWRITTEN | FOLD_ONLY
MIN_OPSET, MAX_OPSET = 13, 21

UNARY = {
    "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Sigmoid": lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "Tanh": np.tanh, "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Neg": np.negative,
    "Abs": np.abs, "Reciprocal": np.reciprocal,
    "Sin": np.sin, "Cos": np.cos,
    "Erf": lambda x: np.vectorize(math.erf, otypes=[x.dtype])(x),
}
TESTS = {"IsNaN": np.isnan, "IsInf": np.isinf, "Not": np.logical_not}
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Pow": np.power}
COMPARE = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
           "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
           "And": np.logical_and, "Or": np.logical_or}


class ShapeError(ValueError):
    pass


def norm_axis(axis: int, rank: int, node: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"node {node}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def broadcast(a, b, node):
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ShapeError(f"node {node}: shapes {list(a)} and {list(b)} do not broadcast") from None


def pool_out(size, k, pad_begin, pad_end, stride, dilation, ceil_mode):
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def reshape_target(shape, target, allowzero, node):
    target = [int(v) for v in target]
    out = [shape[i] if v == 0 and not allowzero else v for i, v in enumerate(target)]
    if out.count(-1) > 1:
        raise ShapeError(f"node {node}: Reshape target {target} has more than one -1")
    total = int(np.prod(shape))
    if -1 in out:
        known = int(np.prod([v for v in out if v != -1]))
        out[out.index(-1)] = total // known if known else 0
    if int(np.prod(out)) != total:
        raise ShapeError(f"node {node}: cannot reshape {list(shape)} into {target}")
    return tuple(out)


def infer(op: str, node: str, ins: list, attrs: dict, consts: list) -> list:
    """ins: (dtype, shape) per input (None for a missing optional one); consts: the input's
    value where it is a constant, else None. Returns (dtype, shape) per output."""
    x = ins[0] if ins else None
    if op in UNARY or op in ("LeakyRelu", "Clip", "Gelu", "Softmax", "LogSoftmax",
                             "Identity", "Dropout"):
        return [x]
    if op in TESTS:
        return [(np.dtype(bool), x[1])]
    if op in BINARY or op in COMPARE:
        dt = np.dtype(bool) if op in COMPARE else x[0]
        return [(dt, broadcast(x[1], ins[1][1], node))]
    if op == "Where":
        return [(ins[1][0], broadcast(broadcast(x[1], ins[1][1], node), ins[2][1], node))]
    if op == "Conv":
        n, c, *spatial = x[1]
        w = ins[1][1]
        if len(spatial) != 2:
            raise ShapeError(f"node {node}: Conv on a {len(spatial)}-D input; the engine runs "
                             "2-D convolutions only (inputs [N, C, H, W])")
        k = attrs.get("kernel_shape", w[2:])
        s = attrs.get("strides", [1, 1])
        d = attrs.get("dilations", [1, 1])
        p = attrs.get("pads", [0, 0, 0, 0])
        if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            raise ShapeError(f"node {node}: Conv auto_pad is not supported; export with "
                             "explicit pads")
        hw = [pool_out(spatial[i], k[i], p[i], p[i + 2], s[i], d[i], False) for i in range(2)]
        return [(x[0], (n, w[0], *hw))]
    if op in ("MaxPool", "AveragePool"):
        n, c, *spatial = x[1]
        if len(spatial) != 2:
            raise ShapeError(f"node {node}: {op} on a {len(spatial)}-D input; only 2-D pooling "
                             "is supported")
        k = attrs["kernel_shape"]
        s = attrs.get("strides", [1, 1])
        d = attrs.get("dilations", [1, 1])
        p = attrs.get("pads", [0, 0, 0, 0])
        ceil = bool(attrs.get("ceil_mode", 0))
        hw = [pool_out(spatial[i], k[i], p[i], p[i + 2], s[i], d[i], ceil) for i in range(2)]
        return [(x[0], (n, c, *hw))]
    if op == "GlobalAveragePool":
        return [(x[0], (*x[1][:2], *[1] * (len(x[1]) - 2)))]
    if op == "Gemm":
        a, b = x[1], ins[1][1]
        m = a[1] if attrs.get("transA", 0) else a[0]
        n = b[0] if attrs.get("transB", 0) else b[1]
        return [(x[0], (m, n))]
    if op == "MatMul":
        a, b = list(x[1]), list(ins[1][1])
        if len(a) < 1 or len(b) < 1:
            raise ShapeError(f"node {node}: MatMul of a scalar")
        a1, b1 = len(a) == 1, len(b) == 1
        a = [1] + a if a1 else a
        b = b + [1] if b1 else b
        if a[-1] != b[-2]:
            raise ShapeError(f"node {node}: MatMul of {list(x[1])} and {list(ins[1][1])}: "
                             "inner dimensions differ")
        batch = broadcast(a[:-2], b[:-2], node)
        out = list(batch) + ([] if a1 else [a[-2]]) + ([] if b1 else [b[-1]])
        return [(x[0], tuple(out))]
    if op in ("LayerNormalization", "BatchNormalization"):
        return [x]
    if op == "Flatten":
        axis = norm_axis(attrs.get("axis", 1), len(x[1]) + 1, node)
        return [(x[0], (int(np.prod(x[1][:axis])), int(np.prod(x[1][axis:]))))]
    if op == "Reshape":
        if consts[1] is None:
            raise ShapeError(f"node {node}: Reshape's shape is not a constant after folding; "
                             "give static input shapes with --input_shape")
        return [(x[0], reshape_target(x[1], consts[1], attrs.get("allowzero", 0), node))]
    if op in ("Squeeze", "Unsqueeze"):
        axes = attrs.get("axes")
        if axes is None and len(ins) > 1 and ins[1] is not None:
            if consts[1] is None:
                raise ShapeError(f"node {node}: {op}'s axes are not a constant")
            axes = [int(v) for v in consts[1]]
        shape = list(x[1])
        if op == "Squeeze":
            axes = [norm_axis(a, len(shape), node) for a in axes] if axes is not None else [
                i for i, v in enumerate(shape) if v == 1]
            return [(x[0], tuple(v for i, v in enumerate(shape) if i not in axes))]
        rank = len(shape) + len(axes)
        for a in sorted(norm_axis(a, rank, node) for a in axes):
            shape.insert(a, 1)
        return [(x[0], tuple(shape))]
    if op == "Transpose":
        perm = attrs.get("perm", list(range(len(x[1])))[::-1])
        return [(x[0], tuple(x[1][p] for p in perm))]
    if op == "Concat":
        axis = norm_axis(attrs["axis"], len(x[1]), node)
        shape = list(x[1])
        shape[axis] = sum(i[1][axis] for i in ins)
        return [(x[0], tuple(shape))]
    if op == "Constant":
        v = attrs["value"]
        return [(v.dtype, v.shape)]
    if op in REDUCE:
        axes = reduce_axes(len(x[1]), len(ins), consts, attrs, node)
        keep = attrs.get("keepdims", 1)
        shape = [1 if i in axes else d for i, d in enumerate(x[1]) if keep or i not in axes]
        return [(x[0], tuple(shape))]
    if op == "Split":
        axis = norm_axis(attrs.get("axis", 0), len(x[1]), node)
        sizes = split_sizes(x[1][axis], len(ins), consts, attrs, node)
        return [(x[0], (*x[1][:axis], s, *x[1][axis + 1:])) for s in sizes]
    if op == "Shape":
        return [(np.dtype("int64"), (len(x[1]),))]
    if op == "Gather":
        axis = norm_axis(attrs.get("axis", 0), len(x[1]), node)
        return [(x[0], (*x[1][:axis], *ins[1][1], *x[1][axis + 1:]))]
    if op == "GatherElements":
        return [(x[0], ins[1][1])]
    if op == "Cast":
        return [(np.dtype(_onnx_dtype(attrs["to"])), x[1])]
    if op == "Expand":
        if consts[1] is None:
            raise ShapeError(f"node {node}: Expand's shape is not a constant after folding; "
                             "give static input shapes with --input_shape")
        return [(x[0], broadcast(x[1], [int(v) for v in consts[1]], node))]
    if op == "Slice":
        present = [i is not None for i in ins]
        return [(x[0], tuple(len(r) for r in slice_ranges(x[1], consts, present, node)))]
    # ConstantOfShape, Range: only ever folded, shape from the folded value.
    return [None]


def slice_ranges(shape, consts: list, present: list, node: str) -> list[range]:
    """The index range a Slice keeps along each dimension (ONNX's clamping rules). consts:
    the inputs' values (None where not constant); present: whether each input is given."""
    consts = list(consts) + [None] * (5 - len(consts))
    present = list(present) + [False] * (5 - len(present))
    if any(p and c is None for p, c in zip(present[1:], consts[1:])):
        raise ShapeError(f"node {node}: Slice's starts / ends / axes / steps are not constants "
                         "after folding; give static input shapes with --input_shape")
    starts, ends = consts[1], consts[2]
    axes = consts[3] if present[3] else range(len(starts))
    steps = consts[4] if present[4] else [1] * len(starts)
    ranges = [range(d) for d in shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(int(a), len(shape), node)
        if int(st) == 0:
            raise ShapeError(f"node {node}: Slice step 0 on axis {a}")
        ranges[a] = range(*slice(int(s), int(e), int(st)).indices(shape[a]))
    return ranges


def split_sizes(dim: int, num_inputs: int, consts: list, attrs: dict, node: str) -> list[int]:
    if num_inputs > 1 and consts[1] is not None:
        sizes = [int(v) for v in consts[1]]
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        n = attrs.get("num_outputs", attrs.get("_num_outputs"))
        sizes = [-(-dim // n)] * (n - 1) + [dim - -(-dim // n) * (n - 1)]
    if sum(sizes) != dim:
        raise ShapeError(f"node {node}: Split sizes {sizes} do not add up to {dim}")
    return sizes


def reduce_axes(rank: int, num_inputs: int, consts: list, attrs: dict, node: str) -> list[int]:
    """The reduced axes, normalized and sorted (every axis when none are given, unless
    noop_with_empty_axes)."""
    if "axes" in attrs:
        axes = list(attrs["axes"])
    elif num_inputs > 1 and consts[1] is not None:
        axes = [int(v) for v in consts[1]]
    elif num_inputs > 1:
        raise ShapeError(f"node {node}: reduction axes computed at run time are not supported")
    else:
        axes = []
    if not axes:
        return [] if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({norm_axis(a, rank, node) for a in axes})


def _onnx_dtype(code: int):
    from onnx import helper
    return helper.tensor_dtype_to_np_dtype(code)


def evaluate(op: str, node: str, vals: list, attrs: dict) -> list:
    """The op on constant NumPy inputs (constant folding)."""
    x = vals[0] if vals else None
    if op in UNARY:
        return [UNARY[op](x)]
    if op in TESTS:
        return [TESTS[op](x)]
    if op in BINARY:
        return [BINARY[op](x, vals[1]).astype(x.dtype)]
    if op in COMPARE:
        return [COMPARE[op](x, vals[1])]
    if op == "GatherElements":
        return [np.take_along_axis(x, vals[1], axis=attrs.get("axis", 0))]
    if op == "Where":
        return [np.where(x, vals[1], vals[2])]
    if op in REDUCE:
        axes = reduce_axes(x.ndim, len(vals), vals, attrs, node)
        return [REDUCE[op](x, axis=tuple(axes), keepdims=bool(attrs.get("keepdims", 1)))
                .astype(x.dtype)]
    if op == "Trilu":
        k = int(vals[1]) if len(vals) > 1 and vals[1] is not None else 0
        return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]
    if op == "Split":
        axis = attrs.get("axis", 0) % x.ndim
        sizes = split_sizes(x.shape[axis], len(vals), vals, attrs, node)
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    if op == "Constant":
        return [attrs["value"]]
    if op == "Shape":
        return [np.array(x.shape, dtype=np.int64)]
    if op == "Gather":
        return [np.take(x, vals[1], axis=attrs.get("axis", 0))]
    if op == "Cast":
        return [x.astype(_onnx_dtype(attrs["to"]))]
    if op == "Concat":
        return [np.concatenate(vals, axis=attrs["axis"])]
    if op == "Unsqueeze":
        axes = attrs.get("axes") if "axes" in attrs else [int(v) for v in vals[1]]
        rank = x.ndim + len(axes)
        return [np.expand_dims(x, tuple(a % rank for a in axes))]
    if op == "Squeeze":
        axes = attrs.get("axes") if "axes" in attrs else (
            [int(v) for v in vals[1]] if len(vals) > 1 and vals[1] is not None else None)
        return [np.squeeze(x, axis=None if axes is None else tuple(axes))]
    if op == "Reshape":
        return [x.reshape(reshape_target(x.shape, vals[1], attrs.get("allowzero", 0), node))]
    if op == "Flatten":
        axis = attrs.get("axis", 1) % (x.ndim + 1)
        return [x.reshape(int(np.prod(x.shape[:axis])), -1)]
    if op == "Transpose":
        return [np.transpose(x, attrs.get("perm"))]
    if op == "ConstantOfShape":
        v = attrs.get("value", np.zeros(1, np.float32))
        return [np.full(tuple(int(d) for d in x), v.reshape(-1)[0], dtype=v.dtype)]
    if op == "Range":
        return [np.arange(x, vals[1], vals[2]).astype(x.dtype)]
    if op == "Expand":
        return [x * np.ones(tuple(int(d) for d in vals[1]), dtype=x.dtype)]
    if op == "Slice":
        starts, ends = vals[1], vals[2]
        axes = vals[3] if len(vals) > 3 and vals[3] is not None else range(len(starts))
        steps = vals[4] if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
        idx = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            idx[int(a)] = slice(int(s), int(e), int(st))
        return [x[tuple(idx)]]
    if op in ("Identity", "Dropout"):
        return [x]
    if op == "MatMul":
        return [np.matmul(x, vals[1])]
    return None  # not foldable here: left for the engine
