"""The optimization levels and the options that override them (apex's table).

  level  cast_model_type  patch_torch_functions  keep_batchnorm_fp32  master_weights  loss_scale
  O0     torch.float32    False                  None                 False           1.0
  O1     None             True                   None                 None            "dynamic"
  O2     torch.float16    False                  True                 True            "dynamic"
  O3     torch.float16    False                  False                False           1.0

patch_torch_functions (O1) is torch.autocast on the model's device around its forward; a cast
model (O2, O3) gets its floating inputs cast to cast_model_type and its outputs to float32.
"""

import torch

OPT_LEVELS = {
    "O0": dict(cast_model_type=torch.float32, patch_torch_functions=False,
               keep_batchnorm_fp32=None, master_weights=False, loss_scale=1.0),
    "O1": dict(cast_model_type=None, patch_torch_functions=True,
               keep_batchnorm_fp32=None, master_weights=None, loss_scale="dynamic"),
    "O2": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=True, master_weights=True, loss_scale="dynamic"),
    "O3": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=False, master_weights=False, loss_scale=1.0),
}

_CAST_TYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_cast_type(name, value):
    if value is not None and value not in _CAST_TYPES:
        raise ValueError(f"amp.initialize: {name}={value!r} is not supported; pass "
                         f"torch.float16, torch.bfloat16, torch.float32 or None")
    return value


def _check_keep_bn(value):
    # apex accepts the strings "True"/"False" too (they come from command lines).
    if value in (None, True, False):
        return value
    if value in ("True", "False"):
        return value == "True"
    raise ValueError(f"amp.initialize: keep_batchnorm_fp32={value!r} is not supported; pass "
                     f"True, False, 'True', 'False' or None")


def _check_loss_scale(value):
    if value == "dynamic":
        return value
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"amp.initialize: loss_scale={value!r} is not supported; pass "
                         f"'dynamic', a positive number, or a string of one such as '128.0'") \
            from None
    if not scale > 0 or scale == float("inf"):
        raise ValueError(f"amp.initialize: loss_scale={value!r} must be a finite number > 0 "
                         f"(or 'dynamic')")
    return scale


class Properties:
    """The options after the opt level's defaults and the user's overrides are merged."""

    def __init__(self, enabled, opt_level, overrides):
        if not isinstance(opt_level, str) or opt_level not in OPT_LEVELS:
            raise RuntimeError(
                f"Unexpected optimization level {opt_level!r}. Options are 'O0', 'O1', 'O2', "
                f"'O3'. Note that in 'O0', 'O1', etc., the prefix O is the letter O, not the "
                f"number zero.")
        self.enabled = bool(enabled)
        self.opt_level = opt_level
        opts = dict(OPT_LEVELS[opt_level])
        for name, value in overrides.items():
            if value is not None:
                opts[name] = value
        self.cast_model_type = _check_cast_type("cast_model_type", opts["cast_model_type"])
        self.patch_torch_functions = bool(opts["patch_torch_functions"])
        self.keep_batchnorm_fp32 = _check_keep_bn(opts["keep_batchnorm_fp32"])
        self.master_weights = bool(opts["master_weights"])
        self.loss_scale = _check_loss_scale(opts["loss_scale"])
        self.cast_model_outputs = _check_cast_type("cast_model_outputs",
                                                   overrides.get("cast_model_outputs"))

    @property
    def model_is_cast(self):
        return self.cast_model_type not in (None, torch.float32)

    def __repr__(self):
        keys = ("enabled", "opt_level", "cast_model_type", "patch_torch_functions",
                "keep_batchnorm_fp32", "master_weights", "loss_scale", "cast_model_outputs")
        return "Properties(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in keys) + ")"
