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


# ---- more of torch_npu's operators (schemas: adapter/ops/NpuLibraryExtra.cpp) ----------------
# Optimizer steps, dropouts, strided slicing, padding, quantisation search, vocabulary-parallel
# cross entropy, the superseded attention entry points. The bit packing ops are loops, hence C++
# (adapter/ops/SignBits.cpp); the packed masks here reuse them.

__all__ += [
    "npu_fast_gelu", "npu_silu_", "npu_renorm_backward", "npu_indexing", "npu_pad",
    "npu_stride_add", "npu_masked_fill_range", "npu_alloc_float_status", "npu_ifmr",
    "npu_apply_adam", "npu_apply_adam_w", "npu_dropout_with_add_softmax", "_npu_dropout",
    "dropout_with_byte_mask", "_npu_quant_rms_norm", "npu_fused_linear_online_max_sum",
    "npu_fused_cross_entropy_loss_with_max_sum",
    "npu_fused_linear_cross_entropy_loss_with_max_sum_backward", "npu_sign_bits_pack",
    "npu_sign_bits_unpack", "npu_prompt_flash_attention", "npu_incre_flash_attention",
    "npu_dropout_do_mask", "npu_multi_head_attention", "npu_get_float_status",
    "npu_clear_float_status",
]

_npu = torch.ops.npu


class Format:
    """torch_npu.Format: the ACL storage formats npu_format_cast / get_npu_format take, as
    ints (an IntEnum would do too; these are the values torch_npu's enum has)."""
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


# ---- activations -----------------------------------------------------------------------------

def npu_fast_gelu(self: torch.Tensor) -> torch.Tensor:
    """torch_npu.npu_fast_gelu: the same FastGelu as torch_npu.fast_gelu, x * sigmoid(1.702 x)."""
    return _tensor(self, "npu_fast_gelu") * torch.sigmoid(1.702 * self)


def npu_silu_(self: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) in place."""
    return self.copy_(F.silu(_tensor(self, "npu_silu_")))


# ---- renorm backward ---------------------------------------------------------------------------

def npu_renorm_backward(grad: torch.Tensor, self: torch.Tensor, p: float, dim: int,
                        maxnorm: float) -> torch.Tensor:
    """The gradient of torch.renorm(self, p, dim, maxnorm) for the output gradient `grad`.

    Each slice s of self along `dim` with norm n = ||s||_p above maxnorm is scaled by
    f = maxnorm / (n + 1e-7); the others pass unchanged. Differentiating f * s:
      d/ds = grad * f - maxnorm / (n + 1e-7)^2 * <grad, s> * dn/ds,
      dn/ds = sign(s) |s|^(p-1) / n^(p-1),
    and just grad where n <= maxnorm. Computed in float32 for float16 / bfloat16."""
    _tensor(grad, "npu_renorm_backward", "grad")
    _tensor(self, "npu_renorm_backward")
    if grad.shape != self.shape:
        raise ValueError(f"torch_npu.npu_renorm_backward: grad has shape {list(grad.shape)} but "
                         f"self {list(self.shape)}; they must match")
    if self.dim() == 0:
        raise ValueError("torch_npu.npu_renorm_backward: self must have at least one dimension")
    if p <= 0:
        raise ValueError(f"torch_npu.npu_renorm_backward: p must be positive, got {p}")
    if maxnorm < 0:
        raise ValueError(f"torch_npu.npu_renorm_backward: maxnorm must be non-negative, got "
                         f"{maxnorm}")
    d = dim + self.dim() if dim < 0 else dim
    if not 0 <= d < self.dim():
        raise IndexError(f"torch_npu.npu_renorm_backward: dim {dim} is out of range for a "
                         f"{self.dim()}-d tensor")
    ct = _compute_dtype(self)
    x, g = self.to(ct), grad.to(ct)
    reduce = [i for i in range(x.dim()) if i != d]
    norm = torch.linalg.vector_norm(x, p, dim=reduce, keepdim=True)
    inv = 1.0 / (norm + 1e-7)
    dot = (g * x).sum(dim=reduce, keepdim=True)
    dnorm = torch.sign(x) * x.abs().pow(p - 1) / norm.pow(p - 1)
    scaled = g * (maxnorm * inv) - (maxnorm * inv * inv) * dot * dnorm
    return torch.where(norm > maxnorm, scaled, g).to(self.dtype)


# ---- slicing, padding ------------------------------------------------------------------------

def npu_indexing(self: torch.Tensor, begin: Sequence[int], end: Sequence[int],
                 strides: Sequence[int], begin_mask: int = 0, end_mask: int = 0,
                 ellipsis_mask: int = 0, new_axis_mask: int = 0,
                 shrink_axis_mask: int = 0) -> torch.Tensor:
    """CANN's StridedSlice: self[begin[i]:end[i]:strides[i]] on the first len(begin) dims, as
    a new tensor. Bit i of begin_mask / end_mask: ignore begin[i] / end[i] (the whole
    dimension); of shrink_axis_mask: take the element begin[i] and drop the dimension. Negative
    begin / end count from the end. Strides must be positive."""
    _tensor(self, "npu_indexing")
    if not len(begin) == len(end) == len(strides):
        raise ValueError(f"torch_npu.npu_indexing: begin, end and strides need one entry per "
                         f"sliced dimension, got {len(begin)}, {len(end)}, {len(strides)}")
    if len(begin) > self.dim():
        raise ValueError(f"torch_npu.npu_indexing: {len(begin)} slices for a {self.dim()}-d "
                         f"tensor")
    if ellipsis_mask or new_axis_mask:
        raise NotImplementedError("torch_npu.npu_indexing: ellipsis_mask and new_axis_mask are "
                                  "not implemented in SimNPU; slice every dimension explicitly "
                                  "and unsqueeze the result")
    index = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        size = self.shape[i]
        if s == 0:
            raise ValueError(f"torch_npu.npu_indexing: strides[{i}] is 0; a stride must be "
                             f"non-zero")
        if s < 0:
            raise NotImplementedError(f"torch_npu.npu_indexing: negative strides (strides[{i}] = "
                                      f"{s}) are not implemented in SimNPU; flip the tensor "
                                      f"(torch.flip) and slice it with a positive stride")
        if shrink_axis_mask >> i & 1:
            k = b + size if b < 0 else b
            if not 0 <= k < size:
                raise IndexError(f"torch_npu.npu_indexing: begin[{i}] = {b} is out of range for "
                                 f"dimension {i} of size {size}")
            index.append(k)
            continue
        b = 0 if begin_mask >> i & 1 else b
        e = size if end_mask >> i & 1 else e
        index.append(slice(b, e, s))
    return self[tuple(index)].clone(memory_format=torch.contiguous_format)


def npu_pad(input: torch.Tensor, paddings: Sequence[int]) -> torch.Tensor:  # noqa: A002
    """Zero padding: paddings holds (before, after) for each dimension, dimension 0 first
    (CANN's Pad), so a 2-d input takes [top, bottom, left, right]."""
    _tensor(input, "npu_pad", "input")
    if len(paddings) != 2 * input.dim():
        raise ValueError(f"torch_npu.npu_pad: paddings needs a (before, after) pair for each of "
                         f"the {input.dim()} dimensions ({2 * input.dim()} numbers), got "
                         f"{len(paddings)}")
    if any(p < 0 for p in paddings):
        raise ValueError(f"torch_npu.npu_pad: paddings must be non-negative, got {list(paddings)}")
    pad = []
    for d in reversed(range(input.dim())):
        pad += [paddings[2 * d], paddings[2 * d + 1]]
    return F.pad(input, pad)


def npu_stride_add(self: torch.Tensor, other: torch.Tensor, offset1, offset2,
                   c1_len) -> torch.Tensor:
    """CANN's StrideAdd on 5HD (N, C1, H, W, C0) tensors: the c1_len channel blocks of self from
    block offset1 plus those of other from offset2. As torch_npu sizes the output, it has
    16 * c1_len blocks along dimension 1 (c1_len * C0 channels at C0 = 16): the sum fills the
    first c1_len, the rest is zero."""
    _tensor(self, "npu_stride_add")
    _tensor(other, "npu_stride_add", "other")
    off1, off2, n = int(offset1), int(offset2), int(c1_len)
    if self.dim() != 5 or other.dim() != 5:
        raise ValueError(f"torch_npu.npu_stride_add: self and other must be 5HD (5-d) tensors, "
                         f"got {self.dim()}-d and {other.dim()}-d")
    if self.shape[0] != other.shape[0] or self.shape[2:] != other.shape[2:]:
        raise ValueError(f"torch_npu.npu_stride_add: self {list(self.shape)} and other "
                         f"{list(other.shape)} must match except in dimension 1 (C1)")
    if n < 1 or off1 < 0 or off2 < 0 or off1 + n > self.shape[1] or off2 + n > other.shape[1]:
        raise ValueError(f"torch_npu.npu_stride_add: blocks [{off1}, {off1 + n}) of self (C1 "
                         f"{self.shape[1]}) and [{off2}, {off2 + n}) of other (C1 "
                         f"{other.shape[1]}) must lie inside them, with c1_len >= 1")
    total = self.narrow(1, off1, n) + other.narrow(1, off2, n)
    zeros = total.new_zeros([self.shape[0], 16 * n - n, *self.shape[2:]])
    return torch.cat([total, zeros], dim=1)


def npu_masked_fill_range(self: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
                          value: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Fills ranges along `axis` with value[i]: start and end are int32 [num, batch], value has
    num entries. Range (i, j) is [start[i, j], end[i, j]). When axis is the last dimension of
    an input of 2 or more dimensions, range (i, j) applies to row j of dimension 0 only;
    otherwise every range applies to the whole tensor."""
    _tensor(self, "npu_masked_fill_range")
    for name, t in (("start", start), ("end", end), ("value", value)):
        _tensor(t, "npu_masked_fill_range", name)
    if start.dim() != 2 or end.shape != start.shape:
        raise ValueError(f"torch_npu.npu_masked_fill_range: start and end must be 2-d "
                         f"[num, batch] of one shape, got {list(start.shape)} and "
                         f"{list(end.shape)}")
    if start.dtype != torch.int32 or end.dtype != torch.int32:
        raise TypeError(f"torch_npu.npu_masked_fill_range: start and end must be int32, got "
                        f"{start.dtype} and {end.dtype}")
    num, batch = start.shape
    if value.numel() != num:
        raise ValueError(f"torch_npu.npu_masked_fill_range: value has {value.numel()} entries, "
                         f"start / end describe {num}")
    if self.dim() == 0:
        raise ValueError("torch_npu.npu_masked_fill_range: self must have at least one dim")
    ax = axis + self.dim() if axis < 0 else axis
    if not 0 <= ax < self.dim():
        raise IndexError(f"torch_npu.npu_masked_fill_range: axis {axis} is out of range for a "
                         f"{self.dim()}-d tensor")
    per_row = self.dim() >= 2 and ax == self.dim() - 1
    if per_row and batch != self.shape[0]:
        raise ValueError(f"torch_npu.npu_masked_fill_range: start has {batch} ranges per value "
                         f"but dimension 0 of self has {self.shape[0]} rows")
    pos = torch.arange(self.shape[ax], device=self.device)
    vals = value.reshape(-1).to(self.dtype)
    out = self.clone()
    for i in range(num):
        inside = (pos >= start[i].unsqueeze(1)) & (pos < end[i].unsqueeze(1))  # [batch, L]
        if per_row:
            mask = inside.reshape([batch] + [1] * (self.dim() - 2) + [self.shape[ax]])
        else:
            mask = inside.any(0).reshape([-1 if d == ax else 1 for d in range(self.dim())])
        out = torch.where(mask, vals[i], out)
    return out


# ---- float status ------------------------------------------------------------------------------

def npu_alloc_float_status(self: torch.Tensor) -> torch.Tensor:
    """The 8-float32 buffer torch_npu's overflow-status ops read the status register into,
    zeroed, on self's device. Allocating it is all this op does on the card too; SimNPU does
    not simulate the register itself, so npu_get_float_status / npu_clear_float_status refuse
    with NotImplementedError (docs/api.md)."""
    device = _tensor(self, "npu_alloc_float_status").device
    return torch.zeros(8, dtype=torch.float32, device=device)


def _float_status_not_simulated(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"torch_npu.{name} is not implemented in SimNPU: it reads or clears the card's float "
            f"overflow status register, which SimNPU does not simulate (its kernels compute "
            f"IEEE results, so an overflow shows as inf / nan in the tensors: check them with "
            f"torch.isfinite). npu_alloc_float_status works (docs/api.md)")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Refused: {name} needs the float overflow status register (not simulated)."
    return refuse


npu_get_float_status = _float_status_not_simulated("npu_get_float_status")
npu_clear_float_status = _float_status_not_simulated("npu_clear_float_status")


# ---- IFMR quantisation search -----------------------------------------------------------------

def npu_ifmr(data: torch.Tensor, data_min: torch.Tensor, data_max: torch.Tensor,
             cumsum: torch.Tensor, min_percentile: float, max_percentile: float,
             search_start: float, search_end: float, search_step: float,
             with_offset: bool):
    """CANN's IFMR (input feature map reconstruction): the int8 quantisation scale and offset
    of `data` that minimise the squared reconstruction error.

    - from the cumulative histogram `cumsum` (B bins over [data_min, data_max]), the initial
      max / min are the left edges of the first bins where the CDF reaches max_percentile /
      1 - min_percentile;
    - candidates: max_init * s for s in arange(search_start, search_end, search_step)
      (float32, stepped as NumPy's arange), with min_init; with_offset: asymmetric
      (scale = (max - min) / 255, offset = -(round(min / scale) + 128)), else symmetric
      (max = max(|max_init|, |min_init|), scale = max / 127, offset 0);
    - each candidate quantises data (round, + offset, clip to [-128, 127]) and back; the one
      with the least sum of squared errors wins (the first on a tie).
    Returns float32 (scale, offset) of shape [1]."""
    for name, t in (("data", data), ("data_min", data_min), ("data_max", data_max),
                    ("cumsum", cumsum)):
        _tensor(t, "npu_ifmr", name)
    if cumsum.dim() != 1 or cumsum.numel() == 0:
        raise ValueError(f"torch_npu.npu_ifmr: cumsum must be a 1-d histogram, got shape "
                         f"{list(cumsum.shape)}")
    if search_step <= 0 or search_end <= search_start:
        raise ValueError(f"torch_npu.npu_ifmr: the search needs search_start < search_end and "
                         f"search_step > 0, got {search_start}, {search_end}, {search_step}")
    f32 = torch.float32
    x = data.to(f32).reshape(-1)
    lo, hi = data_min.to(f32).reshape(-1)[:1], data_max.to(f32).reshape(-1)[:1]
    bins = cumsum.numel()
    cdf = cumsum.to(f32) / float(x.numel())
    max_index = (cdf < max_percentile).sum().to(f32)
    min_index = (cdf < 1 - min_percentile).sum().to(f32)
    max_init = max_index / bins * (hi - lo) + lo
    min_init = min_index / bins * (hi - lo) + lo
    count = math.ceil((search_end - search_start) / search_step)
    first = torch.tensor(search_start, dtype=f32)
    delta = torch.tensor(search_start + search_step, dtype=f32) - first
    steps = (first + torch.arange(count, dtype=f32) * delta).to(x.device)
    if with_offset:
        max_init = max_init.clamp(min=0)
        min_init = min_init.clamp(max=0)
        scale = (max_init * steps - min_init) / 255
        scale = torch.where(scale < 1.192092896e-07, torch.ones_like(scale), scale)
        offset = -(torch.round(min_init / scale) + 128)
    else:
        max_init = torch.maximum(max_init.abs(), min_init.abs())
        scale = max_init * steps / 127
        offset = torch.zeros_like(scale)
    losses = []
    for i in range(count):
        q = (torch.round(x / scale[i]) + offset[i]).clamp(-128, 127)
        losses.append(((q - offset[i]) * scale[i] - x).square().sum())
    best = torch.argmin(torch.stack(losses))
    return scale[best].reshape(1), offset[best].reshape(1)


# ---- optimizer steps -----------------------------------------------------------------------

def _check_state(op: str, grad, var, m, v):
    _tensor(grad, op, "grad")
    for name, t in (("var", var), ("m", m), ("v", v)):
        _tensor(t, op, name)
        if t.shape != grad.shape:
            raise ValueError(f"torch_npu.{op}: {name} has shape {list(t.shape)} but grad "
                             f"{list(grad.shape)}; they must match")


def _apply_adam_out(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                    use_locking=None, use_nesterov=None, *, var, m, v):
    """One Adam step (TensorFlow's ApplyAdam), var, m, v updated in place:
      m = m + (1 - beta1) (grad - m),  v = v + (1 - beta2) (grad^2 - v),
      lr_t = lr sqrt(1 - beta2_power) / (1 - beta1_power),
      var -= lr_t m / (epsilon + sqrt(v))   (use_nesterov: m -> beta1 m + (1 - beta1) grad)."""
    _check_state("npu_apply_adam", grad, var, m, v)
    beta1, beta2 = float(beta1), float(beta2)
    m_t = m + (beta1 - 1) * (m - grad)
    v_t = v + (beta2 - 1) * (v - grad * grad)
    # A float32 tensor, so that beta1_power = 1 gives inf / nan as on the card, not an error.
    powers = torch.tensor([float(beta1_power), float(beta2_power)], dtype=torch.float32)
    lr_t = (float(lr) * torch.sqrt(1 - powers[1]) / (1 - powers[0])).item()
    step = m_t * beta1 + (1 - beta1) * grad if use_nesterov else m_t
    var_t = var - lr_t * step / (float(epsilon) + torch.sqrt(v_t))
    var.copy_(var_t)
    m.copy_(m_t)
    v.copy_(v_t)
    return var, m, v


def npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                   use_locking=None, use_nesterov=None, out=None):
    """torch_npu.npu_apply_adam(..., out=(var, m, v)): one Adam step on var, m, v in place;
    returns them (the formula: torch.ops.npu.npu_apply_adam.out's kernel)."""
    if out is None or len(out) != 3:
        raise ValueError("torch_npu.npu_apply_adam: pass the state to update as "
                         "out=(var, m, v)")
    return _npu.npu_apply_adam.out(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                                   use_locking, use_nesterov, var=out[0], m=out[1], v=out[2])


def _apply_adam_w_out(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad,
                      max_grad_norm=None, amsgrad=None, maximize=None, *, var, m, v):
    """One AdamW step (CANN's ApplyAdamW), var, m, v updated in place; beta1_power and
    beta2_power are the powers before this step (the op multiplies them by beta1 / beta2):
      g = -grad if maximize else grad
      m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
      var = var (1 - lr weight_decay)
            - lr m / (1 - beta1_power beta1) / (sqrt(v' / (1 - beta2_power beta2)) + epsilon)
    with v' = max(max_grad_norm, v) under amsgrad, else v."""
    _check_state("npu_apply_adam_w", grad, var, m, v)
    if amsgrad and max_grad_norm is None:
        raise ValueError("torch_npu.npu_apply_adam_w: amsgrad=True needs max_grad_norm (the "
                         "running maximum of v)")
    lr, wd = float(lr), float(weight_decay)
    beta1, beta2 = float(beta1), float(beta2)
    bp1, bp2 = float(beta1_power) * beta1, float(beta2_power) * beta2
    g = -grad if maximize else grad
    m_t = m * beta1 + (1 - beta1) * g
    v_t = v * beta2 + (1 - beta2) * g * g
    v_hat = torch.maximum(max_grad_norm, v_t) if amsgrad else v_t
    denom = torch.sqrt(v_hat / (1 - bp2)) + float(epsilon)
    var_t = var * (1 - lr * wd) - lr * m_t / (1 - bp1) / denom
    var.copy_(var_t)
    m.copy_(m_t)
    v.copy_(v_t)
    return var, m, v


def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad,
                     max_grad_norm=None, amsgrad=None, maximize=None, out=None):
    """torch_npu.npu_apply_adam_w(..., out=(var, m, v)): one AdamW step on var, m, v in place;
    returns them (the formula: torch.ops.npu.npu_apply_adam_w.out's kernel)."""
    if out is None or len(out) != 3:
        raise ValueError("torch_npu.npu_apply_adam_w: pass the state to update as "
                         "out=(var, m, v)")
    return _npu.npu_apply_adam_w.out(beta1_power, beta2_power, lr, weight_decay, beta1, beta2,
                                     epsilon, grad, max_grad_norm, amsgrad, maximize,
                                     var=out[0], m=out[1], v=out[2])


# ---- dropouts --------------------------------------------------------------------------------

def _check_prob(op: str, p: float, name: str = "p") -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"torch_npu.{op}: {name} is a drop probability in [0, 1], got {p}")
    return p


def _byte_mask(like: torch.Tensor, p: float) -> torch.Tensor:
    """uint8 keep mask (1 with probability 1 - p) of like's shape."""
    if p == 0.0:
        return torch.ones(like.shape, dtype=torch.uint8, device=like.device)
    return (torch.rand(like.shape, device=like.device) >= p).to(torch.uint8)


def _apply_mask(x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    if p == 0.0:
        return x.clone()
    if p == 1.0:
        return x * 0
    return x * mask.to(x.dtype) * (1.0 / (1.0 - p))


def npu_dropout_with_add_softmax(self: torch.Tensor, x1: torch.Tensor, alpha, prob: float,
                                 dim: int):
    """softmax(x1 + alpha * self, dim) (in float32, rounded to self's dtype), then dropout
    with drop probability prob. Returns (mask, softmax_out, output): mask is the uint8 keep
    mask, output = softmax_out * mask / (1 - prob)."""
    _tensor(self, "npu_dropout_with_add_softmax")
    _tensor(x1, "npu_dropout_with_add_softmax", "x1")
    _check_prob("npu_dropout_with_add_softmax", prob, "prob")
    ct = _compute_dtype(self)
    # One float32 temporary fewer than x1 + alpha * self: these are attention-score sized.
    scores = torch.add(x1.to(ct), self.to(ct), alpha=float(alpha))
    softmax_out = torch.softmax(scores, dim).to(self.dtype)
    del scores
    mask = _byte_mask(softmax_out, prob)
    return mask, softmax_out, _apply_mask(softmax_out, mask, prob)


def _bit_mask(keep: torch.Tensor, pad_to: int, pad_bit: bool) -> torch.Tensor:
    """keep (bool, any shape) as a 1-d uint8 of bits (least significant first), padded with
    pad_bit to a multiple of pad_to elements: the sign bit packing kernel on +1 / -1."""
    flat = torch.where(keep.reshape(-1), 1.0, -1.0)
    pad = -flat.numel() % pad_to
    if pad:
        flat = torch.cat([flat, flat.new_full((pad,), 1.0 if pad_bit else -1.0)])
    return _npu.npu_sign_bits_pack(flat, 1).reshape(-1)


def _npu_dropout(self: torch.Tensor, p: float):
    """Dropout with drop probability p: (output, mask), mask bit-packed as torch_npu's (one bit
    per element, set = kept, least significant first, padded to a multiple of 128 elements:
    ceil(numel / 128) * 16 bytes)."""
    _tensor(self, "_npu_dropout")
    _check_prob("_npu_dropout", p)
    keep = _byte_mask(self, p)
    return _apply_mask(self, keep, p), _bit_mask(keep.bool(), 128, False)


def npu_dropout_do_mask(self: torch.Tensor, mask: torch.Tensor, p: float):
    """Dropout with a given bit mask (the one _npu_dropout returns): (self * kept / (1 - p),
    mask)."""
    _tensor(self, "npu_dropout_do_mask")
    _tensor(mask, "npu_dropout_do_mask", "mask")
    _check_prob("npu_dropout_do_mask", p)
    if mask.dtype != torch.uint8 or mask.numel() * 8 < self.numel():
        raise ValueError(f"torch_npu.npu_dropout_do_mask: mask must be the uint8 bit mask of "
                         f"{self.numel()} elements (at least {(self.numel() + 7) // 8} bytes), "
                         f"got {mask.dtype} with {mask.numel()} elements")
    bits = _npu.npu_sign_bits_unpack(mask.reshape(-1), 1, torch.float32).reshape(-1)
    keep = (bits[:self.numel()] > 0).reshape(self.shape)
    return _apply_mask(self, keep, p), mask.clone()


def npu_multi_head_attention(query, key, value, query_weight, key_weight, value_weight,
                             attn_mask, out_proj_weight, query_bias, key_bias, value_bias,
                             out_proj_bias, dropout_mask, attn_head_num: int,
                             attn_dim_per_head: int, src_len: int, tgt_len: int,
                             dropout_prob: float, softmax_use_float: bool):
    """torch_npu's fused multi-head attention (Transformer encoder / decoder layers, 2-d
    [batch * len, embed] inputs):
      q = (query W_q^T + b_q) / sqrt(d), k, v likewise (no scaling), split into heads;
      scores = q k^T + attn_mask; probs = softmax(scores) (in float32 if softmax_use_float),
      in the input dtype, then dropout with dropout_mask (a bit mask from _npu_dropout) or a
      new one; context = probs v, heads merged; y = context W_o^T + b_o.
    Returns (y, dropout_mask, q, k, v, softmax, dropout output, context) with q, k, v as
    [batch, heads, len, d]."""
    op = "npu_multi_head_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        _tensor(t, op, name)
        if t.dim() != 2 or t.shape[1] != attn_head_num * attn_dim_per_head:
            raise ValueError(f"torch_npu.{op}: {name} must be [batch * len, attn_head_num * "
                             f"attn_dim_per_head = {attn_head_num * attn_dim_per_head}], got "
                             f"{list(t.shape)}")
    if query.shape[0] % tgt_len or key.shape[0] % src_len or value.shape[0] != key.shape[0]:
        raise ValueError(f"torch_npu.{op}: query must have batch * tgt_len rows and key / value "
                         f"batch * src_len rows, got {query.shape[0]}, {key.shape[0]}, "
                         f"{value.shape[0]} for tgt_len {tgt_len}, src_len {src_len}")
    batch = query.shape[0] // tgt_len
    heads, d = attn_head_num, attn_dim_per_head

    def split(t, length):
        return t.reshape(batch, length, heads, d).permute(0, 2, 1, 3).contiguous()

    q = split(F.linear(query, query_weight, query_bias) * (d ** -0.5), tgt_len)
    k = split(F.linear(key, key_weight, key_bias), src_len)
    v = split(F.linear(value, value_weight, value_bias), src_len)
    scores = torch.matmul(q, k.transpose(-2, -1)) + attn_mask
    soft = F.softmax(scores, dim=-1, dtype=torch.float32 if softmax_use_float else None)
    if dropout_mask is None:
        probs, mask = _npu_dropout(soft.to(query.dtype), dropout_prob)
    else:
        probs, mask = npu_dropout_do_mask(soft.to(query.dtype), dropout_mask, dropout_prob)
    context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(batch * tgt_len, heads * d)
    y = F.linear(context, out_proj_weight, out_proj_bias)
    return y, mask, q, k, v, soft, probs, context


def dropout_with_byte_mask(self: torch.Tensor, p: float = 0.5, train: bool = True) -> torch.Tensor:
    """Dropout whose mask is a uint8 byte per element (torch_npu's DropoutWithByteMask):
    in training, each element is kept with probability 1 - p and scaled by 1 / (1 - p)."""
    _tensor(self, "dropout_with_byte_mask")
    _check_prob("dropout_with_byte_mask", p)
    if not train or p == 0.0:
        return self.clone()
    return _apply_mask(self, _byte_mask(self, p), p)


# ---- quantised RMS norm ----------------------------------------------------------------------

def _npu_quant_rms_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                        scale: torch.Tensor, offset: torch.Tensor, y: torch.Tensor,
                        eps: float = 1e-6) -> torch.Tensor:
    """RMS norm over the last dimension, then int8 quantisation, written into y:
    y = clamp(round((x / sqrt(mean(x^2) + eps) * gamma + beta) / scale + offset), -128, 127),
    in float32."""
    for name, t in (("x", x), ("gamma", gamma), ("beta", beta), ("scale", scale),
                    ("offset", offset), ("y", y)):
        _tensor(t, "_npu_quant_rms_norm", name)
    if y.shape != x.shape or y.dtype != torch.int8:
        raise ValueError(f"torch_npu._npu_quant_rms_norm: y must be int8 of x's shape "
                         f"{list(x.shape)}, got {y.dtype} {list(y.shape)}")
    n = x.shape[-1]
    if gamma.numel() != n or beta.numel() != n:
        raise ValueError(f"torch_npu._npu_quant_rms_norm: gamma and beta need {n} entries (the "
                         f"last dimension of x), got {gamma.numel()} and {beta.numel()}")
    xf = x.float()
    normed = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    z = normed * gamma.float().reshape(n) + beta.float().reshape(n)
    q = torch.round(z / scale.float().reshape(-1)[0] + offset.float().reshape(-1)[0])
    return y.copy_(q.clamp(-128, 127).to(torch.int8))


# ---- vocabulary-parallel cross entropy -----------------------------------------------------

def npu_fused_linear_online_max_sum(input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
                                    target: torch.Tensor, vocab_start_index: int,
                                    vocab_end_index: int, return_logits: bool = False):
    """The first half of Megatron's vocabulary-parallel cross entropy, fused with the linear
    layer, on this rank's vocabulary slice [vocab_start_index, vocab_end_index):
      logits = input @ weight^T (float32); logits_max = max over the vocabulary;
      sum_exp_logits = sum exp(logits - logits_max);
      target_mask = target outside the slice; masked_target = target - vocab_start_index
      (0 where masked); predicted_logits = (logits - logits_max)[masked_target] (0 where masked).
    Returns (logits_max, sum_exp_logits, predicted_logits, target_mask, masked_target,
    vocab_parallel_logits): float32 x3; target_mask bit-packed uint8 ceil(B / 8) (bit set =
    masked, least significant first, padding bits set); masked_target of target's dtype;
    the logits in input's dtype when return_logits, else None."""
    _tensor(input, "npu_fused_linear_online_max_sum", "input")
    _tensor(weight, "npu_fused_linear_online_max_sum", "weight")
    _tensor(target, "npu_fused_linear_online_max_sum", "target")
    if input.dim() != 2 or weight.dim() != 2 or input.shape[1] != weight.shape[1]:
        raise ValueError(f"torch_npu.npu_fused_linear_online_max_sum: input [B, H] and weight "
                         f"[V, H] must share H, got {list(input.shape)} and "
                         f"{list(weight.shape)}")
    if target.shape != (input.shape[0],) or target.is_floating_point():
        raise ValueError(f"torch_npu.npu_fused_linear_online_max_sum: target must be integer "
                         f"[{input.shape[0]}], got {target.dtype} {list(target.shape)}")
    logits = input.float() @ weight.float().t()
    logits_max = logits.amax(-1)
    shifted = logits - logits_max.unsqueeze(-1)
    sum_exp = shifted.exp().sum(-1)
    mask = (target < vocab_start_index) | (target >= vocab_end_index)
    masked_target = torch.where(mask, 0, target - vocab_start_index).to(target.dtype)
    picked = shifted.gather(1, masked_target.long().clamp(0, logits.shape[1] - 1).unsqueeze(1))
    predicted = torch.where(mask, 0.0, picked.squeeze(1))
    packed = _bit_mask(mask, 8, True)
    vocab_logits = logits.to(input.dtype) if return_logits else None
    return logits_max, sum_exp, predicted, packed, masked_target, vocab_logits


def _no_label_smoothing(op: str, label_smoothing) -> None:
    if label_smoothing:
        raise NotImplementedError(f"torch_npu.{op}: label_smoothing {label_smoothing} is not "
                                  f"implemented (CANN's operator supports only 0)")


def npu_fused_cross_entropy_loss_with_max_sum(logits_max: torch.Tensor,
                                              sum_exp_logits: torch.Tensor,
                                              predicted_logits: torch.Tensor,
                                              label_smoothing: float = 0.0,
                                              input=None,  # noqa: A002
                                              weight=None, vocab_parallel_logits=None):
    """The loss from the all-reduced max / sum / predicted logits:
    loss = log(sum_exp_logits) - predicted_logits (float32 [B]), and with
    vocab_parallel_logits the softmax exp(logits - logits_max) / sum_exp_logits (float32
    [B, V]), else None. input / weight are reserved (CANN accepts only None)."""
    op = "npu_fused_cross_entropy_loss_with_max_sum"
    for name, t in (("logits_max", logits_max), ("sum_exp_logits", sum_exp_logits),
                    ("predicted_logits", predicted_logits)):
        _tensor(t, op, name)
        if t.dim() != 1 or t.shape != logits_max.shape:
            raise ValueError(f"torch_npu.{op}: logits_max, sum_exp_logits and predicted_logits "
                             f"must be 1-d of one shape, got {name} {list(t.shape)}")
    _no_label_smoothing(op, label_smoothing)
    if input is not None or weight is not None:
        raise NotImplementedError(f"torch_npu.{op}: input and weight are reserved; pass None "
                                  f"(CANN's operator accepts only None)")
    loss = torch.log(sum_exp_logits.float()) - predicted_logits.float()
    softmax = None
    if vocab_parallel_logits is not None:
        softmax = torch.exp(vocab_parallel_logits.float() - logits_max.float().unsqueeze(-1)) \
            / sum_exp_logits.float().unsqueeze(-1)
    return loss, softmax


def npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
        grad: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
        target_mask: torch.Tensor, masked_target: torch.Tensor, label_smoothing: float = 0.0,
        logits_max=None, sum_exp_logits=None, softmax=None):
    """The backward of the fused linear + vocabulary-parallel cross entropy:
    d_logits = (softmax - onehot(masked_target) * (1 - target_mask)) * grad[:, None],
    input_grad = d_logits @ weight, weight_grad = d_logits^T @ input (in their dtypes).
    softmax is the saved one (fast mode), or is recomputed from input, weight, logits_max and
    sum_exp_logits (memory-saving mode). target_mask is the bit-packed mask of
    npu_fused_linear_online_max_sum."""
    op = "npu_fused_linear_cross_entropy_loss_with_max_sum_backward"
    for name, t in (("grad", grad), ("input", input), ("weight", weight),
                    ("target_mask", target_mask), ("masked_target", masked_target)):
        _tensor(t, op, name)
    _no_label_smoothing(op, label_smoothing)
    b, v = input.shape[0], weight.shape[0]
    if target_mask.dtype != torch.uint8 or target_mask.numel() * 8 < b:
        raise ValueError(f"torch_npu.{op}: target_mask must be the uint8 bit mask of "
                         f"{b} rows ({(b + 7) // 8} bytes), got {target_mask.dtype} "
                         f"{list(target_mask.shape)}")
    if softmax is None:
        if logits_max is None or sum_exp_logits is None:
            raise ValueError(f"torch_npu.{op}: pass softmax, or logits_max and sum_exp_logits "
                             f"to recompute it")
        logits = input.float() @ weight.float().t()
        softmax = torch.exp(logits - logits_max.float().unsqueeze(-1)) \
            / sum_exp_logits.float().unsqueeze(-1)
    if softmax.shape != (b, v):
        raise ValueError(f"torch_npu.{op}: softmax must be [{b}, {v}], got "
                         f"{list(softmax.shape)}")
    masked = _npu.npu_sign_bits_unpack(target_mask.reshape(-1), 1, torch.float32).reshape(-1)[:b]
    keep = (masked < 0).float()
    onehot = torch.zeros(b, v, dtype=torch.float32, device=softmax.device).scatter_(
        1, masked_target.long().clamp(0, v - 1).unsqueeze(1), keep.unsqueeze(1))
    d_logits = (softmax.float() - onehot) * grad.float().unsqueeze(-1)
    input_grad = (d_logits @ weight.float()).to(input.dtype)
    weight_grad = (d_logits.t() @ input.float()).to(weight.dtype)
    return input_grad, weight_grad


# ---- prompt / incremental flash attention ----------------------------------------------------

def npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None,
                               pse_shift=None, actual_seq_lengths=None, deq_scale1=None,
                               quant_scale1=None, deq_scale2=None, quant_scale2=None,
                               quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147473647, next_tokens=0, input_layout="BSH",
                               num_key_value_heads=0, actual_seq_lengths_kv=None,
                               sparse_mode=0):
    """torch_npu's full-sequence (prefill) inference attention: the attention output of
    npu_fused_infer_attention_score, which superseded it, with the same arguments
    (scale_value is its scale, deq_scale* its dequant_scale*). padding_mask is reserved."""
    if padding_mask is not None:
        raise NotImplementedError("torch_npu.npu_prompt_flash_attention: padding_mask is a "
                                  "reserved argument; pass None (use atten_mask)")
    return _npu.npu_fused_infer_attention_score(
        query, key, value, pse_shift=pse_shift, atten_mask=atten_mask,
        actual_seq_lengths=actual_seq_lengths, actual_seq_lengths_kv=actual_seq_lengths_kv,
        dequant_scale1=deq_scale1, quant_scale1=quant_scale1, dequant_scale2=deq_scale2,
        quant_scale2=quant_scale2, quant_offset2=quant_offset2, num_heads=num_heads,
        scale=scale_value, pre_tokens=pre_tokens, next_tokens=next_tokens,
        input_layout=input_layout, num_key_value_heads=num_key_value_heads,
        sparse_mode=sparse_mode)[0]


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None,
                              atten_mask=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, dequant_scale1=None,
                              quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1):
    """torch_npu's incremental (decode) inference attention: the attention output of
    npu_fused_infer_attention_score, which superseded it. actual_seq_lengths are the key /
    value lengths here (its actual_seq_lengths_kv); the rest keep their names."""
    if padding_mask is not None:
        raise NotImplementedError("torch_npu.npu_incre_flash_attention: padding_mask is a "
                                  "reserved argument; pass None (use atten_mask)")
    return _npu.npu_fused_infer_attention_score(
        query, key, value, pse_shift=pse_shift, atten_mask=atten_mask,
        actual_seq_lengths_kv=actual_seq_lengths, antiquant_scale=antiquant_scale,
        antiquant_offset=antiquant_offset, block_table=block_table,
        dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
        dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
        kv_padding_size=kv_padding_size, num_heads=num_heads, scale=scale_value,
        input_layout=input_layout, num_key_value_heads=num_key_value_heads,
        block_size=block_size, inner_precise=inner_precise)[0]


# ---- bit packing (C++ kernels) ---------------------------------------------------------------

npu_sign_bits_pack = _npu.npu_sign_bits_pack
npu_sign_bits_unpack = _npu.npu_sign_bits_unpack


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
_TORCH_OPS.update({
    "npu_fast_gelu": npu_fast_gelu, "npu_silu_": npu_silu_,
    "npu_renorm_backward": npu_renorm_backward, "npu_indexing": npu_indexing,
    "npu_pad": npu_pad, "npu_stride_add": npu_stride_add,
    "npu_masked_fill_range": npu_masked_fill_range,
    "npu_alloc_float_status": npu_alloc_float_status, "npu_ifmr": npu_ifmr,
    "npu_apply_adam.out": _apply_adam_out, "npu_apply_adam_w.out": _apply_adam_w_out,
    "npu_dropout_with_add_softmax": npu_dropout_with_add_softmax,
    "_npu_dropout": _npu_dropout, "dropout_with_byte_mask": dropout_with_byte_mask,
    "npu_dropout_do_mask": npu_dropout_do_mask,
    "npu_multi_head_attention": npu_multi_head_attention,
    "_npu_quant_rms_norm": _npu_quant_rms_norm,
    "npu_fused_linear_online_max_sum": npu_fused_linear_online_max_sum,
    "npu_fused_cross_entropy_loss_with_max_sum": npu_fused_cross_entropy_loss_with_max_sum,
    "npu_fused_linear_cross_entropy_loss_with_max_sum_backward":
        npu_fused_linear_cross_entropy_loss_with_max_sum_backward,
    "npu_prompt_flash_attention": npu_prompt_flash_attention,
    "npu_incre_flash_attention": npu_incre_flash_attention,
})
_library = None


def _register_torch_ops() -> None:
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("npu", "IMPL")  # kept alive: dropping it unregisters
    for name, fn in _TORCH_OPS.items():
        _library.impl(name, fn, "CompositeImplicitAutograd")


_register_torch_ops()
