"""amp.scale_loss, amp.state_dict / load_state_dict, amp.master_params and the
register_*_function overrides.

scale_loss(loss, optimizers) yields loss.float() * scale. When the block exits (unless
delay_unscale), every gradient the backward produced is unscaled in place (a master weight's
gradient is the float32 copy of its half parameter's, unscaled, and the half gradient is
dropped); gradients present before the block (accumulation) were set aside on entry and are
added back unscaled, so gradients from losses scaled differently never mix. A dynamic scaler
then updates its scale and the optimizer's next step is skipped if an inf/nan was found.
"""

import contextlib
import functools
from collections import OrderedDict

import torch

from ._initialize import _cast
from ._state import amp_state


def _scaler(loss_id):
    if amp_state.properties is None:
        raise RuntimeError("amp.scale_loss needs amp.initialize(model, optimizer, opt_level=...) "
                           "to be called first")
    scalers = amp_state.loss_scalers
    if not isinstance(loss_id, int) or not 0 <= loss_id < len(scalers):
        raise ValueError(f"amp.scale_loss: loss_id={loss_id!r} is out of range: amp.initialize "
                         f"was given num_losses={len(scalers)}, so loss_id must be in "
                         f"[0, {len(scalers) - 1}]")
    return scalers[loss_id]


def _optimizer_list(optimizers):
    opts = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
    for opt in opts:
        if not hasattr(opt, "_amp_stash"):
            raise RuntimeError("amp.scale_loss: this optimizer was not passed to amp.initialize; "
                               "use the optimizer amp.initialize returned")
    return opts


@contextlib.contextmanager
def scale_loss(loss, optimizers, loss_id=0, model=None, delay_unscale=False,
               delay_overflow_check=False):
    """Yields the scaled loss; call backward() on it inside the block (apex's API)."""
    if amp_state.properties is not None and not amp_state.properties.enabled:
        yield loss
        return
    scaler = _scaler(loss_id)
    opts = _optimizer_list(optimizers)
    for opt in opts:
        stash = opt._amp_stash
        if not stash.grads_are_scaled:
            stash.stashed_grads = [p.grad for p in stash.plain_params]
            for p in stash.plain_params:
                p.grad = None
    yield loss.float() * scaler.scale_tensor
    if delay_unscale:
        for opt in opts:
            opt._amp_stash.grads_are_scaled = True
        return
    scaler.clear_overflow()
    for opt in opts:
        _unscale_into_step_grads(opt._amp_stash, scaler)
    for opt in opts:
        if scaler.dynamic:
            opt._amp_stash.pending_overflow.append(scaler.overflow_flag())
    scaler.update()


def _unscale_into_step_grads(stash, scaler):
    plain = [p for p in stash.plain_params if p.grad is not None]
    pairs = [(p, m) for p, m in zip(stash.model_params, stash.master_params) if p.grad is not None]
    master_grads = [p.grad.float() for p, _ in pairs]
    scaler.unscale_([p.grad for p in plain] + master_grads)
    for p, old in zip(stash.plain_params, stash.stashed_grads):
        if old is not None:
            p.grad = old if p.grad is None else p.grad.add_(old)
    for (p, master), g in zip(pairs, master_grads):
        master.grad = g if master.grad is None else master.grad.add_(g)
        p.grad = None
    stash.stashed_grads = []
    stash.grads_are_scaled = False


def master_params(optimizer):
    """The parameters the optimizer steps: the float32 masters under O2, else the model's."""
    for group in optimizer.param_groups:
        yield from group["params"]


def state_dict(destination=None):
    """{'loss_scaler0': {'loss_scale': float, 'unskipped': int}, ...} (apex's layout)."""
    if destination is None:
        destination = OrderedDict()
    for i, scaler in enumerate(amp_state.loss_scalers):
        destination[f"loss_scaler{i}"] = scaler.state_dict()
    return destination


def load_state_dict(state_dict):
    scalers = amp_state.loss_scalers
    if not scalers:
        raise RuntimeError("amp.load_state_dict needs amp.initialize to be called first")
    if len(state_dict) != len(scalers):
        raise ValueError(f"amp.load_state_dict: the state has {len(state_dict)} loss scalers "
                         f"but amp.initialize made {len(scalers)} (num_losses); initialize with "
                         f"the num_losses the checkpoint was saved with")
    for i, scaler in enumerate(scalers):
        key = f"loss_scaler{i}"
        if key not in state_dict:
            raise ValueError(f"amp.load_state_dict: {key!r} is missing; the keys are "
                             f"{list(state_dict)} (expected loss_scaler0..{len(scalers) - 1})")
        scaler.load_state_dict(state_dict[key])


# register_*_function: the named function runs in float16 / float32 / the widest input type
# whenever autocast is on for its inputs' device (so inside an O1 model's forward), with
# autocast off inside it. apex applies these under O1 only, where autocast is what O1 is.
_registered = {}


def _widest(tensors):
    order = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    dtypes = [t.dtype for t in tensors if t.dtype in order]
    return max(dtypes, key=order.index) if dtypes else None


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _register(module, name, kind):
    fn = getattr(module, name, None)
    if fn is None:
        raise ValueError(f"No function named {name} in module {module}.")
    original = _registered.get((id(module), name), (fn,))[0]

    @functools.wraps(original)
    def amp_function(*args, **kwargs):
        floats = [t for t in _tensors((args, kwargs)) if t.is_floating_point()]
        if not floats or not torch.is_autocast_enabled(floats[0].device.type):
            return original(*args, **kwargs)
        device_type = floats[0].device.type
        dtype = {"half": lambda: torch.get_autocast_dtype(device_type),
                 "float": lambda: torch.float32,
                 "promote": lambda: _widest(floats)}[kind]()
        with torch.autocast(device_type, enabled=False):
            return original(*_cast(args, dtype), **_cast(kwargs, dtype))

    _registered[(id(module), name)] = (original, kind)
    setattr(module, name, amp_function)


def register_half_function(module, function_name):
    _register(module, function_name, "half")


def register_float_function(module, function_name):
    _register(module, function_name, "float")


def register_promote_function(module, function_name):
    _register(module, function_name, "promote")
