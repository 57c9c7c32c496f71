"""amp.initialize: casts the models, patches their forward, and gives each optimizer float32
master weights where the model is half (O2), then builds the loss scalers.

How each level is realised:
- O1: the model's forward runs under torch.autocast(<its device>, float16), so its ops follow
  the npu autocast lists (adapter/Autocast.cpp), and its floating outputs come back as float32.
  apex O1 patches every torch function for the whole script, so a loss computed after the
  forward runs in float32 there; returning float32 outputs gives the loss the same precision
  without leaving autocast on outside the forward (where its weight-cast cache would go stale
  across optimizer steps).
- O2 / O3: parameters and buffers become cast_model_type (batch norms stay float32 when
  keep_batchnorm_fp32; their forward computes in float32 and returns the input's dtype);
  floating inputs are cast to cast_model_type, floating outputs to float32.
- master weights (O2): each half parameter in an optimizer is replaced by a float32 copy; the
  optimizer steps the copies and the patched step copies them back into the model. A
  model.load_state_dict after amp.initialize (resuming from a checkpoint) refreshes the masters
  of the parameters it loads, from the checkpoint's values (full float32 precision when the
  checkpoint has it), so the next step starts from the loaded weights and not from stale masters
  that would overwrite them.
- state_dict of a cast model (O2, O3): as apex, every module gets a state_dict hook that turns
  the half entries (parameters and buffers) into float32 copies, so a checkpoint saved from an
  amp model is float32 and loads into a float32 model as well as into an amp one. The values are
  the model's (half values widened exactly), not the masters'. apex converts float16 only (it
  predates bfloat16 models); here bfloat16 entries of a bfloat16 cast model become float32 too,
  for the same reason.
"""

import torch

from ._properties import Properties
from ._state import amp_state
from .scaler import LossScaler


def _cast(value, dtype):
    """`value` with every floating tensor in it (through lists, tuples, dicts) cast to dtype."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, dict):
        items = {k: _cast(v, dtype) for k, v in value.items()}
        if type(value) is dict:
            return items
        try:  # OrderedDict, Hugging Face's ModelOutput: keep the type, built from keywords
            return type(value)(**items)
        except TypeError:
            return items
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_cast(v, dtype) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _model_device_type(models):
    types = {p.device.type for m in models for p in m.parameters()}
    if len(types) > 1:
        raise RuntimeError(f"amp.initialize: the models' parameters are on several device types "
                           f"({sorted(types)}); move every model to one device (model.npu()) "
                           f"before amp.initialize")
    return types.pop() if types else "npu"


def _cast_model(model, dtype, keep_batchnorm_fp32):
    bn = torch.nn.modules.batchnorm._BatchNorm
    for module in model.modules():
        if keep_batchnorm_fp32 and isinstance(module, bn):
            _run_batchnorm_in_float32(module)
            continue
        # .data keeps each Parameter object, so optimizers built on the model still hold them.
        for p in module.parameters(recurse=False):
            if p.is_floating_point():
                p.data = p.data.to(dtype)
        for name, b in module.named_buffers(recurse=False):
            if b is not None and b.is_floating_point():
                module._buffers[name] = b.to(dtype)


class O2StateDictHook:
    """A module's state_dict hook: its half entries become float32 copies (see the module
    docstring). The class name is apex's: torch.onnx looks hooks of this name up to take them off
    while it exports a model."""

    def __call__(self, module, state_dict, prefix, local_metadata):
        for key, value in state_dict.items():
            if (key.startswith(prefix) and isinstance(value, torch.Tensor)
                    and value.dtype in (torch.float16, torch.bfloat16)):
                state_dict[key] = value.to(torch.float32)


def _hook_float32_state_dict(model):
    hook = O2StateDictHook()
    for module in model.modules():
        module._register_state_dict_hook(hook)


def _run_batchnorm_in_float32(module):
    forward = module.forward

    def forward_in_float32(x, *args, **kwargs):
        return forward(x.float(), *args, **kwargs).to(x.dtype)

    module.forward = forward_in_float32


def _patch_forward(model, input_dtype, output_dtype, autocast_device):
    forward = model.forward

    def amp_forward(*args, **kwargs):
        if input_dtype is not None:
            args, kwargs = _cast(args, input_dtype), _cast(kwargs, input_dtype)
        if autocast_device is not None:
            with torch.autocast(autocast_device, dtype=torch.float16):
                out = forward(*args, **kwargs)
        else:
            out = forward(*args, **kwargs)
        return _cast(out, output_dtype) if output_dtype is not None else out

    model.forward = amp_forward


class _OptimizerStash:
    """What amp keeps per optimizer: the model's half parameters and their float32 masters,
    the parameters stepped directly, gradients stashed across a scale_loss, pending overflow
    flags."""

    def __init__(self):
        self.model_params = []  # half parameters of the model that have a master
        self.master_params = []  # their float32 masters (in the optimizer's param_groups)
        self.plain_params = []  # stepped as they are (float32, or half without masters)
        self.stashed_grads = []  # plain params' grads from before the current scale_loss
        self.grads_are_scaled = False  # a delay_unscale exit left scaled gradients behind
        self.pending_overflow = []  # overflow flags (device tensors) the next step checks


def _check_optimizer(optimizer):
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"amp.initialize: optimizers must be torch.optim.Optimizer objects (or a "
                        f"list of them), got {type(optimizer).__name__}")
    if hasattr(optimizer, "_amp_stash"):
        raise RuntimeError("amp.initialize: this optimizer was already passed to amp.initialize; "
                           "call amp.initialize once, with every model and optimizer")
    if len(optimizer.state) > 0:
        raise RuntimeError("amp.initialize: the optimizer has already stepped (it has state); "
                           "call amp.initialize before the first optimizer.step()")


def _process_optimizer(optimizer, properties):
    stash = _OptimizerStash()
    for group in optimizer.param_groups:
        for i, p in enumerate(group["params"]):
            if properties.master_weights and p.dtype in (torch.float16, torch.bfloat16):
                master = p.detach().clone().float().requires_grad_(p.requires_grad)
                group["params"][i] = master
                stash.model_params.append(p)
                stash.master_params.append(master)
            else:
                stash.plain_params.append(p)
    optimizer._amp_stash = stash

    step = optimizer.step
    zero_grad = optimizer.zero_grad

    def amp_step(closure=None):
        if closure is not None:
            raise RuntimeError("apex.amp does not support closures with optimizer.step(); "
                               "compute the loss and call step() without one")
        flags, stash.pending_overflow = stash.pending_overflow, []
        if flags and bool(torch.stack(flags).sum().item()):
            from ._state import maybe_print
            scales = ", ".join(f"{s.loss_scale():g}" for s in amp_state.loss_scalers)
            maybe_print(f"Gradient overflow.  Skipping step, loss scale reduced to {scales}")
            return None
        result = step()
        if stash.master_params:
            with torch.no_grad():
                torch._foreach_copy_(stash.model_params, stash.master_params)
        return result

    def amp_zero_grad(set_to_none=True):
        zero_grad(set_to_none=set_to_none)
        for p in stash.model_params:
            p.grad = None

    optimizer.step = amp_step
    optimizer.zero_grad = amp_zero_grad


def _refresh_masters_on_load(models, optimizers):
    """Hooks every module that owns parameters with float32 masters: a load_state_dict on it (or
    on a module above it) copies each loaded value into the parameter's master. The hooks work by
    parameter name, so load_state_dict(assign=True), which puts new Parameter objects in the
    module, also rebinds the master to the new parameter (cast to the model's half dtype)."""
    owner = {}  # id(model parameter) -> (stash, index in stash.model_params)
    for optimizer in optimizers:
        stash = optimizer._amp_stash
        for i, p in enumerate(stash.model_params):
            owner[id(p)] = (stash, i)
    if not owner:
        return
    for model in models:
        for module in model.modules():
            entries = [(name, *owner[id(p)]) for name, p in module.named_parameters(recurse=False)
                       if id(p) in owner]
            if entries:
                _hook_master_refresh(module, entries)


def _hook_master_refresh(module, entries):
    loaded = {}  # parameter name -> the value load_state_dict is about to copy in

    def before_load(module, state_dict, prefix, *args):
        loaded.clear()
        for name, _, _ in entries:
            if prefix + name in state_dict:
                loaded[name] = state_dict[prefix + name]

    def after_load(module, incompatible_keys):
        with torch.no_grad():
            for name, stash, i in entries:
                if name not in loaded:
                    continue  # not in this checkpoint: the parameter and its master are unchanged
                value = loaded.pop(name)
                p, old = module._parameters[name], stash.model_params[i]
                master = stash.master_params[i]
                if p is not old:  # assign=True: the module holds a new Parameter
                    if p.dtype != old.dtype:
                        p.data = p.data.to(old.dtype)
                    stash.model_params[i] = p
                # A value of the wrong shape was refused (load_state_dict raises after the hooks).
                if isinstance(value, torch.Tensor) and value.shape == master.shape:
                    master.copy_(value)
        loaded.clear()

    module.register_load_state_dict_pre_hook(before_load)
    module.register_load_state_dict_post_hook(after_load)


def initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
               patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None,
               loss_scale=None, cast_model_outputs=None, num_losses=1, verbosity=1,
               dynamic_init_scale=2.0**16, scale_growth_factor=2.0, scale_backoff_factor=0.5,
               scale_window=2000, min_loss_scale=None, max_loss_scale=2.0**24, combine_grad=None,
               combine_ddp=None, ddp_replica_count=4, user_cast_preferred=None,
               check_combined_tensors=None):
    """Prepares models and optimizers for mixed precision at `opt_level` (see the module
    docstring). Returns (models, optimizers) in the form they were passed (one object or a
    list), or only the models when optimizers is None.

    combine_grad is accepted and changes nothing: the unscale of every gradient is already one
    kernel launch per dtype (Ascend's apex fuses the gradients into one buffer for that)."""
    if combine_ddp:
        raise NotImplementedError(
            "amp.initialize(combine_ddp=True) is not implemented in SimNPU's apex; wrap the model "
            "in torch.nn.parallel.DistributedDataParallel, whose buckets already fuse the "
            "gradient all-reduce")
    if not isinstance(num_losses, int) or num_losses < 1:
        raise ValueError(f"amp.initialize: num_losses={num_losses!r} must be an int >= 1")
    if not dynamic_init_scale > 0:
        raise ValueError(f"amp.initialize: dynamic_init_scale={dynamic_init_scale!r} must be > 0")
    if not scale_growth_factor > 1.0:
        raise ValueError(f"amp.initialize: scale_growth_factor={scale_growth_factor!r} must be "
                         f"> 1")
    if not 0.0 < scale_backoff_factor < 1.0:
        raise ValueError(f"amp.initialize: scale_backoff_factor={scale_backoff_factor!r} must be "
                         f"in (0, 1)")
    if not isinstance(scale_window, int) or scale_window < 1:
        raise ValueError(f"amp.initialize: scale_window={scale_window!r} must be an int >= 1")
    if (min_loss_scale is not None and max_loss_scale is not None
            and min_loss_scale > max_loss_scale):
        raise ValueError(f"amp.initialize: min_loss_scale={min_loss_scale!r} is above "
                         f"max_loss_scale={max_loss_scale!r}")
    properties = Properties(enabled, opt_level, dict(
        cast_model_type=cast_model_type, patch_torch_functions=patch_torch_functions,
        keep_batchnorm_fp32=keep_batchnorm_fp32, master_weights=master_weights,
        loss_scale=loss_scale, cast_model_outputs=cast_model_outputs))

    models_were_list = isinstance(models, (list, tuple))
    model_list = list(models) if models_were_list else [models]
    for m in model_list:
        if not isinstance(m, torch.nn.Module):
            raise TypeError(f"amp.initialize: models must be torch.nn.Module objects (or a list "
                            f"of them), got {type(m).__name__}")
    optimizers_were_list = isinstance(optimizers, (list, tuple))
    optimizer_list = [] if optimizers is None else (
        list(optimizers) if optimizers_were_list else [optimizers])

    for optimizer in optimizer_list:
        _check_optimizer(optimizer)

    amp_state.properties = properties
    amp_state.verbosity = verbosity
    amp_state.loss_scalers = []
    if not properties.enabled:
        return models if optimizers is None else (models, optimizers)

    device_type = _model_device_type(model_list)
    for model in model_list:
        if properties.cast_model_type is not None:
            _cast_model(model, properties.cast_model_type,
                        properties.model_is_cast and properties.keep_batchnorm_fp32)
            if properties.model_is_cast:
                _hook_float32_state_dict(model)
        cast_inputs = properties.model_is_cast
        if cast_inputs or properties.patch_torch_functions:
            _patch_forward(model,
                           properties.cast_model_type if cast_inputs else None,
                           properties.cast_model_outputs or torch.float32,
                           device_type if properties.patch_torch_functions else None)
    for optimizer in optimizer_list:
        _process_optimizer(optimizer, properties)
    _refresh_masters_on_load(model_list, optimizer_list)

    device = next((p.device for m in model_list for p in m.parameters()), torch.device("npu"))
    amp_state.loss_scalers = [
        LossScaler(properties.loss_scale, device, init_scale=dynamic_init_scale,
                   growth_factor=scale_growth_factor, backoff_factor=scale_backoff_factor,
                   window=scale_window, min_loss_scale=min_loss_scale,
                   max_loss_scale=max_loss_scale)
        for _ in range(num_losses)]
    if verbosity > 0:
        print(f"Selected optimization level {properties.opt_level}; {properties}")

    if optimizers is None:
        return models if models_were_list else model_list[0]
    return (model_list if models_were_list else model_list[0],
            optimizer_list if optimizers_were_list else optimizer_list[0])
