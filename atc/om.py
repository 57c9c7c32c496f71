"""The .om offline-model format: writer and reader (the C++ reader is engine/om_reader.cpp).

Specified in docs/inference.md ("The .om format"); both readers must agree with it. All
integers little-endian. Layout:

    header   64 bytes: magic "SIMNPUOM", u32 version, u32 header size (64), u64 file size,
             u64 graph offset, u64 graph size, u64 weights offset, u64 weights size,
             u32 CRC-32 (zlib) checksum of every byte after the header, u32 reserved (0)
    graph    strings (u32 length + UTF-8), tensors, inputs, outputs, arena size, nodes
    weights  the constant tensors, each at a 64-byte aligned offset
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"SIMNPUOM"
VERSION = 2  # the newest this reader knows; a static model is written as version 1
STATIC, DYN_BATCH, DYN_DIMS = 0, 1, 2
DYNAMIC_NAMES = {STATIC: "static", DYN_BATCH: "dynamic_batch_size", DYN_DIMS: "dynamic_dims"}
HEADER_SIZE = 64
ALIGN = 64
_HEADER = struct.Struct("<8sIIQQQQQII")
assert _HEADER.size == HEADER_SIZE

# dtype codes: the values of npu::kernels::DType (include/npu/kernels/tensor_desc.h).
DTYPES = {
    np.dtype("float32"): 0, np.dtype("float16"): 1, np.dtype("float64"): 3, np.dtype("int8"): 4,
    np.dtype("int16"): 5, np.dtype("int32"): 6, np.dtype("int64"): 7, np.dtype("uint8"): 8,
    np.dtype("bool"): 9,
}
try:  # NumPy has no bfloat16; ml_dtypes (an onnx dependency) gives it
    import ml_dtypes
    DTYPES[np.dtype(ml_dtypes.bfloat16)] = 2
except ImportError:  # pragma: no cover
    pass
DTYPE_OF_CODE = {code: dt for dt, code in DTYPES.items()}

# Where a tensor's bytes are at run time.
ARENA, WEIGHT, INPUT, OUTPUT = 0, 1, 2, 3
STORAGE_NAMES = {ARENA: "arena", WEIGHT: "weight", INPUT: "input", OUTPUT: "output"}

# Attribute value types.
A_INT, A_FLOAT, A_INTS, A_FLOATS, A_STRING = 0, 1, 2, 3, 4
NO_TENSOR = 0xFFFFFFFF  # an optional node input that is absent


class OmFormatError(ValueError):
    """A file that is not a valid .om of a version this reader knows."""


@dataclass
class OmTensor:
    name: str
    dtype: np.dtype
    dims: tuple[int, ...]
    storage: int
    offset: int  # arena / weights offset; the input or output index for INPUT / OUTPUT
    nbytes: int


@dataclass
class OmNode:
    op: str
    name: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict = field(default_factory=dict)


@dataclass
class OmModel:
    soc_version: str
    source: str
    tensors: list[OmTensor]
    inputs: list[int]
    outputs: list[int]
    arena_size: int
    nodes: list[OmNode]
    weights: bytes
    version: int = 1
    # atc --dynamic_batch_size / --dynamic_dims: this graph is gear 0 (the largest); `gears`
    # holds the others (their weights empty: all share this one's), gear_values each gear's
    # values (batch: [b]; dims: the -1 dimensions' values).
    dynamic_mode: int = STATIC
    gear_values: list = field(default_factory=list)
    gears: list = field(default_factory=list)


def crc32(data: bytes) -> int:
    # CRC-32 as zlib computes it (polynomial 0xEDB88320); engine/om_reader.cpp has the same.
    return zlib.crc32(data) & 0xFFFFFFFF


def _str(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    out += struct.pack("<I", len(b))
    out += b


def _attr(out: bytearray, name: str, value) -> None:
    _str(out, name)
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        out += struct.pack("<Bq", A_INT, int(value))
    elif isinstance(value, (float, np.floating)):
        out += struct.pack("<Bd", A_FLOAT, float(value))
    elif isinstance(value, str):
        out += struct.pack("<B", A_STRING)
        _str(out, value)
    elif isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, np.integer)) for v in value):
        out += struct.pack("<BI", A_INTS, len(value))
        out += struct.pack(f"<{len(value)}q", *[int(v) for v in value])
    elif isinstance(value, (list, tuple)):
        out += struct.pack("<BI", A_FLOATS, len(value))
        out += struct.pack(f"<{len(value)}d", *[float(v) for v in value])
    else:
        raise TypeError(f"attribute {name}: cannot store a {type(value).__name__}")


def _graph(g: bytearray, model: OmModel) -> None:
    g += struct.pack("<I", len(model.tensors))
    for t in model.tensors:
        _str(g, t.name)
        g += struct.pack("<BBI", DTYPES[np.dtype(t.dtype)], t.storage, len(t.dims))
        g += struct.pack(f"<{len(t.dims)}q", *t.dims)
        g += struct.pack("<QQ", t.offset, t.nbytes)
    g += struct.pack("<I", len(model.inputs)) + struct.pack(f"<{len(model.inputs)}I", *model.inputs)
    g += struct.pack("<I", len(model.outputs))
    g += struct.pack(f"<{len(model.outputs)}I", *model.outputs)
    g += struct.pack("<QI", model.arena_size, len(model.nodes))
    for n in model.nodes:
        _str(g, n.op)
        _str(g, n.name)
        g += struct.pack("<I", len(n.inputs)) + struct.pack(f"<{len(n.inputs)}I", *n.inputs)
        g += struct.pack("<I", len(n.outputs)) + struct.pack(f"<{len(n.outputs)}I", *n.outputs)
        g += struct.pack("<I", len(n.attrs))
        for k in sorted(n.attrs):  # sorted: the same model always gives the same bytes
            _attr(g, k, n.attrs[k])


def serialize(model: OmModel) -> bytes:
    g = bytearray()
    _str(g, model.soc_version)
    _str(g, model.source)
    _graph(g, model)
    version = 1
    if model.dynamic_mode != STATIC:
        # Version 2's gear trailer: u8 mode, u32 gears, u32 values per gear, the values, then
        # the graph of every gear after the first.
        version = 2
        per = len(model.gear_values[0])
        g += struct.pack("<BII", model.dynamic_mode, len(model.gear_values), per)
        for v in model.gear_values:
            g += struct.pack(f"<{per}q", *v)
        for gear in model.gears:
            _graph(g, gear)
    g += b"\0" * (-len(g) % ALIGN)
    graph_offset = HEADER_SIZE
    weights_offset = graph_offset + len(g)
    body = bytes(g) + model.weights
    header = _HEADER.pack(MAGIC, version, HEADER_SIZE, HEADER_SIZE + len(body), graph_offset,
                          len(g), weights_offset, len(model.weights), crc32(body), 0)
    return header + body


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def take(self, fmt: str):
        s = struct.Struct("<" + fmt)
        if self.pos + s.size > len(self.data):
            raise OmFormatError(f"{self.what}: the graph section ends early (corrupt file)")
        v = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def str(self) -> str:
        (n,) = self.take("I")
        if self.pos + n > len(self.data):
            raise OmFormatError(f"{self.what}: the graph section ends early (corrupt file)")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s


def parse(data: bytes, what: str = "model") -> OmModel:
    """Reads an .om image; raises OmFormatError naming what is wrong."""
    if len(data) < 8 or data[:8] != MAGIC:
        raise OmFormatError(f"{what} is not an offline model (.om): it does not start with "
                            f"the magic {MAGIC.decode()!r}; convert the model with atc first")
    if len(data) < HEADER_SIZE:
        raise OmFormatError(f"{what} is truncated: {len(data)} bytes, shorter than the "
                            f"{HEADER_SIZE}-byte header")
    (_, version, header_size, file_size, graph_off, graph_size, weights_off, weights_size,
     checksum, _) = _HEADER.unpack_from(data)
    if not 1 <= version <= VERSION:
        raise OmFormatError(f"{what} has .om format version {version}; this reader knows "
                            f"versions 1 to {VERSION}: convert the model again with this atc")
    if len(data) != file_size:
        raise OmFormatError(f"{what} is truncated or padded: the header says {file_size} "
                            f"bytes, the file has {len(data)}")
    if (header_size != HEADER_SIZE or graph_off + graph_size > file_size
            or weights_off + weights_size > file_size):
        raise OmFormatError(f"{what}: the header's section offsets lie outside the file")
    if crc32(data[HEADER_SIZE:]) != checksum:
        raise OmFormatError(f"{what} is corrupt: its checksum does not match its contents")
    r = _Reader(data[graph_off:graph_off + graph_size], what)
    soc, source = r.str(), r.str()
    weights = bytes(data[weights_off:weights_off + weights_size])
    model = _parse_graph(r, soc, source, weights, version)
    if version >= 2:
        mode, count, per = r.take("BII")
        model.dynamic_mode = mode
        model.gear_values = [list(r.take(f"{per}q")) for _ in range(count)]
        model.gears = [_parse_graph(r, soc, source, b"", version) for _ in range(count - 1)]
    return model


def _parse_graph(r: _Reader, soc: str, source: str, weights: bytes, version: int) -> OmModel:
    what = r.what
    tensors = []
    for _ in range(r.take("I")[0]):
        name = r.str()
        code, storage, ndim = r.take("BBI")
        dims = r.take(f"{ndim}q")
        offset, nbytes = r.take("QQ")
        tensors.append(OmTensor(name, DTYPE_OF_CODE[code], tuple(dims), storage, offset,
                                nbytes))
    inputs = list(r.take(f"{r.take('I')[0]}I"))
    outputs = list(r.take(f"{r.take('I')[0]}I"))
    arena_size, num_nodes = r.take("QI")
    nodes = []
    for _ in range(num_nodes):
        op, name = r.str(), r.str()
        ins = list(r.take(f"{r.take('I')[0]}I"))
        outs = list(r.take(f"{r.take('I')[0]}I"))
        attrs = {}
        for _ in range(r.take("I")[0]):
            key = r.str()
            (kind,) = r.take("B")
            if kind == A_INT:
                attrs[key] = r.take("q")[0]
            elif kind == A_FLOAT:
                attrs[key] = r.take("d")[0]
            elif kind == A_STRING:
                attrs[key] = r.str()
            elif kind in (A_INTS, A_FLOATS):
                (n,) = r.take("I")
                attrs[key] = list(r.take(f"{n}{'q' if kind == A_INTS else 'd'}"))
            else:
                raise OmFormatError(f"{what}: unknown attribute type {kind} (corrupt file)")
        nodes.append(OmNode(op, name, ins, outs, attrs))
    return OmModel(soc, source, tensors, inputs, outputs, arena_size, nodes, weights, version)


def to_json(model: OmModel) -> dict:
    """The --mode=1 dump: everything but the weight bytes."""
    def tensor(i):
        t = model.tensors[i]
        return {"name": t.name, "dtype": str(t.dtype), "shape": list(t.dims),
                "storage": STORAGE_NAMES[t.storage], "offset": t.offset, "bytes": t.nbytes}
    out = {
        "format": {"magic": MAGIC.decode(), "version": model.version},
        "soc_version": model.soc_version,
        "source": model.source,
        "inputs": [tensor(i) for i in model.inputs],
        "outputs": [tensor(i) for i in model.outputs],
        "memory_plan": {"arena_bytes": model.arena_size, "weight_bytes": len(model.weights)},
        "nodes": [{"op": n.op, "name": n.name,
                   "inputs": [model.tensors[i].name if i != NO_TENSOR else "" for i in n.inputs],
                   "outputs": [model.tensors[i].name for i in n.outputs],
                   "attrs": n.attrs} for n in model.nodes],
        "tensors": [tensor(i) for i in range(len(model.tensors))],
    }
    if model.dynamic_mode != STATIC:
        out["dynamic"] = {"mode": DYNAMIC_NAMES[model.dynamic_mode], "gears": model.gear_values,
                          "arena_bytes": [model.arena_size] + [g.arena_size for g in model.gears]}
        out["gears"] = [to_json(g) for g in model.gears]
    return out
