"""torch.compile(mode="reduce-overhead") on npu follows CUDA graph trees' rules for every kind of
input and output (torch_npu/_inductor/npu_graphs.py), and torch.npu.graph /
make_graphed_callables keep in-place updates of tensors made outside the capture.

Each case runs the same function step by step compiled with reduce-overhead and eagerly, both on
npu, and compares the results and the inputs' contents after every call. A case that cannot use
a graph must say so in Inductor's log, and still compute eager's result."""

import copy
from unittest import mock

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor import cudagraph_utils

import torch_npu  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def sample(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).npu()


def replays():
    return counters["npu"]["graph_replays"]


class SkipLog:
    """Collects what Inductor's cudagraphs log warns."""

    def __enter__(self):
        self.patch = mock.patch.object(cudagraph_utils.cudagraphs_log, "warning")
        self.warning = self.patch.__enter__()
        return self

    def __exit__(self, *exc):
        self.patch.__exit__(*exc)

    @property
    def text(self):
        return " ".join(str(c.args[0]) % c.args[1:] if len(c.args) > 1 else str(c.args[0])
                        for c in self.warning.call_args_list)


def assert_steps_equal(fn, make_args, steps=4, **compile_kwargs):
    """Runs ``fn`` compiled (reduce-overhead) and eagerly, each on its own call of
    ``make_args(step)`` (which builds the same tensors, aliasing included, each time), comparing
    the outputs and every argument after each call."""
    compiled = torch.compile(fn, mode="reduce-overhead", **compile_kwargs)
    outs = []
    for step in range(steps):
        args = make_args(step)
        eager_args = make_args(step)
        got, want = compiled(*args), fn(*eager_args)
        torch.testing.assert_close(got, want, msg=f"output of step {step}")
        for k, (a, b) in enumerate(zip(args, eager_args)):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, msg=f"argument {k} after step {step}")
        outs.append(got)
    return outs


# ---- inputs --------------------------------------------------------------------------------------

def test_mutated_global_tensor_is_updated_not_a_private_copy():
    """The issue's case: a replay used to update the graph's copy of ``cache``."""
    cache = torch.zeros(8, 4, device="npu")
    eager_cache = cache.clone()

    def step(c, x, pos):
        c.index_copy_(0, pos, x)
        return c.sum(0)

    compiled = torch.compile(lambda x, pos: step(cache, x, pos), mode="reduce-overhead",
                             fullgraph=True)
    with SkipLog() as log:
        for i in range(8):
            x = torch.full((1, 4), float(i + 1), device="npu")
            pos = torch.tensor([i], device="npu")
            torch.testing.assert_close(compiled(x, pos), step(eager_cache, x, pos))
            torch.testing.assert_close(cache, eager_cache)
    assert float(cache.sum()) == 4 * sum(range(1, 9))
    # As on CUDA: not graphed, and said so with Inductor's own line.
    assert "skipping cudagraphs due to mutated inputs (1 instances)" in log.text, log.text
    assert counters["inductor"]["cudagraph_skips"] >= 1
    assert replays() == 0


def test_mutated_argument_runs_without_a_graph_and_says_so():
    def f(x, y):
        x.mul_(2).add_(y)
        return x.sum() + y

    with SkipLog() as log:
        assert_steps_equal(f, lambda s: (sample(16, seed=s), sample(16, seed=s + 10)))
    assert "skipping cudagraphs due to mutated inputs" in log.text
    assert replays() == 0


def test_static_address_input_is_updated_in_place_by_the_replays():
    cache = torch.zeros(8, 4, device="npu")
    torch._dynamo.mark_static_address(cache)
    eager_cache = cache.clone()
    address = cache.data_ptr()

    def step(c, x, pos):
        c.index_copy_(0, pos, x)
        return c.sum(0) * 1

    compiled = torch.compile(lambda x, pos: step(cache, x, pos), mode="reduce-overhead")
    with SkipLog() as log:
        for i in range(6):
            x, pos = sample(1, 4, seed=i), torch.tensor([i], device="npu")
            torch.testing.assert_close(compiled(x, pos), step(eager_cache, x, pos))
            torch.testing.assert_close(cache, eager_cache)
        # Read where it is, never copied: an eager update between replays is seen.
        cache.mul_(-1), eager_cache.mul_(-1)
        x, pos = sample(1, 4, seed=9), torch.tensor([7], device="npu")
        torch.testing.assert_close(compiled(x, pos), step(eager_cache, x, pos))
        torch.testing.assert_close(cache, eager_cache)
    assert cache.data_ptr() == address
    assert replays() >= 5 and counters["npu"]["graphs_recorded"] == 1
    assert "skipping" not in log.text


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("total", torch.zeros(8))

    def forward(self, x):
        self.calls.add_(1)
        y = self.lin(x)
        self.total.add_(y.sum(0))
        return y * self.calls


def test_parameters_and_buffers_are_read_and_written_in_place():
    torch.manual_seed(0)
    model = Counter().npu()
    eager = Counter().npu()
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(5):
        x = sample(4, 8, seed=step)
        torch.testing.assert_close(compiled(x), eager(x), msg=f"step {step}")
        for (k, a), b in zip(model.state_dict().items(), eager.state_dict().values()):
            torch.testing.assert_close(a, b, msg=f"{k} after step {step}")
    assert replays() >= 3


def test_a_parameter_that_moves_is_captured_again():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8).npu()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = sample(4, 8)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        recorded = counters["npu"]["graphs_recorded"]
        model.weight = torch.nn.Parameter(sample(8, 8, seed=3))  # a new tensor, a new address
        for _ in range(3):
            torch.testing.assert_close(compiled(x), torch.nn.functional.linear(
                x, model.weight, model.bias))
    assert counters["npu"]["graphs_recorded"] > recorded


def test_aliased_inputs():
    def reads(a, b):
        return a * 2 + b.sum()

    base = sample(16)
    assert_steps_equal(reads, lambda s: (base, base))
    assert_steps_equal(reads, lambda s: (base[1:], base[:-1]))

    def writes_one(a, b):  # a and b share memory: the update of a is seen through b
        a.mul_(2)
        return b.sum() + a

    def fresh(s):
        t = sample(16, seed=s)
        return t, t[4:12]

    with SkipLog() as log:
        assert_steps_equal(writes_one, lambda s: fresh(s))
    assert "skipping" in log.text  # a mutated non-static input, on CUDA too


def test_viewed_and_strided_inputs():
    def f(x, y):
        return (x @ y).relu() + x.sum(-1, keepdim=True)

    assert_steps_equal(f, lambda s: (sample(8, 16, seed=s).t(), sample(8, 8, seed=s + 1)[::1, :]))
    assert_steps_equal(f, lambda s: (sample(16, 16, seed=s)[::2], sample(16, 16, seed=s)[:, 2:10]))
    assert replays() >= 4


def test_outputs_that_alias_inputs_are_views_of_the_callers_tensors():
    def f(x):
        return x[2:6], x.sin()

    compiled = torch.compile(f, mode="reduce-overhead")
    for step in range(4):
        x = sample(4, 8, seed=step)[:, 1:]  # non-contiguous, with a storage offset
        view, s = compiled(x)
        torch.testing.assert_close(view, x[2:6])
        torch.testing.assert_close(s, x.sin())
        # The same memory as the caller's tensor, as in eager mode.
        assert view.data_ptr() == x[2:6].data_ptr() and view.stride() == x[2:6].stride()
        x.add_(1)
        torch.testing.assert_close(view, x[2:6])


def test_outputs_stay_valid_across_replays():
    def f(x):
        return (x * 3).cumsum(0)

    compiled = torch.compile(f, mode="reduce-overhead")
    inputs = [sample(32, seed=s) for s in range(4)]
    outs = [compiled(x) for x in inputs]
    assert replays() >= 2
    for x, out in zip(inputs, outs):
        torch.testing.assert_close(out, f(x))


def preserved():
    return counters["npu"]["outputs_preserved"]


def test_outputs_are_handed_out_without_copies_when_nobody_keeps_them():
    def f(x):
        return torch.sin(x) * 2, (x + 1).sum(0)

    compiled = torch.compile(f, mode="reduce-overhead")
    for s in range(5):
        x = sample(16, 8, seed=s)
        got = compiled(x)
        torch.testing.assert_close(got, f(x))
        del got
    assert replays() >= 3
    assert preserved() == 0


def test_a_kept_output_and_views_of_it_keep_their_values_across_replays():
    def f(x):
        return (x * 3).relu(), x.exp()

    compiled = torch.compile(f, mode="reduce-overhead")
    for s in range(3):  # warm-up, capture, first replay
        compiled(sample(8, 8, seed=10 + s))
    x0 = sample(8, 8, seed=0)
    a0, b0 = compiled(x0)
    row, col = a0[2], b0[:, 5]  # views made by the caller share the kept storage
    before = replays()
    for s in range(1, 4):
        a, b = compiled(sample(8, 8, seed=s))
        torch.testing.assert_close(a, f(sample(8, 8, seed=s))[0])
    assert replays() == before + 3
    assert preserved() >= 2  # a0's and b0's storages, once each
    want_a, want_b = f(x0)
    torch.testing.assert_close(a0, want_a)
    torch.testing.assert_close(b0, want_b)
    torch.testing.assert_close(row, want_a[2])
    torch.testing.assert_close(col, want_b[:, 5])
    a0.add_(1)  # a preserved output is the caller's own memory now
    torch.testing.assert_close(row, want_a[2] + 1)


def test_outputs_sharing_a_storage_still_share_it():
    def f(x):
        y = x * 2
        return y, y[1:], y.t()

    compiled = torch.compile(f, mode="reduce-overhead")
    for s in range(4):
        y, tail, t = compiled(sample(4, 4, seed=s))
    assert replays() >= 1
    y.zero_()
    assert tail.abs().sum().item() == 0 and t.abs().sum().item() == 0


def test_an_output_outlives_its_compiled_function():
    def f(x):
        return x.cos() + 1

    compiled = torch.compile(f, mode="reduce-overhead")
    for s in range(3):
        out = compiled(sample(64, seed=s))
    assert replays() >= 1
    del compiled
    torch._dynamo.reset()
    import gc

    gc.collect()
    torch.npu.empty_cache()
    filler = [torch.full((64,), 7.0, device="npu") for _ in range(8)]  # reuse freed memory
    torch.testing.assert_close(out, f(sample(64, seed=2)))
    del filler


def test_training_with_and_without_zero_grad_matches_eager():
    for set_to_none in (True, None):  # None: gradients accumulate, AccumulateGrad keeps them
        torch.manual_seed(0)
        eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 4)).npu()
        model = copy.deepcopy(eager)
        compiled = torch.compile(model, mode="reduce-overhead")
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
        losses = []
        for step in range(6):
            x = sample(5, 8, seed=step)
            for m, opt, fn in ((eager, opts[0], eager), (model, opts[1], compiled)):
                loss = fn(x).square().mean()
                loss.backward()
                opt.step()
                if set_to_none is not None:
                    opt.zero_grad(set_to_none=set_to_none)
                losses.append(loss)
            torch.testing.assert_close(losses[-1], losses[-2], msg=f"loss of step {step}")
        for p, q in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(q, p)
            if set_to_none is None:
                torch.testing.assert_close(q.grad, p.grad)
        # Every step's loss was kept (the list): the replays preserved them, values unchanged.
        for k in range(0, len(losses), 2):
            torch.testing.assert_close(losses[k + 1], losses[k])
    assert replays() >= 4


def _deep_mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(16, 16), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers).npu()


def test_backward_reads_the_forward_replays_saved_tensors_where_they_are():
    eager = _deep_mlp()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(6):
        x = sample(8, 16, seed=step)
        if step == 3:
            counters["npu"]["inputs_copied"] = 0
            before = replays()
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
    assert replays() - before == 2 * 3  # forward and backward replayed
    # The forward copies x, the backward the loss's gradient (and x, which it saves): the
    # forward's saved activations (8 here) are read where its replay left them.
    assert counters["npu"]["inputs_copied"] <= 3 * 3
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad)


def test_saved_tensors_kept_past_the_next_forward_replay_give_eager_gradients():
    """Two forwards before their backwards (the first one's saved activations are preserved
    when the second replays, so its backward runs as compiled code) and a forward whose graph
    is dropped unused."""
    eager = _deep_mlp()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(4):  # graphs captured and replayed
        compiled(sample(8, 16, seed=step)).sum().backward()
        eager(sample(8, 16, seed=step)).sum().backward()
    a, b = sample(8, 16, seed=20), sample(8, 16, seed=21)
    for fn, m in ((compiled, model), (eager, eager)):
        m.zero_grad()
        loss_a = fn(a).square().sum()
        loss_b = fn(b).cos().sum()
        fn(sample(8, 16, seed=22)).sum()  # a third forward, never backwarded
        loss_b.backward()
        loss_a.backward()
    assert counters["npu"]["outputs_preserved"] > 0
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad)


def test_dynamic_shapes_record_one_graph_per_shape_and_warn_past_the_limit():
    def f(x):
        return (x.sin() + 1).cumsum(0) * x.shape[0]

    compiled = torch.compile(f, mode="reduce-overhead", dynamic=True)
    sizes = [4, 8, 4, 16, 8, 32, 4]
    with inductor_config.patch({"triton.cudagraph_dynamic_shape_warn_limit": 3}), \
            SkipLog() as log:
        for n in sizes:
            for _ in range(2):
                x = sample(n, seed=n)
                torch.testing.assert_close(compiled(x), f(x), msg=f"size {n}")
    assert counters["npu"]["graphs_recorded"] == len(set(sizes))
    assert replays() >= len(sizes)
    assert "recording a new graph for each distinct input size" in log.text
    assert "observed 4 distinct sizes" in log.text


def test_capture_sizes_filter_runs_other_sizes_as_compiled_code():
    def f(x):
        return x.cos() * 2

    compiled = torch.compile(f, mode="reduce-overhead", dynamic=True)
    with inductor_config.patch({"triton.cudagraph_capture_sizes": (8,)}):
        for n in (8, 8, 5, 5, 8):
            x = sample(n, seed=n)
            torch.testing.assert_close(compiled(x), f(x))
    assert counters["npu"]["graphs_recorded"] == 1


def test_a_region_with_cpu_ops_says_why_it_is_not_graphed():
    def f(x, c):
        return x * 2 + c.sum().to(x.device)  # c.sum() runs on the CPU inside the region

    c = torch.arange(4.0)
    with SkipLog() as log:
        assert_steps_equal(f, lambda s: (sample(8, seed=s), c))
    assert "NPU graphs: skipping cudagraphs due to" in log.text, log.text
    assert replays() == 0


# ---- Hugging Face's static cache: the report ----------------------------------------------

def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers, config, transformers.LlamaForCausalLM(config).npu().eval()


@pytest.mark.parametrize("batch", [1, 4])
def test_hf_static_cache_generate_with_reduce_overhead_gives_eager_tokens(batch):
    """The issue's script: the forward compiled by the user (prefill included), the cache made
    by generate inside the compiled region. Its cache tensors are not static addresses there:
    the prefill region (CPU ops in it: compiled code, no graph) creates and returns them, and
    the decode region, which updates them, is replayed from a graph as CUDA graph trees replay
    a region that mutates recorded tensors. A second generate makes a new cache: the decode
    region is captured again."""
    _, _, model = _tiny_llama()
    ids = torch.randint(0, 256, (batch, 8), generator=torch.Generator().manual_seed(1)).npu()
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=64, do_sample=False,
                              cache_implementation="static")
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        with SkipLog() as log:
            for _ in range(2):
                got = model.generate(ids, max_new_tokens=64, do_sample=False,
                                     cache_implementation="static")
                assert torch.equal(got.cpu(), want.cpu())
    assert "skipping cudagraphs due to mutated inputs" not in log.text, log.text
    assert counters["npu"]["graphs_recorded"] == 2
    assert replays() >= 2 * 60


def _eager_step(c, x):
    return c.add_(x).sum(0)


def _mutate_caches(make, step, caches=4):
    for cache_no in range(caches):
        cache = make(sample(8, 4, seed=cache_no))
        address, eager_cache = cache.data_ptr(), cache.clone()
        for i in range(3):
            x = sample(8, 4, seed=10 * cache_no + i)
            torch.testing.assert_close(step(cache, x), _eager_step(eager_cache, x))
            torch.testing.assert_close(cache, eager_cache)
        assert cache.data_ptr() == address


def test_input_returned_by_a_compiled_region_may_be_mutated_in_place():
    """Graph trees' rule for recorded tensors: ``make``'s output is mutated by ``step``, which
    is replayed updating it where it is. A cache that moved is captured again; past
    ``cudagraph_unexpected_rerecord_limit`` moves the region runs as compiled code. (``make``
    has a CPU op, so it runs as compiled code and each cache is new memory.)"""
    c = torch.zeros(4)
    make = torch.compile(
        lambda x: (x * 0).sum(0, keepdim=True).expand(8, 4).contiguous() + c.sum().to(x.device),
        mode="reduce-overhead")
    step = torch.compile(_eager_step, mode="reduce-overhead")
    with inductor_config.patch({"triton.cudagraph_unexpected_rerecord_limit": 2}), \
            SkipLog() as log:
        _mutate_caches(make, step)
        assert "skipping cudagraphs due to mutated inputs" not in log.text, log.text
        assert "re-record limit" in log.text, log.text
    # ``step``: the first cache and two re-records captured, each replayed twice; the fourth
    # cache ran as compiled code.
    assert counters["npu"]["graphs_recorded"] == 3
    assert replays() == 3 * 2


def test_caches_made_by_a_replayed_region_are_updated_without_new_captures():
    """A replayed ``make`` hands each new cache out at its graph's address (the one before is
    preserved elsewhere, being still referenced): ``step`` replays on every cache in place
    after capturing for the first two (the warm-up's cache is new memory; ``step``'s first
    capture waits a call, as a backward waits for its forward's first replay)."""
    make = torch.compile(lambda x: (x * 0).sum(0, keepdim=True).expand(8, 4).contiguous(),
                         mode="reduce-overhead")
    step = torch.compile(_eager_step, mode="reduce-overhead")
    with SkipLog() as log:
        _mutate_caches(make, step, caches=5)
        assert "re-record limit" not in log.text, log.text
    # ``make``: one capture, four replays; ``step``: two captures, 1 + 2 + 3 * 3 replays.
    assert counters["npu"]["graphs_recorded"] == 1 + 2
    assert replays() == 4 + 12


def test_hf_static_cache_made_before_compile_is_replayed_in_place():
    """A StaticCache initialised outside the compiled region marks its tensors as static
    addresses: the decode steps are graph replays that update the cache where it is."""
    transformers, config, model = _tiny_llama()
    ids = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(1)).npu()

    def cache():
        c = transformers.StaticCache(config=config, max_cache_len=80)
        c.early_initialization(batch_size=4, num_heads=2, head_dim=16, dtype=torch.float32,
                               device=ids.device)
        return c

    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=64, do_sample=False, cache=cache())
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        for _ in range(2):  # the second generate has a new cache: captured again
            got = model.generate(ids, max_new_tokens=64, do_sample=False, cache=cache())
            assert torch.equal(got.cpu(), want.cpu())
    assert replays() >= 100


# ---- torch.npu.graph and make_graphed_callables ---------------------------------------------------

def test_npu_graph_updates_tensors_made_outside_the_capture():
    cache = torch.zeros(8, 4, device="npu")
    counter = torch.zeros((), device="npu")
    x = torch.zeros(1, 4, device="npu")
    pos = torch.zeros(1, dtype=torch.long, device="npu")
    eager_cache, eager_counter = cache.clone(), counter.clone()

    def body(c, n, x, pos):
        c.index_copy_(0, pos, x)
        n.add_(1)
        c[:, 1:3].mul_(0.5)  # in place through a view
        return c.sum(0) + n

    torch.npu.synchronize()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        out = body(cache, counter, x, pos)
    # The capture ran nothing.
    assert float(counter) == 0 and float(cache.abs().sum()) == 0
    for i in range(8):
        x.copy_(torch.full((1, 4), float(i + 1))), pos.fill_(i)
        g.replay()
        want = body(eager_cache, eager_counter, x, pos)
        torch.testing.assert_close(out, want, msg=f"replay {i}")
        torch.testing.assert_close(cache, eager_cache)
        torch.testing.assert_close(counter, eager_counter)
    # An eager update between replays is read by the next replay.
    cache.fill_(1), eager_cache.fill_(1)
    g.replay()
    torch.testing.assert_close(out, body(eager_cache, eager_counter, x, pos))
    torch.testing.assert_close(cache, eager_cache)


def test_make_graphed_callables_keeps_in_place_updates():
    class Stats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("seen", torch.zeros(4))

        def forward(self, x, acc):
            y = self.lin(x)
            self.seen.add_(y.detach().sum(0))  # a buffer made outside the capture
            acc.add_(1)                        # an argument updated in place
            return y * acc.sum()

    torch.manual_seed(0)
    module, eager = Stats().npu(), Stats().npu()
    eager.load_state_dict(module.state_dict())
    x0, acc0 = sample(2, 4), torch.zeros(4, device="npu")
    graphed = torch.npu.make_graphed_callables(module, (x0, acc0), num_warmup_iters=1)
    # The warm-up and the capture's sample run updated the sample args and the buffer:
    # start both sides from the same state.
    eager.seen.copy_(module.seen)
    for step in range(4):
        x = sample(2, 4, seed=step)
        acc, eager_acc = torch.full((4,), float(step), device="npu"), \
            torch.full((4,), float(step), device="npu")
        torch.testing.assert_close(graphed(x, acc), eager(x, eager_acc), msg=f"step {step}")
        torch.testing.assert_close(acc, eager_acc, msg=f"argument after step {step}")
        torch.testing.assert_close(module.seen, eager.seen, msg=f"buffer after step {step}")
