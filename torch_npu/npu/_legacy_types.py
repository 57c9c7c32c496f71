"""The legacy typed classes of torch.npu: FloatTensor, HalfTensor, ..., FloatStorage, BoolStorage,
..., torch.cuda's twins (torch_npu exports the same names).

Tensor classes: ``torch.npu.FloatTensor(2, 3)`` is an uninitialised float32 npu tensor of that
shape, ``torch.npu.FloatTensor([1, 2])`` one with that data, ``torch.npu.FloatTensor()`` an empty
one; ``isinstance(t, torch.npu.FloatTensor)`` is True for a float32 tensor on npu (as for
torch.cuda.FloatTensor and a CUDA tensor). They are factories and type tests, not subclasses:
every npu tensor is a torch.Tensor.

Storage classes: PyTorch's legacy typed storages (torch.storage._LegacyStorage) whose device is
npu, so ``torch.npu.FloatStorage(4)`` is a TypedStorage of 4 float32 elements on npu.
"""

from __future__ import annotations

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

__all__ = []  # filled below

# name stem -> dtype, the set torch_npu exports (no complex ones)
_DTYPES = {
    "Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
    "BFloat16": torch.bfloat16, "Long": torch.int64, "Int": torch.int32, "Short": torch.int16,
    "Char": torch.int8, "Byte": torch.uint8, "Bool": torch.bool,
}


class _NPUTensorType(type):
    """Metaclass of the legacy tensor classes: construction makes an npu tensor, isinstance
    tests the device and dtype."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == "npu" and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        from ._device import _get_device_index, current_device

        index = current_device() if device is None else _get_device_index(device)
        where = torch.device("npu", index)
        name = cls.__name__  # "torch.npu.FloatTensor"
        if not args:
            return torch.empty(0, dtype=cls.dtype, device=where)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            t = args[0]
            if t.dtype != cls.dtype or t.device != where:
                raise TypeError(f"{name}(tensor) expects a {cls.dtype} tensor on {where}, got a "
                                f"{t.dtype} tensor on {t.device}; convert it with "
                                f"t.to('{where}', {cls.dtype}) first")
            return t.view(t.shape)  # an alias, as the legacy constructor returns
        if len(args) == 1 and isinstance(args[0], torch.Size):
            return torch.empty(args[0], dtype=cls.dtype, device=where)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            if any(a < 0 for a in args):
                raise ValueError(f"{name}{args}: sizes must be non-negative")
            return torch.empty(args, dtype=cls.dtype, device=where)
        if len(args) == 1:  # a sequence or an array of values
            return torch.tensor(args[0], dtype=cls.dtype, device=where)
        raise TypeError(f"{name}{args!r}: expected sizes (ints), a torch.Size, one sequence of "
                        "values, or a tensor")


def _tensor_class(stem: str, dtype: torch.dtype):
    # The full dotted name is the type's name (tp_name), as for torch.cuda's C-made classes:
    # Tensor.type(torch.npu.HalfTensor) parses it to find the device and dtype.
    cls = _NPUTensorType(f"torch.npu.{stem}Tensor", (), {
        "dtype": dtype, "is_npu": True, "is_cuda": False, "is_sparse": False,
        "__module__": "torch.npu", "__qualname__": f"{stem}Tensor",
        "__doc__": f"{dtype} tensors on npu: torch.cuda.{stem}Tensor's twin.",
    })
    return cls


def _storage_class(stem: str, dtype: torch.dtype):
    # torch.storage reads the device from the class's module name ("torch.npu" -> npu).
    def dtype_(cls):
        _warn_typed_storage_removal()  # PyTorch's deprecation notice, as torch.cuda's classes
        return dtype

    return type(f"{stem}Storage", (_LegacyStorage,), {
        "_dtype": classproperty(lambda cls: dtype),
        "dtype": classproperty(dtype_),
        "__module__": "torch.npu",
        "__doc__": f"Legacy typed storage of {dtype} on npu: torch.cuda.{stem}Storage's twin.",
    })


for _stem, _dtype in _DTYPES.items():
    _cls = _tensor_class(_stem, _dtype)
    globals()[_cls.__qualname__] = _cls
    __all__.append(_cls.__qualname__)
    _storage = _storage_class(_stem, _dtype)
    globals()[_storage.__name__] = _storage
    torch._storage_classes.add(_storage)  # torch.is_storage and serialization know them
    __all__.append(_storage.__name__)
del _stem, _dtype, _cls, _storage
