"""torch_npu.utils.npu_combine_tensors and its two companions: many NPU tensors moved into one
contiguous buffer (one allocation, e.g. one flat gradient buffer for a fused optimizer or a
collective), each original tensor then reading and writing its slice of that buffer."""

import torch


def _check_list(list_of_tensor, what):
    if not isinstance(list_of_tensor, (list, tuple)) or not list_of_tensor:
        raise ValueError(f"{what}: list_of_tensor must be a non-empty list of NPU tensors")
    dtype = list_of_tensor[0].dtype if isinstance(list_of_tensor[0], torch.Tensor) else None
    for i, t in enumerate(list_of_tensor):
        if not isinstance(t, torch.Tensor) or t.device.type != "npu":
            raise ValueError(f"{what}: list_of_tensor[{i}] is not an NPU tensor "
                             f"({type(t).__name__} on {getattr(t, 'device', 'no device')})")
        if not t.is_contiguous():
            raise ValueError(f"{what}: list_of_tensor[{i}] is not contiguous; call "
                             ".contiguous() first (torch_npu requires contiguous tensors)")
        if t.dtype != dtype:
            raise ValueError(f"{what}: list_of_tensor[{i}] is {t.dtype}, the first tensor "
                             f"{dtype}; every tensor must have one dtype")


def npu_combine_tensors(list_of_tensor, require_copy_value=True):
    """Returns a new 1-D tensor holding every tensor of the list one after the other; each
    tensor of the list is re-pointed at its slice (same shape and strides), so writes through
    either are seen by the other. With require_copy_value=False the slices start as zeros.
    All tensors must be contiguous NPU tensors of one dtype (on one device)."""
    _check_list(list_of_tensor, "npu_combine_tensors")
    devices = {t.device for t in list_of_tensor}
    if len(devices) > 1:
        raise ValueError(f"npu_combine_tensors: the tensors are on {sorted(map(str, devices))}; "
                         "they must all be on one NPU")
    total = sum(t.numel() for t in list_of_tensor)
    first = list_of_tensor[0]
    combined = torch.zeros(total, dtype=first.dtype, device=first.device)
    offset = 0
    with torch.no_grad():
        for t in list_of_tensor:
            n = t.numel()
            if require_copy_value:
                combined[offset:offset + n].copy_(t.reshape(-1))
            t.set_(combined.untyped_storage(), offset, t.size(), t.stride())
            offset += n
    return combined


def get_part_combined_tensor(combined_tensor, index, size):
    """The `size` elements of a combined tensor starting at element `index` (a view)."""
    if not isinstance(combined_tensor, torch.Tensor) or combined_tensor.dim() != 1:
        raise ValueError("get_part_combined_tensor: combined_tensor must be the 1-D tensor "
                         "npu_combine_tensors returned")
    index, size = int(index), int(size)
    if index < 0 or size < 0 or index + size > combined_tensor.numel():
        raise ValueError(f"get_part_combined_tensor: index {index} + size {size} exceeds the "
                         f"combined tensor's {combined_tensor.numel()} elements")
    return combined_tensor[index:index + size]


def is_combined_tensor_valid(combined_tensor, list_of_tensor):
    """True when every tensor of the list still lives inside combined_tensor's memory."""
    if not isinstance(combined_tensor, torch.Tensor) or combined_tensor.device.type != "npu":
        return False
    _check_list(list_of_tensor, "is_combined_tensor_valid")
    base = combined_tensor.data_ptr()
    end = base + combined_tensor.numel() * combined_tensor.element_size()
    for t in list_of_tensor:
        if t.dtype != combined_tensor.dtype:
            return False
        start = t.data_ptr()
        if start < base or start + t.numel() * t.element_size() > end:
            return False
    return True
