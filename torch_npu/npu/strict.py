"""Strict card mode: SimNPU does with each (op, dtype) what a real 910B under torch_npu does.

    NPU_SIM_STRICT=1 python train.py            # from the start (0 or 1; read once)
    torch_npu.npu.set_strict_mode(True)         # or switch at any time
    torch_npu.npu.strict_mode()                 # -> bool

In strict mode an op the card does not support on a dtype (float64 or integer matmul and
convolution, ...) raises torch_npu's RuntimeError, and an op torch_npu has no NPU kernel for
runs through the CPU fallback with torch_npu's warning, once per op. The default, permissive
mode runs everything as before and warns once per op what the card would do.
docs/strict_mode.md has the details.

The facts come from torch_npu/data/card_910B.toml (torch_npu.utils.card_support). At import,
_init() reads NPU_SIM_STRICT, and install_card_rules() hands the adapter's card check
(adapter/ops/CardCheck.h) a rule for each row that is not native on every dtype, with the names
of the ops that reach the row in SimNPU's dispatcher. Only those ops pay for a check; every
other op costs a null pointer test.
install_card_rules() may be called again (tests do, to re-arm the once-per-op warnings).
"""

from __future__ import annotations

import torch

__all__ = ["set_strict_mode", "strict_mode"]

TARGET = "910B"

# SimNPU ops that stand where torch_npu has an op of another name: the key reaches the row of the
# value. (The data file's `equivalent` field goes the other way: rows named after SimNPU's ops.)
SIMNPU_EQUIVALENTS = {
    # aten::convolution (CompositeExplicitAutograd) sends every backend but CPU, CUDA and MKLDNN
    # to convolution_overrideable; op-plugin registers aten::convolution itself.
    "convolution_overrideable": "convolution",
    "convolution_backward_overrideable": "convolution_backward",
}

# Kinds that make the check act (refuse or fall back; warn in permissive mode).
_ACTING_KINDS = ("unsupported", "cpu_fallback")


def set_strict_mode(strict: bool) -> None:
    """Turns strict card mode on or off for the ops called after it (NPU_SIM_STRICT sets the
    start value)."""
    if not isinstance(strict, bool):
        raise TypeError(f"set_strict_mode expects a bool, got {type(strict).__name__}")
    from torch_npu import _C

    _C._npu_setStrictMode(strict)


def strict_mode() -> bool:
    """Whether strict card mode is on."""
    from torch_npu import _C

    return _C._npu_strictMode()


def _all_dtypes() -> list[torch.dtype]:
    seen = {}
    for value in vars(torch).values():
        if isinstance(value, torch.dtype):
            seen[str(value)] = value
    return list(seen.values())


def row_for(card, op: str) -> dict | None:
    """The data row that decides SimNPU's op `op` ("mm.out", "aten::addmm_"): its own row
    (overload, then packet), the row of its SimNPU equivalent, or, for an in-place variant
    "x_" without a row of its own, the row of "x" (the same kernel on the card)."""
    from torch_npu.utils.card_support import packet_name

    r = card.row(op)
    if r is not None:
        return r
    packet = packet_name(op)
    if packet in SIMNPU_EQUIVALENTS:
        return card.row(SIMNPU_EQUIVALENTS[packet])
    if packet.endswith("_") and not packet.startswith("_"):
        return card.row(packet[:-1])
    return None


def _acts(card, row: dict, dtypes: list[torch.dtype]) -> bool:
    return any(card.kind(row["name"], d) in _ACTING_KINDS for d in dtypes) or (
        row["kind"] in _ACTING_KINDS)


def _on_card(card, row: dict, kind: str, dtype: torch.dtype | None) -> str:
    """What the card does, in a sentence (the permissive warning's middle)."""
    target = card.target
    if kind == "cpu_fallback":
        return (f"torch_npu has no NPU kernel for it on the {target}, so it runs on the host CPU "
                "(its tensors copied there and back), with torch_npu's CPU-fallback warning.")
    name = str(dtype).removeprefix("torch.")
    kernel = row.get("aclnn", "its NPU kernel")
    takes = ", ".join(d for d in row["dtypes"] if d != "*")
    return (f"the {target} does not support it: {kernel} does not take {name} (it takes {takes}), "
            "so torch_npu raises RuntimeError.")


def card_rules(card) -> list[tuple]:
    """The rules the adapter's card check takes (_C._npu_installCardRules): for each acting row,
    (row, kind of a call without a tensor, {dtype: kind}, {dtype: refusal},
    {dtype: what the card does}, what the card does without a tensor, [ops that reach it])."""
    from torch_npu.utils.card_support import UNKNOWN

    dtypes = _all_dtypes()
    rows = {r["name"]: r for r in card.data["op"] if _acts(card, r, dtypes)}
    ops: dict[str, list[str]] = {name: [] for name in rows}
    for full in torch._C._dispatch_get_all_op_names():
        namespace, _, op = full.partition("::")
        if namespace not in ("aten", "npu"):
            continue
        r = row_for(card, op)
        if r is not None and r["name"] in rows:
            ops[r["name"]].append(op)
    rules = []
    for name, row in rows.items():
        kinds, refusals, on_card = {}, {}, {}
        for d in dtypes:
            kind = card.kind(name, d)
            kinds[d] = kind
            if kind == "unsupported":
                refusals[d] = card.unsupported_message(name, d)
            if kind in _ACTING_KINDS:
                on_card[d] = _on_card(card, row, kind, d)
        # A call without a tensor argument is judged by the row's own kind.
        no_tensor = row["kind"] if row["kind"] != "unsupported" else UNKNOWN
        without = _on_card(card, row, no_tensor, None) if no_tensor in _ACTING_KINDS else ""
        rules.append((name, no_tensor, kinds, refusals, on_card, without, sorted(ops[name])))
    return rules


def install_card_rules(target: str = TARGET) -> None:
    """Installs the card check's rules for `target` (a fresh table: the once-per-op warnings are
    given again). The mode is left as it is."""
    from torch_npu import _C
    from torch_npu.utils import card_support

    card = card_support.load(target)
    names = {d: str(d).removeprefix("torch.") for d in _all_dtypes()}
    _C._npu_installCardRules(card.target, names, card_rules(card))


def _init() -> None:
    """`import torch_npu`: the mode from NPU_SIM_STRICT (ValueError for a value other than 0 or
    1), then the rules."""
    from torch_npu import _C

    _C._npu_strictModeFromEnvironment()
    install_card_rules()
