"""What a real card does with an operator: the support profiles in torch_npu/data/card_<T>.toml.

    from torch_npu.utils import card_support
    card = card_support.load("910B")
    card.kind("aten::mm.default", torch.float64)      # -> "unsupported"
    card.kind("mm", "bfloat16")                       # -> "native"
    card.row("mm")["sources"]                         # where the fact comes from
    card.unsupported_message("mm", torch.float64)     # torch_npu's error text, filled in

Kinds of a row (see docs/card_support.md):
  native        an NPU kernel (AI Core), or a view / decomposition needing none
  aicpu         an NPU kernel that runs on the AI CPU (slow)
  cpu_fallback  no NPU kernel: torch_npu's boxed fallback runs it on the host CPU
  unsupported   the card raises
and, from lookups only, "unknown": not in the data file, or a dtype the sources do not cover.

Strict card mode and the readiness report (torch_npu.utils.op_report --target) read this API.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import tomllib

KINDS = ("native", "aicpu", "cpu_fallback", "unsupported")
UNKNOWN = "unknown"
ANY_DTYPE = "*"


def dtype_name(dtype) -> str:
    """torch.float32 / "torch.float32" / "float32" -> "float32"."""
    return str(dtype).removeprefix("torch.")


def packet_name(op: str) -> str:
    """"aten::add.Tensor" / "add.Tensor" / "aten::mm.default" -> "add" / "add" / "mm"."""
    return op.removeprefix("aten::").removeprefix("npu::").split(".")[0]


def overload_name(op: str) -> str:
    """"aten::add.Tensor" -> "add.Tensor"; "aten::mm.default" / "aten::mm" -> "mm"."""
    name = op.removeprefix("aten::").removeprefix("npu::")
    return name.removesuffix(".default")


class CardProfile:
    """One target's rows, indexed by op name (an overload name first, then its packet)."""

    def __init__(self, data: dict):
        self.data = data
        self.target: str = data["target"]
        self.rows: dict[str, dict] = {r["name"]: r for r in data["op"]}
        self.sources: dict[str, dict] = data.get("sources", {})
        self.messages: dict[str, dict] = data.get("messages", {})
        self.hf32: dict[str, dict] = data.get("hf32", {})

    def row(self, op: str) -> dict | None:
        """The data row for an op ("aten::add.Tensor", "add.Tensor" or "add"), or None."""
        return self.rows.get(overload_name(op)) or self.rows.get(packet_name(op))

    def kind(self, op: str, dtype=None) -> str:
        """What the card does with `op` on `dtype`: one of KINDS, or "unknown".

        A row's `dtype_kinds` overrides per dtype; a dtype in `dtypes` (or "*") gets the row's
        kind; any other dtype gets the row's `other_dtypes` ("unsupported" when a kernel-level
        source lists every dtype, else "unknown")."""
        r = self.row(op)
        if r is None:
            return UNKNOWN
        if dtype is None:
            return r["kind"]
        d = dtype_name(dtype)
        if d in r.get("dtype_kinds", {}):
            return r["dtype_kinds"][d]
        if ANY_DTYPE in r["dtypes"] or d in r["dtypes"]:
            return r["kind"]
        return r.get("other_dtypes", UNKNOWN)

    def synchronizes(self, op: str) -> bool:
        r = self.row(op)
        return bool(r and r.get("sync"))

    def hf32_family(self, op: str) -> str | None:
        """"matmul" or "conv" when float32 inputs may compute in HF32 on the card."""
        r = self.row(op)
        return r.get("hf32") if r else None

    def hf32_flag(self, family: str) -> tuple[str, bool]:
        """("torch.npu.matmul.allow_hf32", False) for "matmul"."""
        h = self.hf32[family]
        return h["flag"], h["default"]

    def message(self, key: str, **fields) -> str:
        """A message template of the data file with `fields` filled in ({name} kept if absent)."""
        text = self.messages[key]["text"]
        return re.sub(r"\{(\w+)\}", lambda m: str(fields.get(m.group(1), m.group(0))), text)

    def unsupported_message(self, op: str, dtype, arg: str = "self") -> str:
        """torch_npu's text for an aclnn kernel rejecting `dtype` (placeholders for the parts
        that come from the run: file, line, timestamp, pid, device, rank)."""
        r = self.row(op) or {}
        acl = self.data.get("acl_dtypes", {})
        supported = [acl.get(d, d) for d in r.get("dtypes", []) if d != ANY_DTYPE]
        return self.message(
            "aclnn_dtype_unsupported", func=packet_name(op),
            aclnn=r.get("aclnn", "aclnn" + "".join(w.capitalize()
                                                   for w in packet_name(op).split("_"))),
            arg=arg, acl_dtype=acl.get(dtype_name(dtype), dtype_name(dtype)),
            acl_dtypes=",".join(supported))

    def source_refs(self, op: str) -> list[dict]:
        r = self.row(op) or {}
        return [self.sources[k] for k in r.get("sources", [])]


@functools.cache
def load(target: str = "910B") -> CardProfile:
    """The profile torch_npu/data/card_<target>.toml (ValueError naming the known targets)."""
    files = importlib.resources.files("torch_npu") / "data"
    path = files / f"card_{target}.toml"
    if not path.is_file():
        known = sorted(p.name[5:-5] for p in files.iterdir()
                       if p.name.startswith("card_") and p.name.endswith(".toml"))
        raise ValueError(f"no card profile for target {target!r}; known targets: "
                         f"{', '.join(known) or 'none'} (files torch_npu/data/card_<target>.toml)")
    with path.open("rb") as f:
        return CardProfile(tomllib.load(f))


def targets() -> list[str]:
    files = importlib.resources.files("torch_npu") / "data"
    return sorted(p.name[5:-5] for p in files.iterdir()
                  if p.name.startswith("card_") and p.name.endswith(".toml"))
