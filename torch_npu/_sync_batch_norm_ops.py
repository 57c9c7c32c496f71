"""torch_npu's two SyncBatchNorm operators of its own, as ``torch_npu.<name>`` (also
``torch.ops.npu.<name>``): C++ kernels (adapter/ops/SyncBatchNorm.cpp), which also holds the
aten pieces SyncBatchNorm uses (batch_norm_stats, batch_norm_gather_stats_with_counts, ...).

- ``batch_norm_reduce(input, eps) -> (sum, square_sum)``: float32 per-channel sum(x) and
  sum(x * x) of an [N, C, *] input (eps is unused, as in torch_npu).
- ``batch_norm_gather_stats_update(input, sum, square_sum, running_mean, running_var, momentum,
  eps, counts) -> (mean, invstd)``: the global mean and 1 / sqrt(var + eps) from every rank's
  sums ([world_size, C]) and element counts; running_mean / running_var are updated in place
  (with the biased variance, as torch_npu does).
"""

import torch

__all__ = ["batch_norm_gather_stats_update", "batch_norm_reduce"]

batch_norm_reduce = torch.ops.npu.batch_norm_reduce
batch_norm_gather_stats_update = torch.ops.npu.batch_norm_gather_stats_update
