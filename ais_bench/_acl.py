"""The small binding ais_bench runs on: AscendCL's C API (libascendcl.so) through ctypes.

Only the calls an inference session needs; each failure raises AclError with AscendCL's code
and aclGetRecentErrMsg's message.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os

ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST = 1, 2
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_MAX_DIM_CNT = 128
DTYPES = {0: "float32", 1: "float16", 2: "int8", 3: "int32", 4: "uint8", 6: "int16",
          7: "uint16", 8: "uint32", 9: "int64", 10: "uint64", 11: "float64", 12: "bool",
          27: "bfloat16"}


class AclError(RuntimeError):
    def __init__(self, api: str, code: int, message: str):
        super().__init__(f"{api} failed with AscendCL error {code}: {message}")
        self.code = code


class IODims(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("dimCount", ctypes.c_size_t),
                ("dims", ctypes.c_int64 * ACL_MAX_DIM_CNT)]


def library_path() -> str:
    """libascendcl.so: $SIMNPU_ASCENDCL_LIB, else the one installed with torch_npu (found
    without importing torch_npu, so ais_bench never loads PyTorch)."""
    path = os.environ.get("SIMNPU_ASCENDCL_LIB")
    if path:
        return path
    spec = importlib.util.find_spec("torch_npu")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libascendcl.so")
        if os.path.exists(path):
            return path
    try:  # a source checkout on sys.path: the installed package's library
        from importlib import metadata
        path = str(metadata.distribution("simnpu").locate_file("torch_npu/lib/libascendcl.so"))
    except metadata.PackageNotFoundError:
        path = ""
    if not os.path.exists(path):
        raise ImportError("ais_bench needs libascendcl.so from the simnpu package; install it "
                          "(make setup) or set SIMNPU_ASCENDCL_LIB")
    return path


_lib = None


def lib():
    global _lib
    if _lib is not None:
        return _lib
    L = ctypes.CDLL(library_path())
    c = ctypes
    sig = {
        "aclInit": (c.c_int, [c.c_char_p]),
        "aclFinalize": (c.c_int, []),
        "aclGetRecentErrMsg": (c.c_char_p, []),
        "aclrtSetDevice": (c.c_int, [c.c_int32]),
        "aclrtMalloc": (c.c_int, [c.POINTER(c.c_void_p), c.c_size_t, c.c_int]),
        "aclrtFree": (c.c_int, [c.c_void_p]),
        "aclrtMemcpy": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t, c.c_int]),
        "aclmdlLoadFromFile": (c.c_int, [c.c_char_p, c.POINTER(c.c_uint32)]),
        "aclmdlUnload": (c.c_int, [c.c_uint32]),
        "aclmdlCreateDesc": (c.c_void_p, []),
        "aclmdlDestroyDesc": (c.c_int, [c.c_void_p]),
        "aclmdlGetDesc": (c.c_int, [c.c_void_p, c.c_uint32]),
        "aclmdlGetNumInputs": (c.c_size_t, [c.c_void_p]),
        "aclmdlGetNumOutputs": (c.c_size_t, [c.c_void_p]),
        "aclmdlGetInputSizeByIndex": (c.c_size_t, [c.c_void_p, c.c_size_t]),
        "aclmdlGetOutputSizeByIndex": (c.c_size_t, [c.c_void_p, c.c_size_t]),
        "aclmdlGetInputDims": (c.c_int, [c.c_void_p, c.c_size_t, c.POINTER(IODims)]),
        "aclmdlGetOutputDims": (c.c_int, [c.c_void_p, c.c_size_t, c.POINTER(IODims)]),
        "aclmdlGetInputDataType": (c.c_int, [c.c_void_p, c.c_size_t]),
        "aclmdlGetOutputDataType": (c.c_int, [c.c_void_p, c.c_size_t]),
        "aclCreateDataBuffer": (c.c_void_p, [c.c_void_p, c.c_size_t]),
        "aclDestroyDataBuffer": (c.c_int, [c.c_void_p]),
        "aclmdlCreateDataset": (c.c_void_p, []),
        "aclmdlDestroyDataset": (c.c_int, [c.c_void_p]),
        "aclmdlAddDatasetBuffer": (c.c_int, [c.c_void_p, c.c_void_p]),
        "aclmdlExecute": (c.c_int, [c.c_uint32, c.c_void_p, c.c_void_p]),
        "aclmdlGetInputIndexByName": (c.c_int, [c.c_void_p, c.c_char_p,
                                                c.POINTER(c.c_size_t)]),
        "aclmdlSetDynamicBatchSize": (c.c_int, [c.c_uint32, c.c_void_p, c.c_size_t,
                                                c.c_uint64]),
        "aclmdlSetInputDynamicDims": (c.c_int, [c.c_uint32, c.c_void_p, c.c_size_t,
                                                c.POINTER(IODims)]),
        "aclmdlGetCurOutputDims": (c.c_int, [c.c_void_p, c.c_size_t, c.POINTER(IODims)]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(L, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib = L
    return L


def check(api: str, code: int) -> None:
    if code != 0:
        raise AclError(api, code, (lib().aclGetRecentErrMsg() or b"").decode())


def call(api: str, *args) -> None:
    check(api, getattr(lib(), api)(*args))
