"""ONNX -> .om: the graph engine's passes, run once at conversion.

How it works:
  - import: the ONNX graph becomes a list of nodes over named tensors; initializers and
    Constant nodes are constants; every node is checked against atc.ops.SUPPORTED first, so
    an unsupported model is refused before any work, naming op, node and opset;
  - shape inference and constant folding in one walk (nodes are in topological order): each
    node's output dtypes and shapes come from atc.ops.infer; a node whose inputs are all
    constants (or a Shape of a static tensor) is evaluated with NumPy and removed;
  - rewrites: Identity / Dropout vanish, Flatten / Squeeze / Unsqueeze become Reshape, Gemm
    becomes MatMul, Clip's bounds become attributes;
  - fusion: a decomposed layer norm (exports below opset 17) into LayerNormalization, the
    five-op erf GELU into Gelu,
    Conv + BatchNormalization (the BN folded into the weights), MatMul + bias Add, and
    Conv / MatMul + Relu / Sigmoid / Tanh, Conv (+ Relu) + a 2x2 / stride 2 MaxPool; a BN left
    alone becomes a per-channel scale and shift;
  - dead-node removal: only nodes that reach a graph output stay;
  - static memory planning: every intermediate tensor gets an offset in one arena; tensors
    whose lifetimes (producer .. last consumer, in node order) overlap never share bytes,
    others may. Largest first, each at the lowest offset that fits.
Everything iterates in the model's own order, so the same input gives the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from atc import om
from atc.ops import (COMPARE, ENGINE_DTYPES, ENGINE_OPS, FLOAT_OPS, FOLD_ONLY, MAX_OPSET,
                     MIN_OPSET, REDUCE, SUPPORTED, ShapeError, evaluate, infer, norm_axis,
                     reduce_axes, slice_ranges)

FUSABLE_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")


class ConvertError(ValueError):
    """A model atc cannot convert; the message names the node and the fix."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)


@dataclass
class Tensor:
    dtype: np.dtype
    shape: tuple
    value: np.ndarray | None = None


class Graph:
    def __init__(self):
        self.nodes: list[Node] = []
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.opset = 0
        # A float16 / bfloat16 model runs in float32 with each op's result rounded to the
        # model's type (see widen_narrow_model): `narrow` holds the float32 tensors that stand
        # for 16-bit ones, `narrow_kind` that type ("float16" / "bfloat16", None for none).
        self.narrow: set[str] = set()
        self.narrow_kind: str | None = None

    def const(self, name):
        t = self.tensors.get(name)
        return None if t is None else t.value

    def consumers(self):
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    uses.setdefault(i, []).append(n)
        return uses

    def add_const(self, name, value):
        # np.ascontiguousarray would turn a 0-d scalar into shape (1,): keep the rank.
        value = np.array(value, order="C", copy=None)
        self.tensors[name] = Tensor(value.dtype, tuple(value.shape), value)
        return name


# ---- import -------------------------------------------------------------------------------

def parse_input_shape(text: str | None, dynamic: bool = False) -> dict[str, tuple]:
    """--input_shape; -1 marks a dimension that --dynamic_batch_size / --dynamic_dims give."""
    shapes = {}
    if not text:
        return shapes
    for item in text.split(";"):
        name, sep, dims = item.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            raise ConvertError("E10002", f"Value [{text}] for parameter [--input_shape] is "
                               "invalid. Reason: expected \"name:d0,d1,...;name2:...\" with "
                               "integer dimensions, e.g. \"x:1,3,224,224\"") from None
        if any(d < 1 and not (dynamic and d == -1) for d in shape):
            raise ConvertError("E10002", f"Value [{text}] for parameter [--input_shape] is "
                               f"invalid. Reason: dimension of {name} must be positive"
                               + ("" if dynamic else "; a -1 (dynamic) dimension needs its "
                                  "values as gears: --dynamic_batch_size or --dynamic_dims"))
        shapes[name] = shape
    return shapes


def import_onnx(path: str, input_shapes: dict[str, tuple]) -> Graph:
    import onnx
    from onnx import helper, numpy_helper

    try:
        model = onnx.load(path)
    except FileNotFoundError:
        raise ConvertError("E10001", f"Value [{path}] for parameter [--model] is invalid. "
                           "Reason: the file does not exist") from None
    except Exception as e:  # onnx raises DecodeError and others for a file that is not ONNX
        raise ConvertError("E19000", f"{path} is not a readable ONNX model "
                           f"({type(e).__name__}: {e})") from None
    g = Graph()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            g.opset = imp.version
    if not MIN_OPSET <= g.opset <= MAX_OPSET:
        raise ConvertError("E19010", f"{path} uses ONNX opset {g.opset}; atc reads opsets "
                           f"{MIN_OPSET} to {MAX_OPSET}: export with opset_version in that range")
    # Check every node before doing any work: the user sees every unsupported op at once.
    bad = [n for n in model.graph.node if n.domain not in ("", "ai.onnx") or
           n.op_type not in SUPPORTED]
    if bad:
        lines = [f"op {n.op_type!r}{' (domain ' + n.domain + ')' if n.domain else ''} in node "
                 f"{n.name or '<unnamed>'!r}, opset {g.opset}" for n in bad]
        raise ConvertError("E19010", "the model has operators the engine does not support:\n  "
                           + "\n  ".join(lines) + "\nSupported: " + ", ".join(sorted(SUPPORTED)))
    for init in model.graph.initializer:
        g.add_const(init.name, numpy_helper.to_array(init))
    names = {vi.name for vi in model.graph.input}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise ConvertError("E10002", f"Value [{','.join(unknown)}] for parameter "
                           "[--input_shape] is invalid. Reason: the model has no input of "
                           f"that name; its inputs are {sorted(names)}")
    for vi in model.graph.input:
        if vi.name in g.tensors:
            continue  # an initializer listed as input (old exporters): a constant
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        shape = input_shapes.get(vi.name, tuple(dims))
        if input_shapes.get(vi.name) is not None and len(shape) != len(dims):
            raise ConvertError("E10002", f"--input_shape gives {vi.name} rank {len(shape)}; the "
                               f"model's input has rank {len(dims)}")
        if any(d < 1 for d in shape):
            raise ConvertError("E10002", f"input {vi.name} has a dynamic shape {dims}; give "
                               f"it with --input_shape=\"{vi.name}:...\"")
        g.tensors[vi.name] = Tensor(np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)),
                                    tuple(shape))
        g.inputs.append(vi.name)
    g.outputs = [vi.name for vi in model.graph.output]
    for i, n in enumerate(model.graph.node):
        attrs = {}
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if a.type == onnx.AttributeProto.TENSOR:
                v = numpy_helper.to_array(v)
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [int(x) if isinstance(x, (int, np.integer)) else x for x in v]
            attrs[a.name] = v
        if n.op_type == "Split":
            attrs["_num_outputs"] = len(n.output)
        g.nodes.append(Node(n.op_type, n.name or f"{n.op_type}_{i}", list(n.input),
                            list(n.output), attrs))
    widen_narrow_model(g, {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.output})
    return g


NARROW_ONNX = {10: "float16", 16: "bfloat16"}  # TensorProto.FLOAT16, BFLOAT16
ONNX_FLOAT = 1


def _narrow_name(dtype: np.dtype) -> str | None:
    return {"float16": "float16", "bfloat16": "bfloat16"}.get(np.dtype(dtype).name)


def widen_narrow_model(g: Graph, output_types: dict[str, int]) -> None:
    """A float16 / bfloat16 model becomes a float32 graph whose 16-bit tensors are marked
    (g.narrow): the engine computes each op in float32 and rounds its result to the model's
    type (to nearest even), as the card's fp16 / bf16 kernels accumulate in float32 and store
    16 bits. So:
      - 16-bit weights and Constant values become float32 (exactly: every 16-bit value is a
        float32 value);
      - a 16-bit graph input stays 16-bit (the caller's buffer) and is widened by a Cast at
        the start; a 16-bit graph output is narrowed by a Cast at the end;
      - a Cast to float16 / bfloat16 inside the graph becomes a float32 copy whose result is
        rounded (a Cast to float32 of a narrow tensor is a plain copy).
    A model mixing float16 and bfloat16 is refused."""
    kinds = set()

    def note(kind, where):
        kinds.add(kind)
        if len(kinds) > 1:
            raise ConvertError("E19012", f"the model mixes float16 and bfloat16 ({where}); the "
                               "engine runs one 16-bit type per model: export it in one of them")
    for name, t in list(g.tensors.items()):
        kind = _narrow_name(t.dtype)
        if kind and t.value is not None:
            note(kind, f"constant {name}")
            g.add_const(name, t.value.astype(np.float32))
            g.narrow.add(name)
    for n in g.nodes:
        if n.op == "Constant" and isinstance(n.attrs.get("value"), np.ndarray):
            kind = _narrow_name(n.attrs["value"].dtype)
            if kind:
                note(kind, f"node {n.name}")
                n.attrs["value"] = n.attrs["value"].astype(np.float32)
                n.attrs["_narrow"] = True
        if n.op == "Cast" and n.attrs.get("to") in NARROW_ONNX:
            note(NARROW_ONNX[n.attrs["to"]], f"node {n.name}")
            n.attrs["to"], n.attrs["_narrow"] = ONNX_FLOAT, True
    head, tail, rename = [], [], {}
    for name in g.inputs:
        kind = _narrow_name(g.tensors[name].dtype)
        if kind:
            note(kind, f"input {name}")
            wide = rename[name] = f"{name}__float32"
            head.append(Node("Cast", f"{name}__widen", [name], [wide], {"to": ONNX_FLOAT}))
            g.narrow.add(wide)
    for name in g.outputs:
        kind = NARROW_ONNX.get(output_types.get(name))
        if kind:
            note(kind, f"output {name}")
            wide = rename[name] = f"{name}__float32"
            tail.append(Node("Cast", f"{name}__narrow", [wide], [name],
                             {"to": output_types[name], "_final": True}))
    if not kinds:
        return
    g.narrow_kind = kinds.pop()
    for n in g.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        n.outputs = [rename.get(o, o) for o in n.outputs]
    g.nodes = head + g.nodes + tail


# ---- shape inference + constant folding --------------------------------------------------

def infer_and_fold(g: Graph) -> None:
    kept = []
    for n in g.nodes:
        ins = [g.tensors.get(i) if i else None for i in n.inputs]
        missing = [i for i, t in zip(n.inputs, ins) if i and t is None]
        if missing:
            raise ConvertError("E19999", f"node {n.name} ({n.op}) reads {missing[0]!r}, which "
                               "no earlier node produces (the graph is not topologically sorted)")
        consts = [t.value if t is not None else None for t in ins]
        values = None
        if n.op == "Shape" and ins[0] is not None:
            values = [np.array(ins[0].shape, dtype=np.int64)]
        elif all(c is not None for i, c in zip(n.inputs, consts) if i):
            values = evaluate(n.op, n.name, consts, n.attrs)
        narrow = bool(n.attrs.get("_narrow")) or (
            n.op != "Cast" and any(i in g.narrow for i in n.inputs))
        if values is not None:
            for name, v in zip(n.outputs, values):
                v = np.asarray(v)
                if narrow and v.dtype == np.float32:
                    v = _round_to(v, g.narrow_kind)
                    g.narrow.add(name)
                g.add_const(name, v)
            continue
        if n.op in FOLD_ONLY:
            raise ConvertError("E19010", f"node {n.name} (op {n.op!r}, opset {g.opset}) depends "
                               "on run-time data; the engine runs it only when constant folding "
                               "removes it. Give static shapes with --input_shape")
        try:
            outs = infer(n.op, n.name, [(t.dtype, t.shape) if t else None for t in ins],
                         n.attrs, consts)
        except ShapeError as e:
            raise ConvertError("E19011", f"shape inference failed: {e}") from None
        for name, o in zip(n.outputs, outs):
            if name:
                g.tensors[name] = Tensor(np.dtype(o[0]), tuple(int(d) for d in o[1]))
                if narrow and g.tensors[name].dtype == np.float32:
                    g.narrow.add(name)
        kept.append(n)
    g.nodes = kept


# ---- rewrites and fusion -----------------------------------------------------------------

def rewrite(g: Graph) -> None:
    rename: dict[str, str] = {}
    out = []
    for n in g.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        if n.op in ("Identity", "Dropout"):
            if n.outputs[0] in g.outputs:
                n.op, n.inputs, n.outputs, n.attrs = "Reshape", n.inputs[:1], n.outputs[:1], {}
            else:
                rename[n.outputs[0]] = n.inputs[0]
                continue
        elif n.op in ("Flatten", "Squeeze", "Unsqueeze", "Reshape"):
            n.op, n.inputs, n.attrs = "Reshape", n.inputs[:1], {}
        elif n.op == "Gemm":
            n.op = "MatMul"
            trans_b = n.attrs.get("transB", 0)
            weight = g.const(n.inputs[1])
            if trans_b and weight is not None and weight.ndim == 2:
                # A Linear layer's [out, in] weight is stored as [in, out] once here, so that
                # every run packs B's rows (contiguous) rather than gathering its columns.
                name = n.inputs[1] + "_transposed"
                if name not in g.tensors:
                    g.add_const(name, weight.T)
                n.inputs[1], trans_b = name, 0
            n.attrs = {"trans_a": n.attrs.get("transA", 0), "trans_b": trans_b,
                       "alpha": float(n.attrs.get("alpha", 1.0)),
                       "beta": float(n.attrs.get("beta", 1.0))}
        elif n.op == "Split" or n.op == "Expand" or n.op == "Cast":
            n.inputs = n.inputs[:1]  # the output's shape and dtype say the rest
            if n.op == "Cast":
                n.attrs = {}
        elif n.op == "Slice":
            # Per dimension: the first index kept and the step (the output's shape gives the
            # count).
            shape = g.tensors[n.inputs[0]].shape
            ranges = slice_ranges(shape, [None] + [g.const(i) for i in n.inputs[1:]],
                                  [bool(i) for i in n.inputs], n.name)
            n.attrs = {"starts": [r.start for r in ranges], "steps": [r.step for r in ranges]}
            n.inputs = n.inputs[:1]
        elif n.op in REDUCE:  # the axes become an attribute; the engine gets the data only
            rank = len(g.tensors[n.inputs[0]].shape)
            n.attrs = {"axes": reduce_axes(rank, len(n.inputs), [g.const(i) for i in n.inputs],
                                           n.attrs, n.name)}
            n.inputs = n.inputs[:1]
        elif n.op == "Clip":
            lo = g.const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None
            hi = g.const(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
            if (len(n.inputs) > 1 and n.inputs[1] and lo is None) or (
                    len(n.inputs) > 2 and n.inputs[2] and hi is None):
                raise ConvertError("E19010", f"node {n.name} (op 'Clip', opset {g.opset}): "
                                   "bounds computed at run time are not supported")
            n.attrs = {"min": float(lo) if lo is not None else -np.inf,
                       "max": float(hi) if hi is not None else np.inf}
            n.inputs = n.inputs[:1]
        out.append(n)
    g.nodes = out
    g.outputs = [rename.get(o, o) for o in g.outputs]


def _single_use(g: Graph, uses, name) -> Node | None:
    users = uses.get(name, [])
    return users[0] if len(users) == 1 and name not in g.outputs else None


def _drop(g: Graph, victim: Node, producer: Node) -> None:
    """Removes `victim` (a node fused into `producer`): producer now writes victim's output."""
    producer.outputs = [victim.outputs[0]]
    g.nodes.remove(victim)


def _scalar(value) -> float | None:
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def fuse_layer_norm(g: Graph) -> None:
    """The decomposed layer norm of exports below opset 17 -> one LayerNormalization:
    m = ReduceMean(x); d = x - m; v = ReduceMean(d ^ 2); y = d / Sqrt(v + eps), then an
    optional * gamma and + beta (constants over the normalized dims)."""
    for div in list(g.nodes):
        if div.op != "Div":
            continue
        prod = {o: n for n in g.nodes for o in n.outputs}
        uses = g.consumers()
        d_name, s_name = div.inputs
        sub, sqrt = prod.get(d_name), prod.get(s_name)
        if not (sub and sub.op == "Sub" and sqrt and sqrt.op == "Sqrt"):
            continue
        add = prod.get(sqrt.inputs[0])
        if not add or add.op != "Add":
            continue
        var_name, eps_name = add.inputs
        if g.const(eps_name) is None:
            var_name, eps_name = eps_name, var_name
        eps, var, mean = _scalar(g.const(eps_name)), prod.get(var_name), prod.get(sub.inputs[1])
        power = prod.get(var.inputs[0]) if var is not None else None
        x = sub.inputs[0]
        if (eps is None or not var or var.op != "ReduceMean" or not power or power.op != "Pow"
                or power.inputs[0] != d_name or _scalar(g.const(power.inputs[1])) != 2.0
                or not mean or mean.op != "ReduceMean" or mean.inputs[0] != x):
            continue
        shape = g.tensors[x].shape
        axes = mean.attrs["axes"]
        if not axes or axes != var.attrs["axes"] or axes != list(range(axes[0], len(shape))):
            continue
        chain = [mean, sub, power, var, add, sqrt]
        if any(len(uses.get(n.outputs[0], [])) != (2 if n is sub else 1) or
               n.outputs[0] in g.outputs for n in chain):
            continue
        width = int(np.prod(shape[axes[0]:]))
        affine = {}
        tail = div
        for op, key in (("Mul", "scale"), ("Add", "bias")):
            nxt = _single_use(g, g.consumers(), tail.outputs[0])
            if nxt is None or nxt.op != op:
                break
            other = nxt.inputs[1] if nxt.inputs[0] == tail.outputs[0] else nxt.inputs[0]
            value = g.const(other)
            if value is None or value.size != width or value.ndim > len(shape) - axes[0]:
                break
            affine[key] = value.reshape(-1)
            chain.append(nxt)
            tail = nxt
        dtype = g.tensors[x].dtype
        scale = affine.get("scale", np.ones(width, dtype))
        div.op, div.attrs = "LayerNormalization", {"axis": axes[0], "epsilon": eps}
        div.inputs = [x, g.add_const(f"{div.name}.ln_scale", scale.astype(dtype))]
        if "bias" in affine:
            div.inputs.append(g.add_const(f"{div.name}.ln_bias", affine["bias"].astype(dtype)))
        div.outputs = [tail.outputs[0]]
        for n in chain:
            g.nodes.remove(n)


def fuse_gelu(g: Graph) -> None:
    """The erf GELU as exported, x * (1 + erf(x / sqrt(2))) * 0.5 (five ops), -> one Gelu."""
    for erf in list(g.nodes):
        if erf.op != "Erf":
            continue
        prod, uses = {o: n for n in g.nodes for o in n.outputs}, g.consumers()
        scale = prod.get(erf.inputs[0])
        if not scale or scale.op not in ("Div", "Mul"):
            continue
        x, c = scale.inputs[0], _scalar(g.const(scale.inputs[1]))
        want = math.sqrt(2) if scale.op == "Div" else 1 / math.sqrt(2)
        if c is None or abs(c - want) > 1e-4:
            continue

        def other(node, name):
            return node.inputs[1] if node.inputs[0] == name else node.inputs[0]
        add = _single_use(g, uses, erf.outputs[0])
        if not add or add.op != "Add" or _scalar(g.const(other(add, erf.outputs[0]))) != 1.0:
            continue
        mul = _single_use(g, uses, add.outputs[0])
        if not mul or mul.op != "Mul" or other(mul, add.outputs[0]) != x:
            continue
        half = _single_use(g, uses, mul.outputs[0])
        if not half or half.op != "Mul" or _scalar(g.const(other(half, mul.outputs[0]))) != 0.5:
            continue
        if len(uses.get(scale.outputs[0], [])) != 1 or scale.outputs[0] in g.outputs:
            continue
        erf.op, erf.inputs, erf.outputs, erf.attrs = "Gelu", [x], half.outputs, {}
        for n in (scale, add, mul, half):
            g.nodes.remove(n)


def fuse_gelu_tanh(g: Graph) -> None:
    """The tanh GELU as written out (GPT-2's NewGELU), 0.5 * x * (1 + tanh(sqrt(2 / pi) *
    (x + 0.044715 * x ^ 3))) (eight ops; nine where x ^ 3 is x * (x * x), as the exporter
    writes gelu(approximate="tanh")), -> one Gelu(approximate="tanh")."""
    def other(node, name):
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def const_of(node, name):
        return _scalar(g.const(other(node, name)))

    for tanh in list(g.nodes):
        if tanh.op != "Tanh" or tanh not in g.nodes:
            continue
        prod, uses = {o: n for n in g.nodes for o in n.outputs}, g.consumers()
        scale = prod.get(tanh.inputs[0])
        if not scale or scale.op != "Mul" or len(scale.inputs) != 2:
            continue
        inner = scale.inputs[0] if g.const(scale.inputs[0]) is None else scale.inputs[1]
        c = const_of(scale, inner)
        add = prod.get(inner)
        if c is None or abs(c - math.sqrt(2 / math.pi)) > 1e-4 or not add or add.op != "Add":
            continue
        cube_mul = next((prod.get(i) for i in add.inputs
                         if prod.get(i) is not None and prod[i].op == "Mul"), None)
        if cube_mul is None:
            continue
        x = other(add, cube_mul.outputs[0])
        # x ^ 3 as Pow(x, 3) (GPT-2's NewGELU) or x * (x * x) (the exporter's tanh gelu).
        pw, cube_nodes = None, []
        for i in cube_mul.inputs:
            c3 = prod.get(i)
            if c3 is None:
                continue
            if c3.op == "Pow" and c3.inputs[0] == x and _scalar(g.const(c3.inputs[1])) == 3.0:
                pw, cube_nodes = c3, [c3]
            elif c3.op == "Mul" and x in c3.inputs:
                sq = prod.get(other(c3, x)) if c3.inputs.count(x) == 1 else None
                if sq is not None and sq.op == "Mul" and sq.inputs == [x, x]:
                    pw, cube_nodes = c3, [c3, sq]
        if pw is None or abs((const_of(cube_mul, pw.outputs[0]) or 0) - 0.044715) > 1e-6:
            continue
        one = _single_use(g, uses, tanh.outputs[0])
        if not one or one.op != "Add" or const_of(one, tanh.outputs[0]) != 1.0:
            continue
        mul = _single_use(g, uses, one.outputs[0])
        if not mul or mul.op != "Mul":
            continue
        half_x = prod.get(other(mul, one.outputs[0]))
        if half_x and half_x.op == "Mul" and x in half_x.inputs and \
                const_of(half_x, x) == 0.5 and len(uses.get(half_x.outputs[0], [])) == 1:
            chain, out = [half_x, mul], mul
        elif other(mul, one.outputs[0]) == x:
            half = _single_use(g, uses, mul.outputs[0])
            if not half or half.op != "Mul" or const_of(half, mul.outputs[0]) != 0.5:
                continue
            chain, out = [mul, half], half
        else:
            continue
        chain += cube_nodes + [cube_mul, add, scale, one]
        if any(n.outputs[0] in g.outputs or (n is not out and len(uses.get(n.outputs[0], []))
                                             != 1) for n in chain):
            continue
        tanh.op, tanh.inputs, tanh.outputs = "Gelu", [x], out.outputs
        tanh.attrs = {"approximate": "tanh"}
        for n in chain:
            g.nodes.remove(n)


def fuse_attention(g: Graph) -> None:
    """Scaled-dot-product attention as exported -> one Attention node (the engine runs the
    flash attention kernel: no [Sq, Skv] score matrix, one pass):
        s = MatMul(Q, KT) [* or / scalar] [masked]; p = Softmax(s, axis=-1)
        [p = Where(IsNaN(p), 0, p)]   (safe softmax, as the dynamo exporter writes it)
        out = MatMul(p, V)
    Q [.., Sq, D], KT [.., D, Skv], V [.., Skv, Dv] with the same leading dims; a scalar Mul
    on Q or on KT alone (HF's split sqrt scale) is folded in, and KT = Transpose(K) of the last
    two dims is read as K. The mask, when there is one, must be a constant over [Sq, Skv]
    (a causal mask): Where(cond, s, very negative) or Add(s, 0 / very negative), with every
    row keeping a key, so -inf, finfo.min and the kernel's masking agree exactly."""
    for mm in list(g.nodes):
        if mm.op != "MatMul" or len(mm.inputs) != 2 or mm not in g.nodes:
            continue
        prod, uses = {o: n for n in g.nodes for o in n.outputs}, g.consumers()
        q, kt = mm.inputs
        qs, kts = g.tensors[q].shape, g.tensors[kt].shape
        if len(qs) < 3 or len(qs) != len(kts) or qs[:-2] != kts[:-2] or qs[-1] != kts[-2]:
            continue
        chain, scale, node = [], 1.0, mm
        mask = None
        while True:
            nxt = _single_use(g, uses, node.outputs[0])
            if nxt is None:
                break
            c = None
            if nxt.op in ("Mul", "Div", "Add") and len(nxt.inputs) == 2:
                c = g.const(nxt.inputs[1] if nxt.inputs[0] == node.outputs[0] else nxt.inputs[0])
            if nxt.op == "Mul" and _scalar(c) is not None:
                scale *= _scalar(c)
            elif nxt.op == "Div" and nxt.inputs[0] == node.outputs[0] and _scalar(c):
                scale /= _scalar(c)
            elif mask is None and nxt.op == "Add" and c is not None:
                mask = _additive_mask(c, qs[-2], kts[-1])
                if mask is None:
                    break
            elif mask is None and nxt.op == "Where" and g.const(nxt.inputs[0]) is not None:
                # Where(keep, s, fill) or masked_fill's Where(hidden, fill, s).
                cond = g.const(nxt.inputs[0]).astype(bool)
                at = nxt.inputs.index(node.outputs[0])
                fill = _scalar(g.const(nxt.inputs[3 - at]))
                if at not in (1, 2) or fill is None or fill > -1e30:
                    break
                mask = _hidden_mask(~cond if at == 1 else cond, qs[-2], kts[-1])
                if mask is None:
                    break
            else:
                break
            chain.append(nxt)
            node = nxt
        soft = _single_use(g, uses, node.outputs[0])
        if soft is None or soft.op != "Softmax" or soft.attrs.get("axis", -1) not in (
                -1, len(qs) - 1):
            continue
        chain.append(soft)
        tail = soft
        users = uses.get(soft.outputs[0], [])
        if len(users) == 2 and soft.outputs[0] not in g.outputs:  # safe softmax's NaN guard
            isnan = next((u for u in users if u.op == "IsNaN"), None)
            where = next((u for u in users if u.op == "Where"), None)
            if (isnan and where and where.inputs == [isnan.outputs[0], where.inputs[1],
                                                     soft.outputs[0]]
                    and _scalar(g.const(where.inputs[1])) == 0.0
                    and len(uses.get(isnan.outputs[0], [])) == 1):
                chain += [isnan, where]
                tail = where
        pv = _single_use(g, g.consumers(), tail.outputs[0])
        if pv is None or pv.op != "MatMul" or pv.inputs[0] != tail.outputs[0]:
            continue
        v = pv.inputs[1]
        vs = g.tensors[v].shape
        if len(vs) != len(qs) or vs[:-2] != qs[:-2] or vs[-2] != kts[-1]:
            continue
        if any(n.outputs[0] in g.outputs for n in chain):
            continue
        # Scalar Mul on Q or KT (the scale split as sqrt on both): fold when used only here.
        for name in (q, kt):
            pre = prod.get(name)
            if pre is not None and pre.op == "Mul" and len(uses.get(name, [])) == 1:
                c = _scalar(g.const(pre.inputs[1]))
                if c is not None:
                    scale *= c
                    if name == q:
                        q = pre.inputs[0]
                    else:
                        kt = pre.inputs[0]
        if scale <= 0:  # masking before or after the scale differ only for scale > 0
            continue
        attrs = {"scale": float(scale), "k_transposed": 1}
        pre = prod.get(kt)
        if (pre is not None and pre.op == "Transpose" and len(uses.get(kt, [])) == 1 and
                list(pre.attrs.get("perm", [])) == list(range(len(qs) - 2)) + [
                    len(qs) - 1, len(qs) - 2]):
            kt, attrs["k_transposed"] = pre.inputs[0], 0
        inputs = [q, kt, v]
        if mask is not None and mask is not False:
            inputs.append(g.add_const(f"{mm.name}.attention_mask", mask))
        mm.op, mm.inputs, mm.outputs, mm.attrs = "Attention", inputs, pv.outputs, attrs
        for n in chain + [pv]:
            g.nodes.remove(n)


def fold_attention_transposes(g: Graph) -> None:
    """A 4-D Transpose that feeds an Attention node's q, k or v (and nothing else), or that
    alone reads its output, is folded into it (attributes perm_q / perm_k / perm_v: the
    operand is Transpose(input, perm); perm_out: the output is Transpose(result, perm)): the
    engine reads and writes those operands through strided views, with no copy. The heads'
    split ([B, S, H, D] -> [B, H, S, D]) and merge around attention are such Transposes."""
    for n in g.nodes:
        if n.op != "Attention" or len(g.tensors[n.inputs[0]].shape) != 4:
            continue
        for i, key in ((0, "perm_q"), (1, "perm_k"), (2, "perm_v")):
            while True:  # a chain of Transposes composes: x[p1][p2] = x[p1[p2[i]]]
                prod, uses = {o: m for m in g.nodes for o in m.outputs}, g.consumers()
                pre = prod.get(n.inputs[i])
                if (pre is None or pre.op != "Transpose" or
                        _single_use(g, uses, n.inputs[i]) is not n or
                        len(g.tensors[pre.inputs[0]].shape) != 4):
                    break
                p1 = [int(p) for p in pre.attrs.get("perm", [3, 2, 1, 0])]
                p2 = n.attrs.get(key, [0, 1, 2, 3])
                n.attrs[key] = [p1[p] for p in p2]
                n.inputs[i] = pre.inputs[0]
                g.nodes.remove(pre)
        post = _single_use(g, g.consumers(), n.outputs[0])
        if post is not None and post.op == "Transpose":
            n.attrs["perm_out"] = [int(p) for p in post.attrs.get("perm", [3, 2, 1, 0])]
            n.outputs = [post.outputs[0]]
            g.nodes.remove(post)


def _hidden_mask(hidden, sq: int, skv: int):
    """A constant mask (True = hidden) as the engine's bool [Sq, Skv], False when it hides
    nothing (no mask needed), or None when it cannot be fused: another shape, slices that
    differ along the leading dims, or a row with every key hidden (there -inf gives NaN and
    finfo.min a uniform row, the kernel 0)."""
    if not hidden.any():
        return False
    if hidden.ndim < 2 or hidden.shape[-2:] != (sq, skv):
        return None
    slices = hidden.reshape(-1, sq, skv)
    if not (slices == slices[0]).all() or slices[0].all(axis=-1).any():
        return None
    return np.ascontiguousarray(slices[0])


def _additive_mask(c, sq: int, skv: int):
    """An additive mask that only hides (0 or below -1e30) -> _hidden_mask of it."""
    if not np.all((c == 0) | (c < -1e30)):
        return None
    return _hidden_mask(c < -1e30, sq, skv)


def fuse(g: Graph) -> None:
    fuse_layer_norm(g)
    fuse_gelu(g)
    fuse_gelu_tanh(g)
    fuse_attention(g)
    fold_attention_transposes(g)
    # Conv + BatchNormalization.
    for n in list(g.nodes):
        if n.op != "Conv":
            continue
        uses = g.consumers()
        bn = _single_use(g, uses, n.outputs[0])
        if bn is None or bn.op != "BatchNormalization" or any(
                g.const(i) is None for i in bn.inputs[1:5]):
            continue
        w = g.const(n.inputs[1])
        if w is None:
            continue
        gamma, beta, mean, var = (g.const(i).astype(np.float64) for i in bn.inputs[1:5])
        scale = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        b = g.const(n.inputs[2]).astype(np.float64) if len(n.inputs) > 2 and n.inputs[2] else 0.0
        w2 = (w.astype(np.float64) * scale.reshape(-1, 1, 1, 1)).astype(w.dtype)
        b2 = ((b - mean) * scale + beta).astype(w.dtype)
        n.inputs = [n.inputs[0], g.add_const(f"{n.name}.weight_bn_folded", w2),
                    g.add_const(f"{n.name}.bias_bn_folded", b2)]
        _drop(g, bn, n)
    # A BatchNormalization left alone: y = x * scale + shift per channel.
    for n in g.nodes:
        if n.op == "BatchNormalization":
            vals = [g.const(i) for i in n.inputs[1:5]]
            if any(v is None for v in vals):
                raise ConvertError("E19010", f"node {n.name}: BatchNormalization with run-time "
                                   "statistics (training mode) is not supported; export in eval()")
            gamma, beta, mean, var = (v.astype(np.float64) for v in vals)
            scale = gamma / np.sqrt(var + float(n.attrs.get("epsilon", 1e-5)))
            dt = g.tensors[n.inputs[0]].dtype
            n.inputs = [n.inputs[0], g.add_const(f"{n.name}.scale", scale.astype(dt)),
                        g.add_const(f"{n.name}.shift", (beta - mean * scale).astype(dt))]
            n.attrs = {}
    # MatMul + bias Add (the bias a constant along the last dimension).
    for n in list(g.nodes):
        if n.op != "MatMul" or (len(n.inputs) > 2 and n.inputs[2]):
            continue
        add = _single_use(g, g.consumers(), n.outputs[0])
        if add is None or add.op != "Add":
            continue
        other = add.inputs[1] if add.inputs[0] == n.outputs[0] else add.inputs[0]
        bias = g.const(other)
        out_shape = g.tensors[n.outputs[0]].shape
        if bias is None or bias.size != out_shape[-1] or bias.ndim > len(out_shape):
            continue
        n.inputs = n.inputs[:2] + [g.add_const(f"{n.name}.bias", bias.reshape(-1))]
        n.attrs.setdefault("beta", 1.0)
        _drop(g, add, n)
    # Conv / MatMul + activation.
    for n in list(g.nodes):
        if n.op not in ("Conv", "MatMul") or n.attrs.get("activation"):
            continue
        act = _single_use(g, g.consumers(), n.outputs[0])
        if act is not None and act.op in FUSABLE_ACTIVATIONS:
            n.attrs["activation"] = act.op
            _drop(g, act, n)
        elif act is not None and act.op == "Gelu":
            # Applied by the engine to each block of the product while it is in cache (a
            # transformer's first feed-forward Linear), not as a pass over the whole output.
            tanh = act.attrs.get("approximate", "none") == "tanh"
            n.attrs["activation"] = "GeluTanh" if tanh else "Gelu"
            _drop(g, act, n)
    # Conv (+ Relu) + a 2x2 / stride 2 MaxPool (a CNN's conv-BN-relu-pool block): the engine
    # pools each register tile of the convolution before storing it, so the full-size output
    # is never written nor read back. ReLU commutes with the max; other activations are left
    # unfused (GELU is not monotonic).
    for n in list(g.nodes):
        if n.op != "Conv" or n.attrs.get("activation", "") not in ("", "Relu"):
            continue
        pool = _single_use(g, g.consumers(), n.outputs[0])
        if pool is not None and _is_max_pool_2x2(pool) and \
                len(g.tensors[n.outputs[0]].shape) == 4:
            n.attrs["max_pool"] = 2
            _drop(g, pool, n)


def _is_max_pool_2x2(n: Node) -> bool:
    """A MaxPool with a 2x2 window, stride 2, no padding or dilation, floor mode and no
    Indices output."""
    a = n.attrs
    return (n.op == "MaxPool" and len([o for o in n.outputs if o]) == 1
            and list(a.get("kernel_shape", [])) == [2, 2]
            and list(a.get("strides", [1, 1])) == [2, 2]
            and list(a.get("pads", [0, 0, 0, 0])) == [0, 0, 0, 0]
            and list(a.get("dilations", [1, 1])) == [1, 1]
            and not a.get("ceil_mode", 0) and a.get("auto_pad", "NOTSET") == "NOTSET")


# The kernel library's GEMM dot-product path: at most this many rows of A (kGemmFewRowsMax).
FEW_ROWS = 8


def _weight_matmuls(g: Graph):
    """(node, weight, rows of A) for each MatMul against a constant 2-D float32 weight."""
    for n in g.nodes:
        if n.op != "MatMul" or n.attrs.get("trans_a") or n.attrs.get("trans_b"):
            continue
        b = g.const(n.inputs[1])
        a_shape = g.tensors[n.inputs[0]].shape
        if b is None or b.ndim != 2 or len(a_shape) < 2 or b.dtype != np.float32:
            continue
        yield n, b, int(np.prod(a_shape[:-1]))


def few_row_weights(g: Graph) -> set[str]:
    """The weights of MatMuls with at most FEW_ROWS rows of A (a Linear at decode time)."""
    return {n.inputs[1] for n, _, rows in _weight_matmuls(g) if rows <= FEW_ROWS}


def layout_few_row_weights(g: Graph, names: set[str]) -> None:
    """MatMuls against the weights `names` read them as [N, K] (trans_b): with few rows of A
    the GEMM takes its few-row path, dot products with each column of B contiguous in k, the
    weight read once and never packed (the [K, N] layout the Gemm rewrite gives the packed
    path would have to be gathered). A model with gears passes the weights that are few-row
    in any gear, so every gear shares one layout (one copy of the weight): with more rows
    (a prefill gear) the packed path reads [N, K] as fast, within noise (measured: the
    KV-cache decoder's 32-token prefill gear 6.86 ms against 6.91 ms)."""
    for n, b, _ in list(_weight_matmuls(g)):
        if n.inputs[1] not in names:
            continue
        name = n.inputs[1] + "_nk"
        if name not in g.tensors:
            g.add_const(name, np.ascontiguousarray(b.T))
            if n.inputs[1] in g.narrow:
                g.narrow.add(name)
        n.inputs[1] = name
        n.attrs["trans_b"] = 1


def fold_transposed_b(g: Graph) -> None:
    """MatMul(A, Transpose(B)) where the Transpose swaps only B's last two dims (attention's
    K^T left unfused, e.g. under a run-time mask) and feeds nothing else: the MatMul reads B
    transposed (trans_b) and the copy disappears."""
    prod, uses = {o: n for n in g.nodes for o in n.outputs}, g.consumers()
    for n in list(g.nodes):
        if n.op != "MatMul" or n.attrs.get("trans_a") or n.attrs.get("trans_b"):
            continue
        tr = prod.get(n.inputs[1])
        if tr is None or tr.op != "Transpose" or tr.outputs[0] in g.outputs:
            continue
        rank = len(g.tensors[tr.inputs[0]].shape)
        perm = tr.attrs.get("perm", list(range(rank))[::-1])
        if rank < 3 or list(perm) != list(range(rank - 2)) + [rank - 1, rank - 2]:
            continue  # 2-D transposes of run-time B stay (the 2-D path packs them anyway)
        if len(uses.get(tr.outputs[0], [])) != 1 or len(g.tensors[n.inputs[0]].shape) != rank:
            continue
        n.inputs[1] = tr.inputs[0]
        n.attrs["trans_b"] = 1
        g.nodes.remove(tr)


def remove_dead(g: Graph) -> None:
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(i for i in n.inputs if i)
    g.nodes = kept[::-1]


# ---- lowering to the engine's attributes ---------------------------------------------------

def lower_attrs(g: Graph, n: Node) -> dict:
    a = n.attrs
    rank = len(g.tensors[n.inputs[0]].shape)
    if n.op == "Conv":
        return {"strides": a.get("strides", [1, 1]), "pads": a.get("pads", [0, 0, 0, 0]),
                "dilations": a.get("dilations", [1, 1]), "group": a.get("group", 1),
                "activation": a.get("activation", ""), "precision": a.get("precision", ""),
                "max_pool": a.get("max_pool", 0)}
    if n.op == "MatMul":
        return {"trans_a": a.get("trans_a", 0), "trans_b": a.get("trans_b", 0),
                "alpha": float(a.get("alpha", 1.0)), "beta": float(a.get("beta", 1.0)),
                "activation": a.get("activation", ""), "precision": a.get("precision", "")}
    if n.op in ("Softmax", "LogSoftmax", "Concat"):
        return {"axis": norm_axis(a.get("axis", -1), rank, n.name)}
    if n.op == "LayerNormalization":
        return {"axis": norm_axis(a.get("axis", -1), rank, n.name),
                "epsilon": float(a.get("epsilon", 1e-5))}
    if n.op in ("MaxPool", "AveragePool"):
        if a.get("auto_pad", "NOTSET") != "NOTSET":
            raise ConvertError("E19010", f"node {n.name}: {n.op} auto_pad is not supported")
        return {"kernel_shape": a["kernel_shape"], "strides": a.get("strides", [1, 1]),
                "pads": a.get("pads", [0, 0, 0, 0]), "dilations": a.get("dilations", [1, 1]),
                "ceil_mode": a.get("ceil_mode", 0),
                "count_include_pad": a.get("count_include_pad", 0)}
    if n.op == "Transpose":
        return {"perm": a.get("perm", list(range(rank))[::-1])}
    if n.op in ("Gather", "GatherElements"):
        return {"axis": norm_axis(a.get("axis", 0), rank, n.name)}
    if n.op == "Slice":
        return {"starts": a["starts"], "steps": a["steps"]}
    if n.op == "Attention":
        perms = {k: a[k] for k in ("perm_q", "perm_k", "perm_v", "perm_out") if k in a}
        return {"scale": a["scale"], "k_transposed": a["k_transposed"],
                "precision": a.get("precision", ""), **perms}
    if n.op in REDUCE:
        return {"axes": a["axes"]}
    if n.op == "Split":
        return {"axis": norm_axis(a.get("axis", 0), rank, n.name)}  # sizes: the outputs' dims
    if n.op == "LeakyRelu":
        return {"alpha": float(a.get("alpha", 0.01))}
    if n.op == "Clip":
        return {"min": a["min"], "max": a["max"]}
    if n.op == "Gelu":
        return {"approximate": a.get("approximate", "none")}
    return {}


# ---- memory plan and .om assembly ---------------------------------------------------------

def plan_memory(sizes: dict[str, int], first: dict[str, int], last: dict[str, int]):
    """Offsets in one arena; tensors with overlapping lifetimes never overlap in memory."""
    placed: list[tuple[int, int, str]] = []  # (offset, size, name)
    offsets = {}
    order = sorted(sizes, key=lambda t: (-sizes[t], first[t]))
    for t in order:
        live = sorted((o, s) for o, s, u in placed
                      if not (last[u] < first[t] or last[t] < first[u]))
        offset = 0
        for o, s in live:
            if offset + sizes[t] <= o:
                break
            offset = max(offset, o + s)
        offsets[t] = offset
        placed.append((offset, sizes[t], t))
    arena = max((o + s for o, s, _ in placed), default=0)
    return offsets, arena


def check_dtypes(g: Graph, n: Node) -> None:
    """The dtypes each engine op takes (engine/ops.cpp checks the same at load)."""
    dts = [g.tensors[i].dtype if i else None for i in n.inputs]

    def refuse(i, wanted):
        raise ConvertError("E19012", f"node {n.name} ({n.op}): input {n.inputs[i]} is "
                           f"{dts[i]}; the engine takes {wanted} there (cast the model to "
                           "float32 before export)")
    f32, index = np.dtype("float32"), (np.dtype("int64"), np.dtype("int32"))
    for i, dt in enumerate(dts):
        if dt is None:
            continue
        if n.op == "Attention" and i == 3:
            if dt != np.dtype(bool):
                refuse(i, "a bool mask")
        elif n.op in FLOAT_OPS and dt != f32:
            refuse(i, "float32")
        if n.op in ("Gather", "GatherElements") and i == 1 and dt not in index:
            refuse(i, "int64 or int32 indices")
        if n.op in ("IsNaN", "IsInf") and dt != f32:
            refuse(i, "float32")
        if n.op in ("Not", "And", "Or") and dt != np.dtype(bool):
            refuse(i, "bool")
    if (n.op in COMPARE or n.op == "Where") and len(set(dts[-2:])) != 1:
        refuse(len(dts) - 1, f"the same dtype as {n.inputs[-2]} ({dts[-2]})")


def _aligned(n: int) -> int:
    return (n + om.ALIGN - 1) // om.ALIGN * om.ALIGN


class WeightStore:
    """The weights section: each constant's bytes at a 64-byte aligned offset; identical bytes
    are stored once (the gears of a dynamic model share their weights this way)."""

    def __init__(self):
        self.data = bytearray()
        self.offsets: dict[bytes, int] = {}

    def add(self, value: np.ndarray) -> int:
        b = np.ascontiguousarray(value).tobytes()
        if b not in self.offsets:
            self.offsets[b] = len(self.data)
            self.data += b
            self.data += b"\0" * (-len(self.data) % om.ALIGN)
        return self.offsets[b]


def assemble(g: Graph, soc_version: str, source: str,
             store: WeightStore | None = None) -> tuple[om.OmModel, dict]:
    store = WeightStore() if store is None else store
    for n in g.nodes:
        if n.op not in ENGINE_OPS:
            raise ConvertError("E19010", f"node {n.name} (op {n.op!r}, opset {g.opset}) is not "
                               "supported by the engine after conversion")
    for name in g.outputs:
        if name in g.inputs or g.const(name) is not None:
            raise NotImplementedError(f"graph output {name} is a graph input or a constant; "
                                      "models whose outputs do not depend on a computation "
                                      "are not supported")
    order: list[str] = []
    seen = set()

    def see(name):
        if name and name not in seen:
            seen.add(name)
            order.append(name)
    for name in g.inputs + g.outputs:
        see(name)
    for n in g.nodes:
        for name in n.inputs + n.outputs:
            see(name)
    index = {name: i for i, name in enumerate(order)}

    def in_arena(name):
        return name not in g.inputs and name not in g.outputs and g.const(name) is None
    # A Reshape from an arena tensor to an arena tensor is the same bytes: the output aliases
    # the input (its root, through chains) and the node disappears from the plan.
    alias: dict[str, str] = {}
    for n in list(g.nodes):
        if n.op == "Reshape" and in_arena(n.inputs[0]) and in_arena(n.outputs[0]):
            alias[n.outputs[0]] = alias.get(n.inputs[0], n.inputs[0])
            g.nodes.remove(n)
    first, last = {}, {}
    for k, n in enumerate(g.nodes):
        for name in n.outputs:
            name = alias.get(name, name)
            first.setdefault(name, k)
            last[name] = max(last.get(name, k), k)
        for name in n.inputs:
            if name:
                last[alias.get(name, name)] = k
    arena_tensors = {name: _aligned(int(np.prod(g.tensors[name].shape, dtype=np.int64))
                                    * g.tensors[name].dtype.itemsize)
                     for name in order if in_arena(name) and name not in alias}
    offsets, arena_size = plan_memory(arena_tensors, first, last)
    offsets.update({name: offsets[root] for name, root in alias.items()})
    for n in g.nodes:
        check_dtypes(g, n)
    tensors = []
    for name in order:
        t = g.tensors[name]
        if t.dtype not in om.DTYPES:
            raise ConvertError("E19012", f"tensor {name} has dtype {t.dtype}, which the .om "
                               "format does not store")
        nbytes = int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize
        if name in g.inputs:
            storage, offset = om.INPUT, g.inputs.index(name)
        elif name in g.outputs:
            storage, offset = om.OUTPUT, g.outputs.index(name)
        elif t.value is not None:
            storage, offset = om.WEIGHT, store.add(t.value)
        else:
            storage, offset = om.ARENA, offsets[name]
        if storage != om.WEIGHT and t.dtype not in ENGINE_DTYPES and not (
                storage in (om.INPUT, om.OUTPUT) and _narrow_name(t.dtype)):
            raise ConvertError("E19012", f"tensor {name} is {t.dtype}; the engine's tensors are "
                               "float32, int64, int32 or bool (cast the model to float32 "
                               "before export)")
        tensors.append(om.OmTensor(name, t.dtype, t.shape, storage, offset, nbytes))
    def attrs(n):
        a = lower_attrs(g, n)
        # Math results are rounded; data movement copies values that already are 16-bit ones,
        # except a Cast into the narrow type from a float32 tensor.
        computes = n.op in FLOAT_OPS or (n.op == "Cast" and n.inputs[0] not in g.narrow
                                         and not _narrow_name(g.tensors[n.inputs[0]].dtype))
        if computes and any(o in g.narrow and g.tensors[o].dtype == np.float32
                            for o in n.outputs):
            a["round"] = g.narrow_kind  # the engine rounds the float32 result (ops.cpp)
        return a
    nodes = [om.OmNode(n.op, n.name, [index[i] if i else om.NO_TENSOR for i in n.inputs],
                       [index[o] for o in n.outputs], attrs(n)) for n in g.nodes]
    model = om.OmModel(soc_version, source, tensors, [index[i] for i in g.inputs],
                       [index[o] for o in g.outputs], arena_size, nodes, bytes(store.data))
    stats = {"nodes": len(g.nodes), "arena_bytes": arena_size,
             "unshared_bytes": sum(arena_tensors.values()), "weight_bytes": len(store.data)}
    return model, stats


# --precision_mode values and the 16-bit type the cube (matrix) ops take under each; None:
# every op keeps float32. ATC's other modes (force_fp16, allow_mix_precision*) change vector
# ops too and are refused by the command line.
PRECISION_MODES = {"force_fp32": None, "cube_fp16in_fp32out": None,
                   "must_keep_origin_dtype": None, "allow_fp32_to_fp16": "float16",
                   "allow_fp32_to_bf16": "bfloat16"}
CUBE_OPS = ("MatMul", "Conv", "Attention")


def _round_to(value: np.ndarray, kind: str) -> np.ndarray:
    """float32 values rounded to float16 / bfloat16 (to nearest even) and widened back."""
    if kind == "float16":
        return value.astype(np.float16).astype(np.float32)
    bits = np.ascontiguousarray(value, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = np.where(np.isnan(value), bits | 0x00400000, rounded)  # NaN stays a quiet NaN
    return rounded.astype(np.uint32).view(np.float32)


def lower_precision(g: Graph, kind: str | None) -> None:
    """allow_fp32_to_fp16 / _bf16: matrix ops run on 16-bit operands with float32
    accumulation and a 16-bit result, as on the cube unit; the other ops stay float32. Constant
    operands are rounded here once; the engine rounds the run-time ones (attr "precision")."""
    if kind is None:
        return
    for n in g.nodes:
        if n.op not in CUBE_OPS:
            continue
        n.attrs["precision"] = kind
        for k, name in enumerate(n.inputs):
            value = g.const(name) if name else None
            if value is not None and value.dtype == np.float32 and not (
                    n.op in ("MatMul", "Conv") and k == 2):  # the bias is added in float32
                n.inputs[k] = g.add_const(f"{name}.{kind}", _round_to(value, kind))


def _gear_error(option: str, text: str, reason: str) -> ConvertError:
    return ConvertError("E10001", f"Value [{text}] for parameter [--{option}] is invalid. "
                        f"Reason: {reason}")


def _gear_list(option: str, text: str, sep: str) -> list[list[int]]:
    try:
        gears = [[int(v) for v in item.split(",")] for item in text.split(sep)]
    except ValueError:
        raise _gear_error(option, text, "the gears must be positive integers, e.g. "
                          + ("\"1,2,4,8\"" if sep == "," else "\"16;32;64\"")) from None
    if not 1 <= len(gears) <= 100:
        raise _gear_error(option, text, "give 1 to 100 gears")
    if any(v < 1 for g in gears for v in g):
        raise _gear_error(option, text, "every value must be a positive integer")
    if len({tuple(g) for g in gears}) != len(gears):
        raise _gear_error(option, text, "a gear is given twice")
    return gears


def gear_shapes(input_shape: str | None, dynamic_batch_size: str | None,
                dynamic_dims: str | None) -> tuple[int, list, list[dict]]:
    """ATC's dynamic gears -> (mode, gear values, one --input_shape dict per gear)."""
    if dynamic_batch_size and dynamic_dims:
        raise ConvertError("E10001", "--dynamic_batch_size and --dynamic_dims are mutually "
                           "exclusive: give one of them")
    if not dynamic_batch_size and not dynamic_dims:
        return om.STATIC, [], [parse_input_shape(input_shape)]
    option = "dynamic_batch_size" if dynamic_batch_size else "dynamic_dims"
    if not input_shape:
        raise ConvertError("E10004", f"--{option} needs --input_shape with -1 for the "
                           "dynamic dimensions, e.g. --input_shape=\"x:-1,3,224,224\"")
    shapes = parse_input_shape(input_shape, dynamic=True)
    holes = [(name, d) for name, shape in shapes.items() for d, v in enumerate(shape) if v == -1]
    if dynamic_batch_size:
        bad = [name for name, d in holes if d != 0]
        if bad:
            raise ConvertError("E10018", f"Value [{input_shape}] for shape [{bad[0]}] is "
                               "invalid. When --dynamic_batch_size is included, only batch size "
                               "N can be -1 in --input_shape.")
        if not holes:
            raise ConvertError("E10031", "--dynamic_batch_size is included, but none of the "
                               "inputs in --input_shape has a batch size of -1: set the batch "
                               "dimension to -1, or remove --dynamic_batch_size")
        values = _gear_list(option, dynamic_batch_size, ",")
        mode = om.DYN_BATCH
        fills = [[b[0]] * len(holes) for b in values]
    else:
        if not holes:
            raise ConvertError("E10031", "--dynamic_dims is included, but no dimension in "
                               "--input_shape is -1: mark the dynamic dimensions with -1, or "
                               "remove --dynamic_dims")
        values = _gear_list(option, dynamic_dims, ";")
        wrong = [g for g in values if len(g) != len(holes)]
        if wrong:
            raise _gear_error(option, dynamic_dims, f"each gear must give {len(holes)} values, "
                              f"one per -1 in --input_shape ({input_shape}); the gear "
                              f"{','.join(map(str, wrong[0]))} gives {len(wrong[0])}")
        mode, fills = om.DYN_DIMS, values
    per_gear = []
    for fill in fills:
        it = iter(fill)
        per_gear.append({name: tuple(next(it) if v == -1 else v for v in shape)
                         for name, shape in shapes.items()})
    return mode, values, per_gear


def _prepare_graph(path, shapes):
    g = import_onnx(path, shapes)
    g.imported = len(g.nodes)
    infer_and_fold(g)
    rewrite(g)
    fuse(g)
    fold_transposed_b(g)
    return g


def _finish_graph(g, few_rows, precision_mode, soc_version, source, store):
    layout_few_row_weights(g, few_rows)
    remove_dead(g)
    lower_precision(g, PRECISION_MODES[precision_mode])
    model, stats = assemble(g, soc_version, source, store)
    stats["onnx_nodes"] = g.imported
    return model, stats


def convert(path: str, input_shape: str | None, soc_version: str,
            precision_mode: str = "force_fp32", dynamic_batch_size: str | None = None,
            dynamic_dims: str | None = None) -> tuple[bytes, dict]:
    """ONNX -> .om bytes. With gears (--dynamic_batch_size / --dynamic_dims) every gear is
    converted and planned on its own; the .om holds all the plans over one weights section,
    the largest gear first (its input and output sizes serve every gear)."""
    import os
    mode, values, per_gear = gear_shapes(input_shape, dynamic_batch_size, dynamic_dims)
    store = WeightStore()
    graphs = []
    for k, shapes in enumerate(per_gear):
        try:
            graphs.append(_prepare_graph(path, shapes))
        except ConvertError as e:
            if mode == om.STATIC:
                raise
            # A model whose export baked a size in (a traced view(2, -1)) fails for some
            # gears only: say which.
            raise ConvertError(e.code, f"{str(e).split(': ', 1)[1]} (in the gear "
                               f"{','.join(map(str, values[k]))} of "
                               f"--{om.DYNAMIC_NAMES[mode]}: input shapes "
                               f"{ {n: list(v) for n, v in shapes.items()} }; export the "
                               "model with those dimensions dynamic)") from None
    few_rows = set().union(*(few_row_weights(g) for g in graphs))
    built = [_finish_graph(g, few_rows, precision_mode, soc_version, os.path.basename(path),
                           store) for g in graphs]
    if mode == om.STATIC:
        model, stats = built[0]
        return om.serialize(model), stats

    def io_bytes(m):
        return [m.tensors[i].nbytes for i in m.inputs + m.outputs]
    order = sorted(range(len(built)), key=lambda k: -sum(io_bytes(built[k][0])))
    first = built[order[0]][0]
    for k in order[1:]:
        if any(a > b for a, b in zip(io_bytes(built[k][0]), io_bytes(first))):
            raise ConvertError("E10001", f"no gear of --{om.DYNAMIC_NAMES[mode]} is the largest "
                               "in every input and output, which the engine needs (it sizes "
                               "the buffers once); order the dimensions so one gear dominates")
    model = first
    model.weights = bytes(store.data)
    model.dynamic_mode = mode
    model.gear_values = [values[k] for k in order]
    model.gears = [built[k][0] for k in order[1:]]
    for g in model.gears:
        g.weights = b""
    stats = dict(built[order[0]][1])
    stats["weight_bytes"] = len(store.data)
    stats["gears"] = len(built)
    stats["arena_bytes"] = max(b[1]["arena_bytes"] for b in built)
    return om.serialize(model), stats
