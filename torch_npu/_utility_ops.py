"""torch_npu's general-purpose custom operators (the torch_npu.npu_* ops used outside LLMs), with
torch_npu's signatures, defaults and output dtypes, composed of PyTorch ops that run as our npu
kernels (so they have autograd wherever their parts do).

Each is what torch_npu's documentation says the operator computes; where torch_npu differs from
the obvious PyTorch op, the difference is kept and said (npu_max's indices are int32,
npu_one_hot's output is float32 and an out-of-range class gives a row of off_value, ...).
docs/api.md lists torch_npu's whole operator list with ours / composite / missing per row.

As in torch_npu, each is also ``torch.ops.npu.<name>`` (npu_max / npu_min as the ``.dim``
overload): the schemas are torch_npu's (adapter/ops/NpuLibrary.cpp) and these functions are their
CompositeImplicitAutograd kernels (``_register_torch_ops``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "copy_memory_", "empty_with_format", "empty_with_swapped_memory", "fast_gelu",
    "npu_bert_apply_adam", "npu_bmmV2", "npu_broadcast", "npu_confusion_transpose",
    "npu_dtype_cast", "npu_layer_norm_eval", "npu_linear", "npu_max", "npu_min", "npu_mish",
    "npu_one_hot", "npu_reshape", "npu_silu", "npu_slice",
    "npu_softmax_cross_entropy_with_logits", "npu_sort_v2", "npu_transpose", "one_",
]


def _tensor(x, op: str, arg: str = "self") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"torch_npu.{op}: {arg} must be a Tensor, got {type(x).__name__}")
    return x


def npu_silu(self: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) (torch_npu deprecates it for torch.nn.functional.silu)."""
    return F.silu(_tensor(self, "npu_silu"))


def npu_mish(self: torch.Tensor) -> torch.Tensor:
    """x * tanh(softplus(x)) (torch_npu deprecates it for torch.nn.functional.mish)."""
    return F.mish(_tensor(self, "npu_mish"))


def fast_gelu(self: torch.Tensor) -> torch.Tensor:
    """CANN's FastGelu: x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)), which is
    x * sigmoid(1.702 x) for every x."""
    return _tensor(self, "fast_gelu") * torch.sigmoid(1.702 * self)


def npu_transpose(self: torch.Tensor, perm: Sequence[int],
                  require_contiguous: bool = True) -> torch.Tensor:
    """self.permute(perm), contiguous unless require_contiguous=False."""
    out = _tensor(self, "npu_transpose").permute(*perm)
    return out.contiguous() if require_contiguous else out


def npu_confusion_transpose(self: torch.Tensor, perm: Sequence[int], shape: Sequence[int],
                            transpose_first: bool) -> torch.Tensor:
    """Transpose then reshape (transpose_first=True), or reshape then transpose."""
    _tensor(self, "npu_confusion_transpose")
    if transpose_first:
        return self.permute(*perm).contiguous().reshape(shape)
    return self.reshape(shape).permute(*perm).contiguous()


def npu_broadcast(self: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """self expanded to `size` (new leading dimensions allowed), as a contiguous tensor."""
    return _tensor(self, "npu_broadcast").expand(*size).contiguous()


def npu_slice(self: torch.Tensor, offsets: Sequence[int], size: Sequence[int]) -> torch.Tensor:
    """The block of shape `size` starting at `offsets` (one of each per dimension)."""
    _tensor(self, "npu_slice")
    if len(offsets) != self.dim() or len(size) != self.dim():
        raise ValueError(f"torch_npu.npu_slice: offsets ({len(offsets)}) and size ({len(size)}) "
                         f"need one entry per dimension of self ({self.dim()})")
    out = self
    for dim, (start, length) in enumerate(zip(offsets, size)):
        if start < 0 or length < 0 or start + length > self.shape[dim]:
            raise ValueError(f"torch_npu.npu_slice: dimension {dim} has {self.shape[dim]} "
                             f"elements; offset {start} + size {length} does not fit")
        out = out.narrow(dim, start, length)
    return out.contiguous()


def npu_max(self: torch.Tensor, dim: int, keepdim: bool = False):
    """(values, indices) of the maximum along `dim`; indices are int32, as torch_npu's."""
    values, indices = torch.max(_tensor(self, "npu_max"), dim, keepdim)
    return values, indices.to(torch.int32)


def npu_min(self: torch.Tensor, dim: int, keepdim: bool = False):
    """(values, indices) of the minimum along `dim`; indices are int32, as torch_npu's."""
    values, indices = torch.min(_tensor(self, "npu_min"), dim, keepdim)
    return values, indices.to(torch.int32)


def npu_dtype_cast(input: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # noqa: A002
    return _tensor(input, "npu_dtype_cast", "input").to(dtype)


def npu_one_hot(input: torch.Tensor, num_classes: int = -1, depth: int = 1,  # noqa: A002
                on_value=1, off_value=0) -> torch.Tensor:
    """A float32 one-hot tensor with `depth` classes along axis `num_classes` (-1: last);
    a class outside [0, depth) gives a row of off_value, as torch_npu's does."""
    _tensor(input, "npu_one_hot", "input")
    if depth < 1:
        raise ValueError(f"torch_npu.npu_one_hot: depth must be at least 1, got {depth}")
    if input.is_floating_point() or input.is_complex():
        raise TypeError(f"torch_npu.npu_one_hot: input must hold integer classes, got "
                        f"{input.dtype}")
    axis = num_classes if num_classes >= 0 else input.dim() + 1 + num_classes
    if not 0 <= axis <= input.dim():
        raise ValueError(f"torch_npu.npu_one_hot: axis num_classes={num_classes} is out of range "
                         f"for a {input.dim()}-d input")
    classes = torch.arange(depth, device=input.device).reshape(
        [depth if d == axis else 1 for d in range(input.dim() + 1)])
    hot = input.unsqueeze(axis).long() == classes
    on = torch.tensor(on_value, dtype=torch.float32, device=input.device)
    off = torch.tensor(off_value, dtype=torch.float32, device=input.device)
    return torch.where(hot, on, off)


def one_(self: torch.Tensor) -> torch.Tensor:
    """Fills self with ones in place (torch_npu deprecates it for fill_)."""
    return _tensor(self, "one_").fill_(1)


def copy_memory_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Copies src into self (npu tensors of one dtype and device, as torch_npu requires)."""
    _tensor(self, "copy_memory_")
    _tensor(src, "copy_memory_", "src")
    if self.device.type != "npu" or src.device != self.device:
        raise RuntimeError(f"torch_npu.copy_memory_: self and src must be on one npu device, got "
                           f"{self.device} and {src.device}; use Tensor.copy_ across devices")
    if self.dtype != src.dtype:
        raise RuntimeError(f"torch_npu.copy_memory_: self is {self.dtype} but src is {src.dtype}; "
                           "they must have the same dtype (or use Tensor.copy_)")
    return self.copy_(src, non_blocking=non_blocking)


def npu_linear(input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
               bias: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(_tensor(input, "npu_linear", "input"), weight, bias)


def npu_bmmV2(self: torch.Tensor, mat2: torch.Tensor,  # noqa: N802 (torch_npu's name)
              output_sizes: Sequence[int] = ()) -> torch.Tensor:
    """Batched matrix product with broadcasting (torch.matmul); output_sizes is accepted and
    checked when given."""
    out = torch.matmul(_tensor(self, "npu_bmmV2"), mat2)
    if output_sizes and list(out.shape) != list(output_sizes):
        raise ValueError(f"torch_npu.npu_bmmV2: the product has shape {list(out.shape)}, not "
                         f"output_sizes={list(output_sizes)}")
    return out


def npu_layer_norm_eval(input: torch.Tensor, normalized_shape, weight=None,  # noqa: A002
                        bias=None, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(_tensor(input, "npu_layer_norm_eval", "input"), normalized_shape,
                        weight, bias, eps)


def npu_reshape(self: torch.Tensor, shape: Sequence[int],
                can_refresh: bool = False) -> torch.Tensor:
    """self with a new shape; can_refresh=True reshapes self in place (its metadata)."""
    _tensor(self, "npu_reshape")
    if can_refresh:
        return self.set_(self.reshape(shape).contiguous())
    return self.reshape(shape)


def npu_sort_v2(self: torch.Tensor, dim: int = -1, descending: bool = False) -> torch.Tensor:
    """The sorted values only (torch_npu deprecates it for torch.sort)."""
    return torch.sort(_tensor(self, "npu_sort_v2"), dim=dim, descending=descending).values


def npu_softmax_cross_entropy_with_logits(self: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row cross entropy against soft labels over the last dimension:
    -sum(labels * log_softmax(self, -1), -1)."""
    _tensor(self, "npu_softmax_cross_entropy_with_logits")
    if labels.shape != self.shape:
        raise ValueError(f"torch_npu.npu_softmax_cross_entropy_with_logits: labels have shape "
                         f"{list(labels.shape)} but logits {list(self.shape)}; they must match")
    return -(labels * torch.log_softmax(self, dim=-1)).sum(-1)


def npu_bert_apply_adam(*args, **kwargs):
    """Refused: torch_npu documents the arguments of this BERT Adam step but not its update
    rule (how max_grad_norm / global_grad_norm clip, what adam_mode=1 'mbert_adam' changes),
    and a guessed rule would train silently differently from a card."""
    raise NotImplementedError(
        "torch_npu.npu_bert_apply_adam is not implemented in SimNPU: torch_npu documents its "
        "arguments but not its update rule (gradient-norm clipping, adam_mode 'mbert_adam'), so "
        "SimNPU does not guess it. Use torch_npu.optim.NpuFusedAdamW, or "
        "torch.optim.AdamW(params, fused=True) on npu (docs/api.md)")


def empty_with_swapped_memory(size: Sequence[int], dtype: torch.dtype | None = None,
                              device=None) -> torch.Tensor:
    """torch_npu's npu tensor whose memory is host memory. Every simulated device page is host
    memory already: this one is a runtime allocation of its own, outside the device caching
    allocator (it counts in neither memory_allocated nor memory_reserved), freed with the
    tensor. torch_npu allows only fill_, zero_ and mul_ (and a few fused optimizer ops)
    on it; here, where device memory is host memory too, every op works."""
    import torch_npu

    if isinstance(size, int):
        size = (size,)
    shape = [int(d) for d in size]
    if any(d < 0 for d in shape):
        raise ValueError(f"torch_npu.empty_with_swapped_memory: negative dimension in {shape}")
    dev = torch.device(device) if device is not None else torch.device(
        "npu", torch_npu.npu.current_device())
    if dev.type != "npu":
        raise ValueError(f"torch_npu.empty_with_swapped_memory: device must be an npu device, "
                         f"got {dev}")
    torch_npu.npu._lazy_init()
    index = dev.index if dev.index is not None else torch_npu.npu.current_device()
    return torch_npu._C._npu_emptyWithSwappedMemory(shape, dtype or torch.get_default_dtype(),
                                                    index)


def empty_with_format(size: Sequence[int], dtype: torch.dtype | None = None, layout=None,
                      device=None, pin_memory: bool = False, acl_format: int = 2,
                      base_addr_aligned_kb: int | None = None) -> torch.Tensor:
    """An uninitialised npu tensor carrying ACL format `acl_format` (2: ND, the default).
    base_addr_aligned_kb: its data starts at a multiple of that many KiB (KV caches ask for 2048,
    a 2 MiB boundary); None or 0 leaves the allocator's own alignment."""
    import torch_npu

    if base_addr_aligned_kb is not None and (
            not isinstance(base_addr_aligned_kb, int) or isinstance(base_addr_aligned_kb, bool)
            or base_addr_aligned_kb < 0):
        raise ValueError(f"torch_npu.empty_with_format: base_addr_aligned_kb must be a "
                         f"non-negative integer (KiB), got {base_addr_aligned_kb!r}")
    if not base_addr_aligned_kb:
        out = torch.empty(size, dtype=dtype, layout=layout, device=device or "npu",
                          pin_memory=pin_memory)
    else:
        # A byte buffer with room to move the start to the boundary; the tensor views it from
        # there (the allocator itself only promises 512-byte alignment).
        align = base_addr_aligned_kb * 1024
        dtype = dtype or torch.get_default_dtype()
        shape = [int(d) for d in size]
        nbytes = math.prod(shape) * dtype.itemsize
        buffer = torch.empty(nbytes + align, dtype=torch.uint8, device=device or "npu",
                             pin_memory=pin_memory)
        offset = -buffer.data_ptr() % align
        out = buffer[offset:offset + nbytes].view(dtype).view(shape)
    if acl_format != 2:
        # In place: npu_format_cast would copy into a new block and lose the alignment.
        torch_npu.npu_format_cast_(out, acl_format)
    return out


# The kernels of the torch.ops.npu schemas (NpuLibrary.cpp): the functions above, for every
# backend and for autograd (CompositeImplicitAutograd), so the two spellings give one result.
_TORCH_OPS = {
    "npu_silu": npu_silu, "npu_mish": npu_mish, "fast_gelu": fast_gelu,
    "npu_transpose": npu_transpose, "npu_confusion_transpose": npu_confusion_transpose,
    "npu_broadcast": npu_broadcast, "npu_slice": npu_slice,
    "npu_max.dim": npu_max, "npu_min.dim": npu_min, "npu_dtype_cast": npu_dtype_cast,
    "npu_one_hot": npu_one_hot, "one_": one_, "copy_memory_": copy_memory_,
    "npu_linear": npu_linear, "npu_bmmV2": npu_bmmV2,
    "npu_layer_norm_eval": npu_layer_norm_eval, "npu_reshape": npu_reshape,
    "npu_sort_v2": npu_sort_v2,
    "npu_softmax_cross_entropy_with_logits": npu_softmax_cross_entropy_with_logits,
    "empty_with_format": empty_with_format,
    "empty_with_swapped_memory": empty_with_swapped_memory,
}
_library = None


def _register_torch_ops() -> None:
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("npu", "IMPL")  # kept alive: dropping it unregisters
    for name, fn in _TORCH_OPS.items():
        _library.impl(name, fn, "CompositeImplicitAutograd")


_register_torch_ops()
