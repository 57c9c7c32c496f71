"""One cheap call for each row of torch_npu/data/card_910B.toml that strict card mode acts on
(a dtype the card refuses, or no NPU kernel: the CPU fallback), and the runner that makes each
call in a fresh process (test_strict_mode.py starts it once per mode).

To cover a new row: add `"row": (dtype, call)` to CALLS, where call(device, dtype) makes the
op's call on that device and returns its tensors; or, when no call can be made, add the row to
NO_CALL with the reason. test_strict_mode.py fails for an acting row that is in neither.

    python tests/python/card_invocations.py strict|permissive   # prints one JSON object
(test_strict_mode.py runs it from the repository root, so that it tests this tree's torch_npu.)
"""

from __future__ import annotations

import json
import sys
import warnings

import torch
import torch.nn.functional as F

# Strict mode's refusals and warnings are judged on the first tensor argument's dtype.
REFUSED = torch.float64


def _t(data, device, dtype):
    return torch.tensor(data, dtype=dtype).to(device)


def _randn(*shape, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(device)


def _spd(device, dtype):
    a = _randn(4, 4, device="cpu", dtype=torch.float64)
    return (a @ a.T + 4 * torch.eye(4, dtype=torch.float64)).to(dtype).to(device)


def _conv_backward(device, dtype):
    # The forward runs with strict mode off, so that the backward is what meets the check.
    import torch_npu

    x = _randn(1, 2, 5, 5, device=device, dtype=dtype).requires_grad_()
    w = _randn(3, 2, 3, 3, device=device, dtype=dtype, seed=1).requires_grad_()
    strict = device != "cpu" and torch_npu.npu.strict_mode()
    if strict:
        torch_npu.npu.set_strict_mode(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = F.conv2d(x, w)
    if strict:
        torch_npu.npu.set_strict_mode(True)
    y.sum().backward()
    return x.grad, w.grad


def _fused_adam(device, dtype):
    params = [_randn(3, device=device, dtype=dtype)]
    grads = [_randn(3, device=device, dtype=dtype, seed=1)]
    exp_avgs = [torch.zeros(3, dtype=dtype, device=device)]
    exp_avg_sqs = [torch.zeros(3, dtype=dtype, device=device)]
    steps = [torch.ones((), dtype=torch.float32, device=device)]
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=0.1, beta1=0.9,
                       beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    return params + exp_avgs + exp_avg_sqs


aten = torch.ops.aten

# row -> (dtype of the call, call(device, dtype) -> tensor or tuple of tensors)
CALLS = {
    # float64 on the cube: refused by the aclnn kernels (other_dtypes = "unsupported")
    "mm": (REFUSED, lambda d, t: torch.mm(_randn(2, 3, device=d, dtype=t),
                                          _randn(3, 2, device=d, dtype=t, seed=1))),
    "addmm": (REFUSED, lambda d, t: torch.addmm(_randn(2, 2, device=d, dtype=t),
                                                _randn(2, 3, device=d, dtype=t, seed=1),
                                                _randn(3, 2, device=d, dtype=t, seed=2))),
    "bmm": (REFUSED, lambda d, t: torch.bmm(_randn(2, 2, 3, device=d, dtype=t),
                                            _randn(2, 3, 2, device=d, dtype=t, seed=1))),
    "convolution": (REFUSED, lambda d, t: F.conv2d(_randn(1, 2, 5, 5, device=d, dtype=t),
                                                   _randn(3, 2, 3, 3, device=d, dtype=t, seed=1))),
    "convolution_backward": (REFUSED, _conv_backward),
    # aten::_convolution decomposes into convolution_overrideable here: the convolution row's
    # refusal (test_strict_mode.py, REACHED_AS)
    "_convolution": (REFUSED, lambda d, t: aten._convolution(
        _randn(1, 2, 5, 5, device=d, dtype=t), _randn(3, 2, 3, 3, device=d, dtype=t, seed=1),
        None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, False, False, True, True)),
    "_conv_depthwise2d": (REFUSED, lambda d, t: aten._conv_depthwise2d(
        _randn(1, 2, 5, 5, device=d, dtype=t), _randn(2, 1, 3, 3, device=d, dtype=t, seed=1),
        [3, 3], None, [1, 1], [0, 0], [1, 1])),
    # no NPU kernel on the card: torch_npu's CPU fallback
    "_fused_adam_": (torch.float32, _fused_adam),
    "_linalg_det": (torch.float32, lambda d, t: aten._linalg_det(_spd(d, t))),
    "_linalg_eigh": (torch.float32, lambda d, t: aten._linalg_eigh(_spd(d, t))[0]),
    "_linalg_solve_ex": (torch.float32, lambda d, t: aten._linalg_solve_ex(
        _spd(d, t), _randn(4, 2, device=d, dtype=t))[:2]),
    "_scaled_dot_product_flash_attention": (torch.float32, lambda d, t: (
        aten._scaled_dot_product_flash_attention(
            _randn(1, 2, 4, 8, device=d, dtype=t), _randn(1, 2, 4, 8, device=d, dtype=t, seed=1),
            _randn(1, 2, 4, 8, device=d, dtype=t, seed=2))[0])),
    "_standard_gamma": (torch.float32, lambda d, t: torch._standard_gamma(
        _t([0.5, 1.0, 2.0, 3.0], d, t))),
    "batch_norm_update_stats": (torch.float32, lambda d, t: aten.batch_norm_update_stats(
        _randn(4, 3, device=d, dtype=t), torch.zeros(3, dtype=t, device=d),
        torch.ones(3, dtype=t, device=d), 0.1)),
    "binomial": (torch.float32, lambda d, t: torch.binomial(
        _t([5.0, 10.0, 20.0], d, t), _t([0.5, 0.2, 0.9], d, t))),
    "geqrf": (torch.float32, lambda d, t: torch.geqrf(_spd(d, t))),
    "linalg_cholesky_ex": (torch.float32, lambda d, t: torch.linalg.cholesky_ex(_spd(d, t))[0]),
    "linalg_inv_ex": (torch.float32, lambda d, t: torch.linalg.inv_ex(_spd(d, t))[0]),
    "linalg_lu_factor_ex": (torch.float32, lambda d, t: torch.linalg.lu_factor_ex(_spd(d, t))[:2]),
    "mode": (torch.float32, lambda d, t: torch.mode(_t([[3.0, 1.0, 3.0, 2.0],
                                                        [5.0, 5.0, 4.0, 6.0]], d, t), 1)),
    "poisson": (torch.float32, lambda d, t: torch.poisson(_t([0.5, 2.0, 10.0], d, t))),
}

# Rows that act but cannot be called: row -> why. (None at present.)
NO_CALL: dict[str, str] = {}

# Random ops: compared across the two modes (the same npu seed), not with the CPU's generator.
RANDOM_ROWS = {"_standard_gamma", "binomial", "poisson"}


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for x in out for t in _tensors(x)] if isinstance(out, (tuple, list)) else []


def _card_warnings(caught) -> list[str]:
    """The card check's warnings that reached Python's warnings (those of calls made through
    torch.ops go to stderr instead: PyTorch's warning handler for them; the test reads both)."""
    return [str(w.message) for w in caught if "strict card mode" in str(w.message)]


def run(mode: str) -> dict:
    """Each row's call on npu, twice, in `mode`; its CPU result; what it raised and warned."""
    import torch_npu
    from torch_npu.npu import strict

    torch_npu.npu.set_strict_mode(mode == "strict")
    results = {}
    for row, (dtype, call) in CALLS.items():
        strict.install_card_rules()  # a fresh table: each row's once-per-op warning re-armed
        print(f"@@row {row}", file=sys.stderr, flush=True)
        rec = {"dtype": str(dtype).removeprefix("torch."), "error": None, "error_type": None}
        fallback_before = dict(torch_npu._C._fallback_ops())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.npu.manual_seed(0)
            try:
                out = [t.cpu() for t in _tensors(call("npu", dtype))]
                call("npu", dtype)
                torch.npu.synchronize()
            except Exception as e:  # noqa: BLE001  (the test judges the type)
                out = None
                rec["error"], rec["error_type"] = str(e), type(e).__name__
        sys.stderr.flush()
        rec["card_warnings"] = _card_warnings(caught)
        after = torch_npu._C._fallback_ops()
        rec["fallback_calls"] = {op: n - fallback_before.get(op, 0) for op, n in after.items()
                                 if n != fallback_before.get(op, 0)}
        if out is not None:
            rec["values"] = [t.double().flatten().tolist() for t in out]
            if row not in RANDOM_ROWS:
                try:
                    ref = [t.double().flatten() for t in _tensors(call("cpu", dtype))]
                    rec["max_error"] = max(
                        (float((torch.tensor(v, dtype=torch.float64) - r).abs().max())
                         for v, r in zip(rec["values"], ref) if r.numel()), default=0.0)
                    rec["cpu_shapes_match"] = [len(v) for v in rec["values"]] == [
                        r.numel() for r in ref]
                except Exception as e:  # noqa: BLE001
                    rec["cpu_error"] = f"{type(e).__name__}: {e}"
        results[row] = rec
    return results


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])))
