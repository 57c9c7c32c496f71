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


def test_npu_kernels_are_generated_without_an_openmp_team():
    # A kernel large enough for Inductor to parallelise with OpenMP on the CPU device is serial
    # on npu: the stream worker runs it, and an OpenMP team spinning after its region would hold
    # the cores that the kernel library's pool needs for the next op (torch_npu/_inductor).
    def f(x):
        return (x.sin() * 2 + x.cos()).sum(-1)

    x = sample(512, 4096)
    cpu_out, (cpu_code,) = run_and_get_code(torch.compile(f), x)
    torch._dynamo.reset()
    npu_out, (npu_code,) = run_and_get_code(torch.compile(f), x.npu())
    assert "#pragma omp parallel" in cpu_code  # the reference: this kernel is parallel on CPU
    assert "npu_launch(cpp_fused_" in npu_code and "#pragma omp" not in npu_code, npu_code
    torch.testing.assert_close(npu_out.cpu(), cpu_out, rtol=1e-5, atol=1e-4)


def test_compiled_npu_kernels_run_with_inductor_caches_disabled(python):
    # With its caches disabled Inductor drops the kernel modules from sys.modules while the
    # wrapper still calls them; the launch must still find each kernel's library.
    r = python("""
        import torch, torch_npu
        def f(x):
            return (x.exp() + 1).relu().sum(0)
        x = torch.randn(64, 32)
        out = torch.compile(f)(x.npu()).cpu()
        torch.testing.assert_close(out, f(x), rtol=1e-5, atol=1e-5)
        print("ok")
    """, env={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_python_scalars_that_change_between_calls_are_passed_to_the_kernels():
    # Dynamo specializes a float on the first call; when it changes, the float becomes a 0-dim
    # CPU tensor input of the graph, which the npu kernel reads by value.
    def f(x, s):
        return (x * s).relu() + s

    compiled = torch.compile(f)
    x = sample(64)
    for s in (0.5, 1.5, -2.25, 3.0):
        torch.testing.assert_close(compiled(x.npu(), s).cpu(), f(x, s), rtol=1e-6, atol=1e-6)


def test_autocast_inside_a_compiled_region_matches_eager_autocast():
    torch.manual_seed(0)
    model = MLP().npu()
    compiled = torch.compile(model)
    x = sample(8, model.net[0].in_features).npu()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("npu", dtype=dtype):
            out, ref = compiled(x), model(x)
        assert out.dtype == ref.dtype == dtype
        torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), rtol=1e-2, atol=1e-2)


# ---- mode="reduce-overhead": compiled regions replayed from NPU graphs ---------------------------

def npu_counters():
    from torch._dynamo.utils import counters
    return counters["npu"], counters["inductor"]


@pytest.fixture
def float32_conv():
    """Convolutions in full float32 (not the card's HF32 default, test_hf32.py), so that a model
    compares with the CPU at float32's tolerance."""
    torch.npu.conv.allow_hf32 = False
    yield
    torch.npu.conv.allow_hf32 = True


@pytest.mark.parametrize("name", ["MLP", "CNN"])
def test_reduce_overhead_trains_like_eager_on_replayed_graphs(name, float32_conv):
    npu, inductor = npu_counters()
    npu.clear()
    inductor["cudagraph_skips"] = 0
    torch.manual_seed(0)
    cpu_model = {"MLP": MLP, "CNN": CNN}[name]()
    model = type(cpu_model)().npu()
    model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    shape = (8, cpu_model.net[0].in_features) if name == "MLP" else (4, 3, 16, 16)
    for step in range(4):
        x = sample(*shape, seed=step)
        loss = compiled(x.npu()).square().mean()
        ref = cpu_model(x).square().mean()
        torch.testing.assert_close(loss.cpu(), ref, rtol=1e-5, atol=1e-5)
        loss.backward()
        ref.backward()
        opt.step(), cpu_opt.step()
        opt.zero_grad(), cpu_opt.zero_grad()
    # Parameters, and the batch norms' running statistics (updated once per step: the first
    # call's warm-up is that step's run).
    for (k, p), q in zip(model.state_dict().items(), cpu_model.state_dict().values()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-5, msg=k)
    # The forward and the backward were each captured once and replayed at every later step
    # (the parameters updated in place are static inputs the graphs read where they are); the
    # backward's capture waits for the forward's first replay, whose saved tensors it then
    # reads in the forward's graph memory: 3 forward and 2 backward replays.
    assert npu["graphs_recorded"] == 2, dict(npu)
    assert npu["graph_replays"] == 3 + 2, dict(npu)
    assert inductor["cudagraph_skips"] == 0


def test_reduce_overhead_results_are_not_rewritten_by_the_next_replay():
    def f(x):
        return (x.sin() * 2).cumsum(0)

    compiled = torch.compile(f, mode="reduce-overhead")
    a, b = sample(32), sample(32, seed=1)
    first = compiled(a.npu())
    second = compiled(b.npu())
    third = compiled(a.npu() * 0)
    torch.testing.assert_close(first.cpu(), f(a), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second.cpu(), f(b), rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(third.cpu()) == 0


def test_reduce_overhead_random_ops_draw_fresh_numbers_at_each_replay():
    npu, _ = npu_counters()
    npu.clear()

    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)

    compiled = torch.compile(f, mode="reduce-overhead")
    x = torch.ones(4096, device="npu")
    outs = [compiled(x).cpu() for _ in range(3)]
    assert npu["graph_replays"] >= 2
    assert not torch.equal(outs[1], outs[2])
    for out in outs:  # dropout keeps half, scaled by 2, plus noise in [0, 1)
        kept = out >= 2
        assert 0.4 < kept.float().mean() < 0.6
        assert bool(((out >= 0) & (out < 3)).all())


def test_reduce_overhead_region_unsafe_to_replay_runs_without_a_graph_and_says_so():
    from unittest import mock

    from torch._inductor import cudagraph_utils
    npu, _ = npu_counters()
    npu.clear()

    def f(x):  # Inductor leaves randperm to ATen and marks it unsafe in a graph
        return (x + torch.randperm(x.shape[0], device=x.device)) * 2

    compiled = torch.compile(f, mode="reduce-overhead")
    x = torch.zeros(16, device="npu")
    with mock.patch.object(cudagraph_utils.cudagraphs_log, "warning") as warning:
        outs = [compiled(x).cpu() for _ in range(2)]
    for out in outs:
        assert torch.equal(out.sort().values, torch.arange(16.0) * 2)  # a permutation, doubled
    assert not torch.equal(outs[0], outs[1])
    assert npu["graph_replays"] == 0
    messages = " ".join(str(c.args[0]) for c in warning.call_args_list)
    assert "NPU graphs: " in messages and "randperm" in messages, messages


def test_graph_breaks_split_the_region_and_each_part_runs_on_npu():
    from torch._dynamo.utils import counters
    counters.clear()

    def f(x):
        y = torch.relu(x @ x.t()) * 2
        torch._dynamo.graph_break()  # what print(), .item() in a data-dependent branch ... cause
        return (y.softmax(-1) + x.mean()).sum(0)

    x = sample(16, 16)
    out = torch.compile(f)(x.npu())
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert sum(counters["graph_break"].values()) >= 1
