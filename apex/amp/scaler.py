"""apex's loss scaler on GradScaler's kernels.

- The scale, the count of steps since the last overflow ("unskipped") and the overflow flag are
  0-dim tensors on the model's device, so scaling, unscaling and the dynamic update are queued
  kernels with no host synchronization (the step decides whether to skip; that reads the flag).
- unscale_ is aten::_amp_foreach_non_finite_check_and_unscale_ (one launch per dtype of the
  list): it multiplies every gradient by 1/scale and raises the flag on any inf or nan.
- update is aten::_amp_update_scale_: on overflow scale *= backoff and unskipped = 0, otherwise
  unskipped += 1 and after `window` clean steps scale *= growth; apex's min_loss_scale /
  max_loss_scale bounds are a clamp after it (apex takes max(min, scale/2) and
  min(max, scale*2), the same thing).
- A static scale (a number) never changes and never skips a step, as in apex.
"""

import torch


class LossScaler:
    def __init__(self, loss_scale, device, init_scale=2.0**16, growth_factor=2.0,
                 backoff_factor=0.5, window=2000, min_loss_scale=None, max_loss_scale=2.0**24):
        self.dynamic = loss_scale == "dynamic"
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.window = int(window)
        self.min_loss_scale = min_loss_scale
        self.max_loss_scale = max_loss_scale
        start = init_scale if self.dynamic else float(loss_scale)
        if self.dynamic and max_loss_scale is not None:
            start = min(start, max_loss_scale)
        self._scale = torch.full((), float(start), dtype=torch.float32, device=device)
        self._unskipped = torch.zeros((), dtype=torch.int32, device=device)
        self._found_inf = torch.zeros((), dtype=torch.float32, device=device)

    @property
    def scale_tensor(self):
        return self._scale

    def loss_scale(self):
        """The current scale as a Python float (reads the device)."""
        return float(self._scale.item())

    def clear_overflow(self):
        self._found_inf.zero_()

    def unscale_(self, grads):
        """Multiplies every tensor of `grads` by 1/scale in place and records any inf/nan."""
        inv_scale = self._scale.double().reciprocal().float()
        by_dtype = {}
        for g in grads:
            if g.is_sparse:
                raise NotImplementedError("apex.amp on SimNPU does not unscale sparse gradients; "
                                          "use dense gradients (sparse=False in nn.Embedding)")
            by_dtype.setdefault(g.dtype, []).append(g)
        for group in by_dtype.values():
            torch._amp_foreach_non_finite_check_and_unscale_(group, self._found_inf, inv_scale)

    def overflow_flag(self):
        """A copy of the overflow flag of the last unscale (a device tensor, 1.0 on overflow)."""
        return self._found_inf.clone()

    def update(self):
        if not self.dynamic:
            return
        torch._amp_update_scale_(self._scale, self._unskipped, self._found_inf,
                                 self.growth_factor, self.backoff_factor, self.window)
        if self.min_loss_scale is not None or self.max_loss_scale is not None:
            self._scale.clamp_(min=self.min_loss_scale, max=self.max_loss_scale)

    def state_dict(self):
        return {"loss_scale": self.loss_scale(), "unskipped": int(self._unskipped.item())}

    def load_state_dict(self, state):
        try:
            scale, unskipped = state["loss_scale"], state["unskipped"]
        except (KeyError, TypeError):
            raise ValueError("amp.load_state_dict: each loss scaler entry needs 'loss_scale' and "
                             "'unskipped' (the form amp.state_dict() returns)") from None
        self._scale.fill_(float(scale))
        self._unskipped.fill_(int(unskipped))
