"""The LLaMA-style model written without fused kernels (torch_npu.testing.models.LLaMA:
attention spelled out, RMSNorm and rotary embeddings from elementwise ops, tied embeddings)
trains on npu as on the CPU device: for 2 AdamW steps, the loss and every parameter's gradient
match, and the head's weight stays the embedding's (tied) on npu too."""

import pytest
import torch

import torch_npu  # noqa: F401
from torch_npu.testing import models


def _two_steps(device, size):
    torch.manual_seed(0)
    cfg = models.LLAMA_SIZES[size]
    model = models.make_model("llama", **cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the default: foreach, not fused
    record = []
    for x, y in models.batches("llama", 2, batch=4, seed=1, vocab=cfg["vocab"], seq=cfg["block"]):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = models.loss_fn("llama", model(x), y)
        loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        opt.step()
        record.append((loss.detach().cpu(), grads))
    assert model.head.weight is model.tok.weight
    return record, {n: p.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("size", sorted(models.LLAMA_SIZES))
def test_llama_style_loss_and_grads_match_the_cpu(size):
    cpu, cpu_params = _two_steps("cpu", size)
    npu, npu_params = _two_steps("npu", size)
    for step, ((cl, cg), (nl, ng)) in enumerate(zip(cpu, npu)):
        torch.testing.assert_close(nl, cl, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"step {step} loss: {m}")
        assert ng.keys() == cg.keys()
        for name in cg:
            scale = float(cg[name].abs().max())
            torch.testing.assert_close(ng[name], cg[name], rtol=1e-4, atol=1e-5 * max(scale, 1e-2),
                                       msg=lambda m: f"step {step} grad of {name}: {m}")
    # AdamW moves each weight by about lr = 1e-3 a step, whatever the gradient's size, so a
    # gradient near 0 that differs in its last bits can move a weight differently: 1e-5 is 1% of
    # a step.
    for name in cpu_params:
        torch.testing.assert_close(npu_params[name], cpu_params[name], rtol=1e-5, atol=1e-5)
