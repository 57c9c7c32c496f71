"""The analytic device-memory footprint of a LLaMA training step, per rank, for the module graphs
the replays in this folder run (pure Python, no torch).

    from footprint import Llama, footprint
    fp = footprint(Llama.llama2_7b(), "fsdp2", ranks=8, seq=4096, micro_batch=1)
    fp["total"], fp["terms"]

Notation: s sequence, b micro-batch, h hidden, f ffn, a heads, k = h * kv_heads / heads (the
key/value width), V vocabulary, L layers, P parameters, N data-parallel ranks, t tensor-parallel
ranks. No recomputation anywhere (as in the published runs).

State (bytes per rank):
  fsdp2        float32 master parameters 4P/N + float32 gradients 4P/N + AdamW's two float32
               moments 8P/N (everything sharded), plus the unsharded bf16 copies FSDP2 holds:
               the root module's (embedding, final norm, lm_head: not resharded between
               forward and backward) 2 P_root, and two decoder layers' 2 * 2 P_layer (the one
               computing and the one prefetched).
  tp_autocast  float32 parameters 4P/t + gradients 4P/t + AdamW 8P/t, plus autocast's bf16
               copies of the linear weights 2 P_linear/t (cast once per forward, kept by the
               matmuls' backward until it runs).

Activations saved for the backward, per decoder layer. Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models") count sbh(34 + 5as/h) bytes for a GPT
layer in fp16 (4h MLP, LayerNorm, dropout masks, the s x s scores). Adapted to the graphs here:
  - flash attention (SDPA on npu takes the flash kernel): no s x s term; it keeps q, k, v, its
    output and the float32 log-sum-exp (4abs).
  - no dropout (LLaMA): no mask bytes.
  - RMSNorm fused (npu_rms_norm): keeps its input and rstd (4bs), its output is kept by the next
    linear.
  - RoPE fused (npu_rotary_mul): keeps its input, so q and k are kept twice (before and after
    the rotation).
  - the attention output is made contiguous before o_proj, which keeps that copy: 2sbh besides
    the kernel's own output.
  - SwiGLU fused with one gate_up_proj: keeps gate_up's output 2sb(2f) and the product 2sbf,
    6sbf in all (the paper's 4h GELU MLP keeps 19sbh, dropout mask included).
  fsdp2 (bf16 activations), per layer:
      2sb(8h + 3k) + 6sbf + 2 * 4bs + 4abs
    = inputs and outputs of the two norms (4 x 2sbh), q before/after RoPE (2 x 2sbh), the
      attention output and its contiguous copy (2 x 2sbh), k before/after RoPE and v (3 x 2sbk),
      the MLP (6sbf), two rstd (2 x 4bs), the log-sum-exp (4abs).
  tp_autocast with sequence parallelism (float32 residual stream: the embedding runs in
  float32 and autocast leaves the residual adds alone), per layer:
      2 x 4sbh/t            the two norms' inputs (float32, the sequence shard)
    + 4 x 2sbh              the bf16 casts autocast makes of the gathered (full-sequence) norm
                            outputs, one per linear (q, k, v, gate_up): autocast caches casts of
                            parameters, not of activations; Megatron instead keeps the shard and
                            gathers again in the backward
    + [2sb(4h + 3k) + 6sbf + 4abs] / t   as for fsdp2, on this rank's heads and ffn columns, but
                            with one norm output fewer per norm (the casts above replace them)
    + 2 x 4bs/t             rstd
Outside the layers:
  fsdp2        the final norm (2 x 2sbh), and the loss: HF's loss upcasts the bf16 logits to
               float32 and cross_entropy's log_softmax keeps its float32 output; at the peak
               (the start of the backward) that output 4sbV and its gradient 4sbV are live,
               with the bf16 gradient of the logits 2sbV: 10sbV.
  tp_autocast  the final norm's float32 input on the shard (4sbh/t) and its gathered bf16 cast
               (2sbh), the vocab-parallel loss on V/t columns: 10sbV/t.

`footprint(...)["total"]` is the sum; the peak the allocator reports also holds transients
(the gradient being reduced, a cast in flight): the replays' tests say how close they are.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Llama:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int

    @staticmethod
    def llama2_7b() -> "Llama":
        return Llama(32, 4096, 11008, 32, 32, 32000)

    @staticmethod
    def llama2_13b() -> "Llama":
        return Llama(40, 5120, 13824, 40, 40, 32000)

    @staticmethod
    def llama3_8b() -> "Llama":
        return Llama(32, 4096, 14336, 32, 8, 128256)

    @property
    def kv_width(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    def layer_linear_params(self) -> int:
        h, k, f = self.hidden, self.kv_width, self.ffn
        return h * h + 2 * h * k + h * h + 3 * h * f  # q, k, v, o; gate, up, down

    def layer_params(self) -> int:
        return self.layer_linear_params() + 2 * self.hidden  # the two RMSNorm weights

    def root_params(self) -> int:
        return 2 * self.vocab * self.hidden + self.hidden  # embedding, lm_head, final norm

    def params(self) -> int:
        return self.layers * self.layer_params() + self.root_params()


GIB = 2 ** 30


def layer_activation_bytes(m: Llama, strategy: str, seq: int, micro_batch: int,
                           tp: int = 1) -> float:
    s, b, h, k, f, a = seq, micro_batch, m.hidden, m.kv_width, m.ffn, m.heads
    if strategy == "fsdp2":
        return 2 * s * b * (8 * h + 3 * k) + 6 * s * b * f + 2 * 4 * b * s + 4 * a * b * s
    if strategy == "tp_autocast":
        t = tp
        return (2 * 4 * s * b * h / t + 4 * 2 * s * b * h
                + (2 * s * b * (4 * h + 3 * k) + 6 * s * b * f + 4 * a * b * s) / t
                + 2 * 4 * b * s / t)
    raise ValueError(f"strategy must be 'fsdp2' or 'tp_autocast', not {strategy!r}")


def footprint(m: Llama, strategy: str, ranks: int, seq: int, micro_batch: int) -> dict:
    """Bytes per rank: {"terms": {name: bytes}, "total": bytes}."""
    s, b, h, V = seq, micro_batch, m.hidden, m.vocab
    P = m.params()
    terms = {}
    if strategy == "fsdp2":
        n = ranks
        terms["parameters (fp32 shard)"] = 4 * P / n
        terms["gradients (fp32 shard)"] = 4 * P / n
        terms["optimizer (AdamW, 2 x fp32 shard)"] = 8 * P / n
        terms["unsharded bf16: root + 2 layers"] = 2 * m.root_params() + 2 * 2 * m.layer_params()
        terms["activations: layers"] = m.layers * layer_activation_bytes(m, strategy, s, b)
        terms["activations: final norm + loss"] = 2 * 2 * s * b * h + 10 * s * b * V
    elif strategy == "tp_autocast":
        t = ranks
        terms["parameters (fp32, 1/t)"] = 4 * P / t
        terms["gradients (fp32, 1/t)"] = 4 * P / t
        terms["optimizer (AdamW, 2 x fp32, 1/t)"] = 8 * P / t
        terms["autocast bf16 weight copies"] = 2 * (m.layers * m.layer_linear_params()
                                                    + m.vocab * h) / t
        terms["activations: layers"] = m.layers * layer_activation_bytes(m, strategy, s, b, t)
        terms["activations: final norm + loss"] = 4 * s * b * h / t + 2 * s * b * h + \
            10 * s * b * V / t
    else:
        raise ValueError(f"strategy must be 'fsdp2' or 'tp_autocast', not {strategy!r}")
    return {"terms": terms, "total": sum(terms.values())}


if __name__ == "__main__":
    for name, m, strat, seq, mb in (("T1 LLaMA-2-7B FSDP2", Llama.llama2_7b(), "fsdp2", 4096, 1),
                                    ("T2 LLaMA-2-13B TP8", Llama.llama2_13b(), "tp_autocast",
                                     4096, 2),
                                    ("T4 LLaMA-3-8B TP8", Llama.llama3_8b(), "tp_autocast",
                                     8192, 2)):
        fp = footprint(m, strat, 8, seq, mb)
        print(f"{name}: {fp['total'] / GIB:.2f} GiB")
        for term, v in fp["terms"].items():
            print(f"    {term:<40} {v / GIB:8.2f} GiB")
