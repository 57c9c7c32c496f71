"""NPU graphs (torch_npu/npu/graphs.py over runtime/graph.cpp): a captured region replays with
new data in its static inputs and equals eager execution; random ops draw fresh seeds at each
replay; synchronizing calls during a capture are refused; the graph's memory is not handed to anyone else while it lives."""

import pytest
import torch

import torch_npu


def sample(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def mlp(x, w1, w2):
    return torch.relu(x @ w1).softmax(-1) @ w2 + 1


def test_replay_with_new_inputs_equals_eager():
    w1, w2 = sample(32, 64, seed=1), sample(64, 16, seed=2)
    x = sample(8, 32).npu()
    nw1, nw2 = w1.npu(), w2.npu()
    mlp(x, nw1, nw2)  # warm up outside the capture
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = mlp(x, nw1, nw2)
    assert g._num_tasks() >= 5  # the kernels were recorded, not run
    for seed in range(3, 7):
        new = sample(8, 32, seed=seed)
        x.copy_(new)
        g.replay()
        torch.testing.assert_close(y.cpu(), mlp(new, w1, w2), rtol=1e-5, atol=1e-5)


def test_replays_and_eager_work_on_the_same_tensors_stay_ordered():
    x = torch.zeros(1000, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        x.mul_(2).add_(1)  # x <- 2x + 1
    expected = torch.zeros(1000)
    for i in range(5):
        x.add_(i)  # eager, queued before the replay on the current stream
        expected += i
        g.replay()
        expected = expected * 2 + 1
    torch.testing.assert_close(x.cpu(), expected)


def test_capture_memory_is_not_reused_by_eager_allocations():
    x = sample(256, 256).npu()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        tmp = x * 2          # freed inside the capture; the replay writes it again
        y = tmp.exp()
        del tmp
    eager = [torch.full((256, 256), 7.0, device="npu") for _ in range(4)]
    ptrs = {t.data_ptr() for t in eager}
    assert y.data_ptr() not in ptrs
    g.replay()
    for t in eager:
        assert torch.equal(t.cpu(), torch.full((256, 256), 7.0))
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).exp())


@pytest.mark.parametrize("call", ["item", "cpu", "synchronize", "print"])
def test_synchronizing_calls_are_refused_and_the_next_capture_works(call):
    x = torch.ones(4, device="npu")
    with pytest.raises(RuntimeError, match="is capturing a graph|while .* is capturing"):
        with torch.npu.graph(torch.npu.NPUGraph()):
            y = x + 1
            if call == "item":
                y.sum().item()
            elif call == "cpu":
                y.cpu()
            elif call == "synchronize":
                torch.npu.synchronize()
            else:
                print(y)
    assert not torch.npu.is_current_stream_capturing()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        z = x * 3
    g.replay()
    assert torch.equal(z.cpu(), torch.full((4,), 3.0))


def random_block(x, generator=None):
    dropped = torch.nn.functional.dropout(x, 0.5)             # native_dropout
    noise = torch.rand(x.shape, device=x.device, generator=generator)  # uniform_
    return dropped + noise + torch.randn_like(x).bernoulli_(0.3)      # normal_, bernoulli_


def test_random_ops_replay_as_eager_would_and_differ_between_replays():
    x = torch.ones(4096, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = random_block(x)
    torch.npu.manual_seed(7)
    replays = []
    for _ in range(3):
        g.replay()
        replays.append(y.cpu())
    state_after_replays = torch.npu.get_rng_state()
    torch.npu.manual_seed(7)
    eager = [random_block(x).cpu() for _ in range(3)]
    state_after_eager = torch.npu.get_rng_state()
    # Each replay draws the seeds the eager ops would have drawn at that point, in their order.
    for r, e in zip(replays, eager):
        assert torch.equal(r, e)
    assert not torch.equal(replays[0], replays[1]) and not torch.equal(replays[1], replays[2])
    assert torch.equal(state_after_eager, state_after_replays)  # the generator advanced as much


def test_a_captured_generator_of_its_own_is_drawn_from_at_replay():
    x = torch.zeros(1024, device="npu")
    gen = torch.Generator(device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = x + torch.rand(x.shape, device="npu", generator=gen)
    gen.manual_seed(3)
    g.replay()
    replayed = y.cpu()
    gen.manual_seed(3)
    default_before = torch.npu.get_rng_state()
    assert torch.equal(replayed, torch.rand(x.shape, device="npu", generator=gen).cpu())
    g.replay()  # draws from gen, not from the default generator
    assert torch.equal(torch.npu.get_rng_state(), default_before)


def test_random_ops_that_use_their_seed_on_the_host_are_refused():
    with pytest.raises(NotImplementedError, match="randperm cannot be captured in an NPU graph"):
        with torch.npu.graph(torch.npu.NPUGraph()):
            torch.randperm(16, device="npu")


def test_debug_dump_writes_the_graph_as_dot(tmp_path):
    x = torch.ones(8, device="npu")
    g = torch.npu.NPUGraph()
    g.enable_debug_mode()
    with torch.npu.graph(g):
        y = (x * 2).relu()
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    dot = path.read_text()
    assert dot.startswith("digraph npu_graph {")
    assert f"NPU graph: {g._num_tasks()} tasks" in dot
    assert dot.count(" -> ") == g._num_tasks() - 1  # replay order: a chain
    assert "mul" in dot and "relu" in dot, dot
    plain = torch.npu.NPUGraph()
    with torch.npu.graph(plain):
        y = x + 1
    with pytest.warns(UserWarning, match="debug not enabled"):
        plain.debug_dump(str(tmp_path / "other.dot"))
    assert not (tmp_path / "other.dot").exists()


def test_bad_use_gives_torch_cuda_graph_errors():
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()
    with pytest.raises(RuntimeError, match="capture_error_mode 'bogus'"):
        with torch.npu.graph(g, capture_error_mode="bogus"):
            pass
    with pytest.raises(TypeError, match="expects an NPUGraph"):
        torch.npu.graph(object())
    with torch.npu.graph(g):
        torch.ones(2, device="npu").add_(1)
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()


def test_graphs_share_a_pool_and_chain():
    pool = torch.npu.graph_pool_handle()
    x = sample(64).npu()
    g1, g2 = torch.npu.NPUGraph(), torch.npu.NPUGraph()
    with torch.npu.graph(g1, pool=pool):
        a = x.sin()
    with torch.npu.graph(g2, pool=g1.pool()):
        b = a.cos() * 2
    assert g1.pool() == g2.pool() == pool
    for seed in range(2):
        new = sample(64, seed=seed + 10)
        x.copy_(new)
        g1.replay()
        g2.replay()
        torch.testing.assert_close(b.cpu(), new.sin().cos() * 2)


def test_make_graphed_callables_forward_and_backward_equal_eager():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4)).npu()
    model.load_state_dict(cpu_model.state_dict())
    sample_x = torch.randn(8, 16, device="npu", requires_grad=True)
    graphed = torch.npu.make_graphed_callables(model, (sample_x,))
    for step in range(3):
        xc = sample(8, 16, seed=step + 20).requires_grad_()
        xn = xc.detach().npu().requires_grad_()
        out = graphed(xn)
        ref = cpu_model(xc)
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
        out.square().sum().backward()
        ref.square().sum().backward()
        torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
        model.zero_grad()
        cpu_model.zero_grad()


def test_graph_outputs_handed_out_as_aliases_and_preserved_while_referenced():
    """torch_npu._C._NPUGraphOutputs (adapter/GraphOutputs.h), the hand-out reduce-overhead
    uses: aliases share the graph's memory (and each other's storage where the graph's outputs
    did); before a replay, a still-referenced alias gets its own copy, an unreferenced one none."""
    x = sample(6, 4).npu()
    (x * 2).sum()  # warm up outside the capture
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = x * 2
        z = y[2:].sum(0)
    outputs = torch_npu._C._NPUGraphOutputs([y, y[1:], z])
    results = []
    for seed in range(4):
        new = sample(6, 4, seed=seed)
        x.copy_(new)
        preserved = outputs.preserve_live()
        assert preserved == (2 if seed == 2 else 0), (seed, preserved)
        g.replay()
        a, tail, s = outputs.hand_out()
        assert a.data_ptr() == y.data_ptr() and tail.data_ptr() == y[1:].data_ptr()
        assert a.untyped_storage().data_ptr() == tail.untyped_storage().data_ptr()
        torch.testing.assert_close(a.cpu(), new * 2)
        torch.testing.assert_close(s.cpu(), (new * 2)[2:].sum(0))
        if seed == 1:
            kept = (a, tail[1:], s, new)  # referenced across the next replays
        del a, tail, s
    a1, tail1, s1, new1 = kept
    assert a1.data_ptr() != y.data_ptr()  # preserved: a block of its own
    torch.testing.assert_close(a1.cpu(), new1 * 2)
    torch.testing.assert_close(tail1.cpu(), (new1 * 2)[2:])
    torch.testing.assert_close(s1.cpu(), (new1 * 2)[2:].sum(0))
    a1.zero_()  # one storage still: the caller's view sees it, the graph's output does not
    assert tail1.abs().sum().item() == 0
    torch.testing.assert_close(y.cpu(), sample(6, 4, seed=3) * 2)
    with pytest.raises(RuntimeError, match="npu tensor"):
        torch_npu._C._NPUGraphOutputs([torch.zeros(2)])
