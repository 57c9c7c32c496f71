"""Module.to("npu") / .npu() / .cpu() / dtype conversions keep the same Parameter objects, as on
CUDA: PyTorch moves parameters with `param.data = moved` only when the npu answers
aten::_has_compatible_shallow_copy_type for cpu <-> npu; otherwise tied weights come apart and
optimizers built before the move train the old CPU tensors."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_npu


class TiedLM(nn.Module):
    """An embedding whose weight is also the output projection's (GPT-2, T5, tied LLaMA)."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mid = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mid(self.emb(ids))))


def _ids(vocab=50):
    return torch.randint(0, vocab, (4, 7), generator=torch.Generator().manual_seed(1))


def test_shallow_copy_compatibility_answers():
    cpu, npu = torch.ones(2), torch.ones(2, device="npu")
    assert torch._has_compatible_shallow_copy_type(cpu, npu)
    assert torch._has_compatible_shallow_copy_type(npu, cpu)
    assert torch._has_compatible_shallow_copy_type(npu, npu.double())
    assert torch._has_compatible_shallow_copy_type(npu, torch.ones(2, device="npu:1"))
    # sparse tensors cannot take a dense tensor's metadata (and the other way round)
    assert not torch._has_compatible_shallow_copy_type(npu, torch.ones(2).to_sparse())


@pytest.mark.parametrize("move", ["to_npu", "npu_method", "to_npu1_then_cpu", "to_bf16_on_npu"])
def test_parameters_keep_identity(move):
    model = TiedLM()
    params = {name: p for name, p in model.named_parameters()}
    if move == "to_npu":
        model.to("npu")
        device, dtype = torch.device("npu:0"), torch.float32
    elif move == "npu_method":
        model.npu()
        device, dtype = torch.device("npu:0"), torch.float32
    elif move == "to_npu1_then_cpu":
        model.to("npu:1").cpu()
        device, dtype = torch.device("cpu"), torch.float32
    else:
        model.to("npu").to(torch.bfloat16)
        device, dtype = torch.device("npu:0"), torch.bfloat16
    assert model.head.weight is model.emb.weight
    for name, p in model.named_parameters():
        assert p is params[name], name
        assert isinstance(p, nn.Parameter) and p.requires_grad
        assert p.device == device and p.dtype == dtype


def test_tied_weights_gradients_match_cpu():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    npu_model = TiedLM()
    npu_model.load_state_dict(cpu_model.state_dict())
    npu_model.to("npu")
    ids = _ids()
    for model, x in ((cpu_model, ids), (npu_model, ids.npu())):
        logits = model(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
    grad_cpu = cpu_model.emb.weight.grad
    grad_npu = npu_model.emb.weight.grad.cpu()
    # a single tied gradient: the embedding's and the head's contributions summed
    assert npu_model.head.weight.grad is npu_model.emb.weight.grad
    torch.testing.assert_close(grad_npu, grad_cpu, rtol=1e-5, atol=1e-6)


def test_grads_move_with_their_parameters():
    model = nn.Linear(3, 2)
    model(torch.randn(5, 3)).sum().backward()
    grad_before = model.weight.grad.clone()
    weight = model.weight
    model.npu()
    assert model.weight is weight
    assert model.weight.grad.device.type == "npu"
    torch.testing.assert_close(model.weight.grad.cpu(), grad_before)


def test_optimizer_made_before_the_move_trains_the_npu_model():
    torch.manual_seed(0)
    reference = TiedLM()
    model = TiedLM()
    model.load_state_dict(reference.state_dict())
    # The accelerate / migrated-script order: optimizer first, then the move.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.to("npu")
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    ids = _ids()
    losses = []
    for m, o, x in ((reference, ref_opt, ids), (model, opt, ids.npu())):
        trace = []
        for _ in range(5):
            o.zero_grad()
            loss = F.cross_entropy(m(x).flatten(0, 1), x.flatten())
            loss.backward()
            o.step()
            trace.append(loss.item())
        losses.append(trace)
    assert losses[0][-1] < losses[0][0]  # the reference learns
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4,
                               atol=1e-5)
    for (name, p_ref), p in zip(reference.named_parameters(), model.parameters()):
        assert p.device.type == "npu", name
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5)


def test_hooks_and_state_dict_survive_the_move():
    model = TiedLM()
    seen = []
    model.mid.weight.register_hook(lambda g: seen.append(g.device))
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    model.npu()
    model(_ids().npu()).sum().backward()
    assert seen == [torch.device("npu:0")]
    state = model.state_dict()
    assert state.keys() == state_before.keys()
    # the tie is visible in the state dict as one storage, as on the CPU
    assert state["emb.weight"].data_ptr() == state["head.weight"].data_ptr()
    for k, v in state.items():
        assert v.device.type == "npu"
        torch.testing.assert_close(v.cpu(), state_before[k])
    model.cpu().load_state_dict(state_before)
    assert model.head.weight is model.emb.weight


def test_version_strings():
    assert torch.version.cann == torch_npu._C._npu_runtimeVersion()
    assert torch_npu.utils.get_cann_version() == torch.version.cann
    with pytest.raises(ValueError, match="unknown module"):
        torch_npu.utils.get_cann_version("toolkit")
