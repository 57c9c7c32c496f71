"""An Inductor graph pass for npu: attention reads grouped key / value heads as they are (GQA).

Hugging Face's attention (``transformers.integrations.sdpa_attention``) passes ``enable_gqa`` to
SDPA only without a mask, and packs a single query's heads onto the key / value heads only when
not compiling; a compiled decode step with a static cache (which always has a mask) repeats the
key / value heads instead, ``repeat_kv``: ``x[:, :, None].expand(B, Hkv, rep, S, D).reshape(B,
Hkv * rep, S, D)``. Inductor realizes that reshape as a copy, so every layer of every decode step
wrote its whole cache out again ``rep`` times over (the LLaMA of benchmarks/decode_bench.py at
batch 8: 38 MB a step, a quarter of the step's weight reads) before attention read it back.

npu's fused SDPA (``_scaled_dot_product_fused_attention_overrideable``, adapter/ops/Attention.cpp)
takes fewer key / value heads than query heads, query head h reading key / value head
``h // rep`` -- exactly what ``repeat_kv`` lays out. So this pass hands the attention the
unrepeated tensors and the copy disappears. It runs on the post-grad graph (as
``post_grad_custom_pre_pass``) and only where it cannot change a result:

- the attention runs on npu and only its output is used (no backward reads its saved key /
  value, whose gradients would have the repeated shape);
- key and value are each ``reshape / view (clone? (expand (unsqueeze(x, 2))))`` with the
  expanded size ``[B, Hkv, rep, S, D]`` of a 4-D ``x`` and ``Hkv * rep`` query heads.

``torch._dynamo.utils.counters["npu"]["gqa_attention_unrepeated"]`` counts the rewrites.
"""

from __future__ import annotations

import hashlib
import operator
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor import config as _inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["UnrepeatGqaAttention", "install"]

aten = torch.ops.aten
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _unrepeated(node: Any, query_heads: int) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(x, the chain's nodes, last first) when ``node`` is ``repeat_kv(x)`` for query_heads."""
    if not isinstance(node, torch.fx.Node) or node.target not in _RESHAPES:
        return None
    chain = [node]
    source = node.args[0]
    if isinstance(source, torch.fx.Node) and source.target == aten.clone.default:
        chain.append(source)
        source = source.args[0]
    if not isinstance(source, torch.fx.Node) or source.target != aten.expand.default:
        return None
    chain.append(source)
    unsqueeze = source.args[0]
    if (not isinstance(unsqueeze, torch.fx.Node) or unsqueeze.target != aten.unsqueeze.default
            or unsqueeze.args[1] not in (2, -3)):
        return None
    chain.append(unsqueeze)
    x = unsqueeze.args[0]
    x_val, expanded, out = _val(x), _val(source), _val(node)
    if x_val is None or expanded is None or out is None or x_val.dim() != 4:
        return None
    b, hkv, s, d = x_val.shape
    if expanded.dim() != 5 or tuple(expanded.shape[:2]) != (b, hkv) or tuple(
            expanded.shape[3:]) != (s, d):
        return None
    rep = expanded.shape[2]
    if rep < 2:  # nothing repeated, nothing copied
        return None
    if tuple(out.shape) != (b, hkv * rep, s, d) or hkv * rep != query_heads:
        return None
    return x, chain


def unrepeat_gqa_attention(graph: torch.fx.Graph) -> None:
    for node in list(graph.nodes):
        if node.target != aten._scaled_dot_product_fused_attention_overrideable.default:
            continue
        q = _val(node.args[0])
        if q is None or q.device.type != "npu" or q.dim() != 4:
            continue
        # Only the output is read: no backward holds on to the repeated key / value.
        if any(user.target is not operator.getitem or user.args[1] != 0
               for user in node.users):
            continue
        key = _unrepeated(node.args[1], q.shape[1])
        value = _unrepeated(node.args[2], q.shape[1])
        if key is None or value is None:
            continue
        node.args = (node.args[0], key[0], value[0], *node.args[3:])
        for _, chain in (key, value):
            for dead in chain:  # the reshape first, then what fed it
                if not dead.users:
                    graph.erase_node(dead)
        counters["npu"]["gqa_attention_unrepeated"] += 1


with open(__file__, "rb") as _source:  # the pass's identity for the cache: read once
    _SOURCE_HASH = hashlib.sha256(_source.read()).hexdigest()


class UnrepeatGqaAttention(CustomGraphPass):
    """unrepeat_gqa_attention, with a uuid so that Inductor's FX graph cache keeps working."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        unrepeat_gqa_attention(graph)

    def uuid(self) -> Any:
        return _SOURCE_HASH


def install() -> None:
    """Sets the pass as Inductor's post_grad_custom_pre_pass unless the user has set one."""
    if _inductor_config.post_grad_custom_pre_pass is None:
        _inductor_config.post_grad_custom_pre_pass = UnrepeatGqaAttention()
