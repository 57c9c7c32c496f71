"""torch.compile on npu (torch_npu/_inductor): Inductor generates fused C++ kernels for npu
tensors and the wrapper queues them on the npu stream. Results equal eager on the CPU; compiled
and eager work on one tensor stay ordered; the host does not wait for the device."""

import pytest
import torch

import torch_npu
from torch._inductor.utils import run_and_get_code
from torch_npu.testing.models import CNN, GPT, MLP


def sample(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_fused_pointwise_and_reduction_kernels_equal_the_cpu():
    def f(x, y):
        return torch.relu(x @ y).sum(-1) + x.sin().mean() * torch.tanh(y).amax()

    x, y = sample(16, 32), sample(32, 16, seed=1)
    out, (code,) = run_and_get_code(torch.compile(f), x.npu(), y.npu())
    assert out.device.type == "npu"
    torch.testing.assert_close(out.cpu(), f(x, y), rtol=1e-5, atol=1e-5)
    # Inductor really generated fused kernels for npu, queued on the stream, not an eager
    # fallback: the matmul goes to our aten kernel, the rest into C++ kernels.
    assert "npu_launch(cpp_fused_" in code, code
    assert "device='npu'" in code


def test_compiled_work_is_queued_in_order_with_eager_work():
    def f(x):
        return (x * 2 + 1).exp().sum(0)

    compiled = torch.compile(f)
    a = sample(64, 64)
    x = a.npu()
    compiled(x)  # compile first: the compile itself may synchronize
    torch.npu.synchronize()
    torch_npu._C._npu_sleep(1000)  # the stream is busy for 1 s
    x.mul_(3)                      # eager, queued behind the sleep
    out = compiled(x)              # queued behind both: the host does not wait
    assert not torch.npu.current_stream().query()
    torch.testing.assert_close(out.cpu(), f(a * 3), rtol=1e-5, atol=1e-5)


def test_mlp_forward_and_backward_equal_eager():
    torch.manual_seed(0)
    cpu_model = MLP()
    model = MLP().npu()
    model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(model)
    x = sample(8, cpu_model.net[0].in_features)
    loss = compiled(x.npu()).square().mean()
    ref = cpu_model(x).square().mean()
    torch.testing.assert_close(loss.cpu(), ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    ref.backward()
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["CNN", "GPT"])
def test_cnn_and_gpt_forward_and_backward_equal_eager(name):
    torch.manual_seed(0)
    if name == "CNN":
        cpu_model, x = CNN(), sample(2, 3, 16, 16)
    else:
        tokens = torch.Generator().manual_seed(0)
        cpu_model, x = GPT(), torch.randint(0, 64, (2, 16), generator=tokens)
    model = (CNN() if name == "CNN" else GPT()).npu()
    model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(model, backend="npu")
    loss = compiled(x.npu()).float().square().mean()
    ref = cpu_model(x).float().square().mean()
    torch.testing.assert_close(loss.cpu(), ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    ref.backward()
    for (pname, p), q in zip(model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=pname)


def test_dynamic_shapes_recompile_and_stay_correct():
    def f(x):
        return torch.softmax(x * 0.5, dim=-1).cumsum(-1)

    compiled = torch.compile(f, dynamic=True)
    for rows in (3, 7, 12):
        x = sample(rows, 10, seed=rows)
        torch.testing.assert_close(compiled(x.npu()).cpu(), f(x), rtol=1e-5, atol=1e-5)


def test_cpp_wrapper_is_refused_clearly():
    import torch._inductor.config as config

    with config.patch(cpp_wrapper=True):
        with pytest.raises(Exception, match="cpp_wrapper is not supported on npu"):
            torch.compile(lambda x: x.sin() + 1)(torch.ones(4, device="npu"))
