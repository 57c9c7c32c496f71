"""torch.compile on npu hands attention the unrepeated key / value heads of grouped-query attention
(torch_npu/_inductor/gqa_attention.py): Hugging Face's ``repeat_kv`` before a masked SDPA (a
compiled decode step with a static cache) no longer copies the cache. Results against the CPU
device: the attention alone (masks, head groupings, and cases the pass must leave alone), a
training step (the backward needs the repeated tensors: not rewritten), and a LLaMA-shaped
``generate`` with a static cache, compiled and with reduce-overhead, whose tokens must equal the
CPU's eager ones."""

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_npu  # noqa: F401


@pytest.fixture(autouse=True)
def compile_afresh():
    """Every compile runs Inductor's passes (a cache hit skips them, and their counters)."""
    with torch._inductor.config.patch(fx_graph_cache=False):
        yield


def repeat_kv(x, rep):  # transformers.integrations.sdpa_attention.repeat_kv
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, rep, s, d).reshape(b, h * rep, s, d)


def attention(q, k, v, mask):
    rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, rep), repeat_kv(v, rep),
                                          attn_mask=mask, scale=0.125)


def inputs(b, hq, hkv, sq, skv, d, mask_kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=g)
    k = torch.randn(b, hkv, skv, d, generator=g)
    v = torch.randn(b, hkv, skv, d, generator=g)
    visible = torch.rand(b, 1, sq, skv, generator=g) < 0.7
    visible[..., 0] = True
    mask = {"bool": visible, "none": None,
            "float": torch.zeros(b, 1, sq, skv).masked_fill(~visible, float("-inf"))}[mask_kind]
    return q, k, v, mask


@pytest.mark.parametrize("b,hq,hkv,sq,skv,d", [(2, 8, 2, 1, 19, 64), (3, 4, 1, 1, 37, 32),
                                              (1, 6, 3, 5, 11, 16), (2, 4, 4, 1, 9, 16)])
@pytest.mark.parametrize("mask_kind", ["bool", "float", "none"])
def test_repeated_kv_attention_matches_the_cpu(b, hq, hkv, sq, skv, d, mask_kind):
    torch._dynamo.reset()
    counters.clear()
    q, k, v, mask = inputs(b, hq, hkv, sq, skv, d, mask_kind)
    want = attention(q, k, v, mask)
    compiled = torch.compile(attention, fullgraph=True)
    got = compiled(*(t.npu() if t is not None else None for t in (q, k, v, mask)))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    # The pass fires wherever heads were repeated (rep > 1) and SDPA took the fused npu op (an
    # additive float mask takes the math path, as in eager: npu's fused SDPA takes bool masks).
    rewrites = counters["npu"]["gqa_attention_unrepeated"]
    assert rewrites == (1 if hq != hkv and mask_kind != "float" else 0)


def test_training_keeps_the_repeated_tensors_and_matches_the_cpu():
    torch._dynamo.reset()
    counters.clear()
    q, k, v, mask = inputs(2, 8, 2, 4, 13, 16, "bool")
    leaves_cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    attention(*leaves_cpu, mask).square().sum().backward()
    leaves_npu = [t.npu().requires_grad_() for t in (q, k, v)]
    compiled = torch.compile(attention, fullgraph=True)
    compiled(*leaves_npu, mask.npu()).square().sum().backward()
    assert counters["npu"]["gqa_attention_unrepeated"] == 0
    for got, want in zip(leaves_npu, leaves_cpu):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-5)


def test_a_repeated_tensor_read_elsewhere_is_kept():
    torch._dynamo.reset()
    counters.clear()
    q, k, v, mask = inputs(2, 8, 2, 1, 10, 16, "bool")

    def f(q, k, v, mask):
        k_rep = repeat_kv(k, 4)
        out = F.scaled_dot_product_attention(q, k_rep, repeat_kv(v, 4), attn_mask=mask)
        return out, k_rep * 2

    want = f(q, k, v, mask)
    got = torch.compile(f, fullgraph=True)(q.npu(), k.npu(), v.npu(), mask.npu())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_static_cache_generate_equals_cpu_eager(mode):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 512, (3, 7), generator=torch.Generator().manual_seed(1))
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False,
                  attention_mask=torch.ones_like(prompt))
    with torch.no_grad():
        want = model.generate(prompt, **kwargs)
        torch._dynamo.reset()
        counters.clear()
        model.npu()
        model.forward = torch.compile(model.forward, mode=mode, fullgraph=True)
        kwargs["attention_mask"] = kwargs["attention_mask"].npu()
        got = model.generate(prompt.npu(), cache_implementation="static", **kwargs)
    assert torch.equal(got.cpu(), want)
    # The decode step's two layers: their attention reads the cache unrepeated.
    assert counters["npu"]["gqa_attention_unrepeated"] >= 2
