"""InferSession: load an .om on a device and run it from NumPy arrays (ais_bench's API)."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import numpy as np

try:  # registers NumPy's "bfloat16" dtype name (ml_dtypes comes with onnx)
    import ml_dtypes  # noqa: F401
except ImportError:  # pragma: no cover
    ml_dtypes = None

from ais_bench import _acl
from ais_bench._acl import call

_initialized = False


def _init_acl() -> None:
    global _initialized
    if not _initialized:
        code = _acl.lib().aclInit(None)
        if code not in (0, _acl.ACL_ERROR_REPEAT_INITIALIZE):
            _acl.check("aclInit", code)
        _initialized = True


def _np_dtype(name: str):
    """NumPy's dtype of a tensor's datatype name, or None for one NumPy does not know."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


@dataclass
class TensorDesc:
    """One model input or output, as ais_bench's get_inputs() / get_outputs() give it."""
    name: str
    datatype: str
    shape: list
    size: int  # bytes
    realsize: int


class InferSession:
    def __init__(self, device_id: int, model_path: str, acl_json_path: str | None = None,
                 debug: bool = False, loop: int = 1):
        _init_acl()
        self.device_id = device_id
        call("aclrtSetDevice", device_id)
        self._model_id = ctypes.c_uint32()
        call("aclmdlLoadFromFile", model_path.encode(), ctypes.byref(self._model_id))
        self._desc = _acl.lib().aclmdlCreateDesc()
        call("aclmdlGetDesc", self._desc, self._model_id)
        self._inputs = self._describe("Input")
        self._outputs = self._describe("Output")
        # Device buffers and datasets are made once: every infer() reuses them.
        self._buffers = []
        self._in_mem = [self._malloc(t.size) for t in self._inputs]
        self._out_mem = [self._malloc(t.size) for t in self._outputs]
        self._in_set = self._dataset(self._in_mem, self._inputs)
        self._out_set = self._dataset(self._out_mem, self._outputs)
        self._times: list[tuple[float, float, float]] = []  # (h2d, compute, d2h) seconds
        # A model converted with gears (atc --dynamic_batch_size / --dynamic_dims) has the
        # index of ACL_DYNAMIC_TENSOR_NAME, where the gear is selected; None for a static one.
        index = ctypes.c_size_t()
        found = _acl.lib().aclmdlGetInputIndexByName(self._desc, b"ascend_mbatch_shape_data",
                                                     ctypes.byref(index))
        self._dynamic_index = index.value if found == 0 else None
        # What every infer() compares and calls, looked up once: str(dtype) and the ctypes
        # attribute lookups were a third of a small model's call.
        self._in_dtypes = [_np_dtype(t.datatype) for t in self._inputs]
        self._in_shapes = [tuple(t.shape) for t in self._inputs]
        self._out_dtypes = [_np_dtype(t.datatype) for t in self._outputs]
        L = _acl.lib()
        self._memcpy, self._execute = L.aclrtMemcpy, L.aclmdlExecute

    def _describe(self, kind: str) -> list[TensorDesc]:
        L = _acl.lib()
        n = getattr(L, f"aclmdlGetNum{kind}s")(self._desc)
        out = []
        for i in range(n):
            dims = _acl.IODims()
            call(f"aclmdlGet{kind}Dims", self._desc, i, ctypes.byref(dims))
            size = getattr(L, f"aclmdlGet{kind}SizeByIndex")(self._desc, i)
            dtype = _acl.DTYPES.get(getattr(L, f"aclmdlGet{kind}DataType")(self._desc, i),
                                    "undefined")
            out.append(TensorDesc(dims.name.decode(), dtype,
                                  [int(dims.dims[d]) for d in range(dims.dimCount)], size, size))
        return out

    @staticmethod
    def _malloc(size: int) -> ctypes.c_void_p:
        p = ctypes.c_void_p()
        call("aclrtMalloc", ctypes.byref(p), max(size, 1), 0)
        return p

    def _dataset(self, mem, descs):
        L = _acl.lib()
        ds = L.aclmdlCreateDataset()
        for p, t in zip(mem, descs):
            buf = L.aclCreateDataBuffer(p, t.size)
            self._buffers.append(buf)
            call("aclmdlAddDatasetBuffer", ds, buf)
        return ds

    def get_inputs(self) -> list[TensorDesc]:
        return list(self._inputs)

    def get_outputs(self) -> list[TensorDesc]:
        return list(self._outputs)

    def infer(self, feeds, mode: str = "static", custom_sizes=None,
              out_array: bool = True) -> list[np.ndarray]:
        """feeds: one array per input, in order (a list) or by name (a dict). Returns the
        outputs as NumPy arrays. mode: "static", or for a model converted with gears
        "dymbatch" (atc --dynamic_batch_size: the batch is the first feed's first dimension)
        or "dymdims" (atc --dynamic_dims: the gear is the one whose shapes the feeds have).
        custom_sizes (ais_bench's output sizes for "dymshape") is not needed by any mode
        here; out_array=False (device tensors) is not supported."""
        if not out_array:
            raise NotImplementedError("infer(out_array=False): outputs are returned as NumPy "
                                      "arrays only; call infer(feeds) without out_array")
        if mode in ("dymhw", "dymshape"):
            raise NotImplementedError(f"infer(mode={mode!r}) is not supported: convert with "
                                      "atc --dynamic_dims and use mode='dymdims'")
        if mode not in ("static", "dymbatch", "dymdims"):
            raise ValueError(f"infer: unknown mode {mode!r}; use 'static', 'dymbatch' or "
                             "'dymdims'")
        dynamic = mode != "static"
        if dynamic and self._dynamic_index is None:
            raise ValueError(f"infer(mode={mode!r}): the model has static shapes; convert it "
                             "with atc --dynamic_batch_size / --dynamic_dims, or use "
                             "mode='static'")
        if not dynamic and self._dynamic_index is not None:
            raise ValueError("infer: the model has dynamic gears; call infer(feeds, "
                             "mode='dymbatch') or mode='dymdims' as it was converted")
        if isinstance(feeds, dict):
            missing = [t.name for t in self._inputs if t.name not in feeds]
            if missing:
                raise ValueError(f"infer: feeds lack the model inputs {missing}")
            feeds = [feeds[t.name] for t in self._inputs]
        if not isinstance(feeds, (list, tuple)):
            feeds = [feeds]
        if len(feeds) != len(self._inputs):
            raise ValueError(f"infer: the model has {len(self._inputs)} inputs "
                             f"({[t.name for t in self._inputs]}); {len(feeds)} feeds given")
        arrays = [np.ascontiguousarray(f) for f in feeds]
        for a, t, dt, shape in zip(arrays, self._inputs, self._in_dtypes, self._in_shapes):
            if dt is None or a.dtype != dt or (
                    a.shape != shape if not dynamic
                    else a.ndim != len(shape) or a.nbytes > t.size):
                raise ValueError(f"infer: input {t.name} must be {t.datatype} of shape "
                                 f"{t.shape}{' or a gear of it' if dynamic else ''}; got "
                                 f"{a.dtype} of shape {list(a.shape)}")
        if mode == "dymbatch":
            call("aclmdlSetDynamicBatchSize", self._model_id, self._in_set, self._dynamic_index,
                 arrays[0].shape[0])
        elif mode == "dymdims":
            dims = _acl.IODims()
            values = [d for a in arrays for d in a.shape]
            dims.dimCount = len(values)
            for k, v in enumerate(values):
                dims.dims[k] = v
            call("aclmdlSetInputDynamicDims", self._model_id, self._in_set, self._dynamic_index,
                 ctypes.byref(dims))
        memcpy = self._memcpy
        t0 = time.perf_counter()
        for a, t, mem in zip(arrays, self._inputs, self._in_mem):
            code = memcpy(mem, t.size, a.ctypes.data, a.nbytes, _acl.ACL_MEMCPY_HOST_TO_DEVICE)
            if code:
                _acl.check("aclrtMemcpy", code)
        t1 = time.perf_counter()
        code = self._execute(self._model_id, self._in_set, self._out_set)
        if code:
            _acl.check("aclmdlExecute", code)
        t2 = time.perf_counter()
        outs = []
        for i, (t, mem, dt) in enumerate(zip(self._outputs, self._out_mem, self._out_dtypes)):
            shape = t.shape
            if dynamic:
                dims = _acl.IODims()
                call("aclmdlGetCurOutputDims", self._desc, i, ctypes.byref(dims))
                shape = [int(dims.dims[d]) for d in range(dims.dimCount)]
            a = np.empty(shape, dtype=dt if dt is not None else t.datatype)
            code = memcpy(a.ctypes.data, a.nbytes, mem, a.nbytes, _acl.ACL_MEMCPY_DEVICE_TO_HOST)
            if code:
                _acl.check("aclrtMemcpy", code)
            outs.append(a)
        self._times.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
        return outs

    def summary(self) -> dict:
        """Milliseconds per infer() so far: h2d, compute (aclmdlExecute) and d2h lists."""
        return {k: [t[i] * 1000 for t in self._times]
                for i, k in enumerate(("h2d", "compute", "d2h"))}

    def reset_summaryinfo(self) -> None:
        self._times.clear()

    def free_resource(self) -> None:
        if self._model_id is None:
            return
        L = _acl.lib()
        for ds in (self._in_set, self._out_set):
            L.aclmdlDestroyDataset(ds)
        for buf in self._buffers:
            L.aclDestroyDataBuffer(buf)
        for p in self._in_mem + self._out_mem:
            L.aclrtFree(p)
        L.aclmdlDestroyDesc(self._desc)
        call("aclmdlUnload", self._model_id)
        self._model_id = None

    def __del__(self):
        try:
            self.free_resource()
        except Exception:
            pass
