"""DTensor sharding rules for torch_npu's fused operators, so that a tensor-parallel model
(torch.distributed.tensor.parallel) can call them on DTensors: npu_rms_norm under
SequenceParallel is the common case (the norm's input is a sequence-sharded DTensor and its
weight a replicated one).

- npu_rms_norm(x, gamma): x sharded on any dim that is not normalized (gamma's dims are the last
  ones) -> y and rstd sharded the same; gamma replicated.
- npu_rms_norm_backward(dy, x, gamma, rstd): dx sharded as x; dgamma is a sum over the sharded
  dim, so Partial (DTensor reduces it where the replicated weight's gradient is needed).
- npu_swiglu(x, dim) and its backward: x sharded on any dim but `dim`.
- npu_rotary_mul(x, r1, r2) and its backward: x sharded on any dim where r1 / r2 are broadcast
  (size 1: the head dim under tensor parallelism); r1 / r2 replicated, their gradients Partial.
Everything replicated is always allowed.

torch.distributed.tensor costs about 0.6 s to import, so the rules are registered when a
program imports it (an import hook), not when torch_npu is imported.
"""
import importlib.abc
import importlib.util
import sys


def _register() -> None:
    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    npu = torch.ops.npu

    def norm_dims(x, gamma):
        return x.ndim - gamma.ndim

    @register_sharding(npu.npu_rms_norm.default)
    def _rms_norm(x, gamma, epsilon=1e-6):
        out = [([Replicate(), Replicate()], [Replicate(), Replicate(), None])]
        for d in range(norm_dims(x, gamma)):
            out.append(([Shard(d), Shard(d)], [Shard(d), Replicate(), None]))
        return out

    @register_sharding(npu.npu_rms_norm_backward.default)
    def _rms_norm_backward(dy, x, gamma, rstd):
        out = [([Replicate(), Replicate()], [Replicate()] * 4)]
        for d in range(norm_dims(x, gamma)):
            out.append(([Shard(d), Partial()], [Shard(d), Shard(d), Replicate(), Shard(d)]))
        return out

    def _swiglu_rules(ndim, dim, n_inputs):
        dim = dim % ndim
        out = [([Replicate()], [Replicate()] * n_inputs + [None])]
        for d in range(ndim):
            if d != dim:
                out.append(([Shard(d)], [Shard(d)] * n_inputs + [None]))
        return out

    @register_sharding(npu.npu_swiglu.default)
    def _swiglu(x, dim=-1):
        return _swiglu_rules(x.ndim, dim, 1)

    @register_sharding(npu.npu_swiglu_backward.default)
    def _swiglu_backward(grad, x, dim=-1):
        return _swiglu_rules(x.ndim, dim, 2)

    def _broadcast_dims(x, r):
        lead = x.ndim - r.ndim
        return [d for d in range(x.ndim) if d < lead or r.shape[d - lead] == 1]

    @register_sharding(npu.npu_rotary_mul.default)
    def _rotary_mul(x, r1, r2, rotary_mode="half"):
        out = [([Replicate()], [Replicate()] * 3 + [None])]
        for d in set(_broadcast_dims(x, r1)) & set(_broadcast_dims(x, r2)):
            out.append(([Shard(d)], [Shard(d), Replicate(), Replicate(), None]))
        return out

    @register_sharding(npu.npu_rotary_mul_backward.default)
    def _rotary_mul_backward(grad, x, r1, r2, rotary_mode="half"):
        out = [([Replicate()] * 3, [Replicate()] * 4 + [None])]
        for d in set(_broadcast_dims(x, r1)) & set(_broadcast_dims(x, r2)):
            out.append(([Shard(d), Partial(), Partial()],
                        [Shard(d), Shard(d), Replicate(), Replicate(), None]))
        return out


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `_register` right after torch.distributed.tensor is imported."""

    NAME = "torch.distributed.tensor"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.NAME:
            return None
        sys.meta_path.remove(self)  # once; the real module is found by the other finders
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register()


def install() -> None:
    if "torch.distributed.tensor" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
