"""NPU graphs: capture a region of npu work once, replay it with one launch (torch.cuda.graphs).

Capture records the tasks the region launches on the capturing stream (and on streams that wait
for events recorded in it) instead of running them; replay re-launches the recorded list as a
single queue entry on the current stream. As with CUDA graphs, inputs and outputs are static:
copy new data into the tensors the capture read, replay, read the tensors it wrote. Memory the
capture allocates comes from a graph pool that nothing else reuses while the graph lives.

Not allowed during a capture (a clear error, and the capture is invalidated): synchronizing
calls (``.item()``, ``.cpu()``, ``print(tensor)``, ``torch.npu.synchronize()``), ops that run on
the host after a synchronize, and random ops that use their seed on the host (``randperm``).
Captured random ops (dropout, rand, randn, ...) draw fresh seeds at each replay, the ones eager
execution would draw (docs/graph_mode.md).
"""

from __future__ import annotations

import gc
import warnings
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

import torch_npu._C as _C

from .memory import empty_cache
from ._device import synchronize
from .streams import Stream, stream as stream_context

__all__ = [
    "NPUGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]


def is_current_stream_capturing() -> bool:
    """True while the current npu stream is capturing a graph."""
    return _C._npu_isCurrentStreamCapturing()


def graph_pool_handle() -> tuple[int, int]:
    """A new memory pool id that several graphs can share (``graph(..., pool=handle)``)."""
    return _C._npu_graphPoolHandle()


class NPUGraph(_C._NPUGraph):
    """A captured npu graph (torch.cuda.CUDAGraph's twin)."""

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        """Starts capturing the current stream, which must not be the default stream.

        ``pool``: a handle from graph_pool_handle() or another graph's pool() to share memory
        with it. ``capture_error_mode``: "global" refuses synchronizing calls from any thread
        while the capture runs, "thread_local" only from this thread, "relaxed" only on the
        capturing stream itself.
        """
        super().capture_begin(pool=tuple(pool) if pool is not None else (0, 0),
                              capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        super().capture_end()

    def replay(self) -> None:
        """Launches the captured work on the current stream."""
        super().replay()

    def reset(self) -> None:
        """Destroys the captured graph and releases its memory pool."""
        super().reset()

    def pool(self) -> tuple[int, int]:
        """The graph's memory pool id, to share with graphs captured after it."""
        return super().pool()

    def enable_debug_mode(self) -> None:
        """Lets debug_dump write this graph (as torch.cuda.CUDAGraph.enable_debug_mode)."""
        self._debug_mode = True

    def debug_dump(self, debug_path: str) -> None:
        """Writes the captured graph to ``debug_path`` as Graphviz DOT: one node per task (kernel,
        copy, memset, event record), in the order a replay runs them."""
        if not getattr(self, "_debug_mode", False):
            warnings.warn("NPU Graphs debug not enabled, set with [graph].enable_debug_mode()",
                          stacklevel=2)
            return
        self._debug_dump(debug_path)


class graph:
    """Context manager that captures the npu work of its body into ``npu_graph``.

    Like torch.cuda.graph: synchronizes the device, collects garbage and empties the cache
    first, then captures on ``stream`` (a side stream shared by all graphs by default).
    """

    default_capture_stream: Stream | None = None

    def __init__(self, npu_graph: NPUGraph, pool=None, stream: Stream | None = None,
                 capture_error_mode: str = "global"):
        if not isinstance(npu_graph, NPUGraph):
            raise TypeError(f"torch.npu.graph expects an NPUGraph, got {type(npu_graph).__name__}")
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = Stream()
            stream = graph.default_capture_stream
        self.npu_graph = npu_graph
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream
        self.stream_ctx = stream_context(stream)
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        synchronize()
        gc.collect()
        empty_cache()
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.npu_graph.capture_end()
            else:
                self.npu_graph.reset()  # abandon the capture; the body's error is the one to see
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


def _check_sample_args(index: int, flat_args: list) -> None:
    for arg in flat_args:
        if not isinstance(arg, torch.Tensor):
            raise TypeError(f"make_graphed_callables: sample_args of callable {index} must be "
                            f"tensors, got {type(arg).__name__}")
        if arg.device.type != "npu":
            raise ValueError(f"make_graphed_callables: sample_args of callable {index} must be on "
                             f"npu, got a tensor on {arg.device}")


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None):
    """Returns graphed versions of ``callables`` (functions or modules): their forward and
    backward passes each replay a captured graph (torch.cuda.make_graphed_callables' contract).

    Each callable is warmed up ``num_warmup_iters`` times on a side stream, then its forward and
    its backward (autograd.grad of the outputs that require grad) are captured, sharing one
    memory pool; forwards are captured in order and backwards in reverse order, so several
    callables may be chained. Calls must pass tensors of the sample args' shapes, dtypes and
    requires_grad; module parameters are static inputs. An argument the forward updates in place
    (found by its version counter during the capture) is written back after each replay, so the
    caller's tensor changes as it would in eager mode.
    """
    if torch.is_autocast_enabled("npu") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. "
                           "Please set `cache_enabled=False`.")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError("make_graphed_callables: callables and sample_args differ in length "
                         f"({len(callables)} vs {len(sample_args)})")
    sample_args = tuple(a if isinstance(a, tuple) else (a,) for a in sample_args)

    flat_args, specs, surfaces = [], [], []
    for i, (fn, args) in enumerate(zip(callables, sample_args)):
        if isinstance(fn, torch.nn.Module):
            if fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks:
                raise RuntimeError("make_graphed_callables: modules must not have hooks "
                                   "registered at the time they are passed; register them "
                                   "after")
            if any(b.requires_grad for b in fn.buffers()):
                raise RuntimeError("make_graphed_callables: module buffers must not require "
                                   "grad")
        flat, spec = pytree.tree_flatten(args)
        _check_sample_args(i, flat)
        params = tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else ()
        flat_args.append(flat)
        specs.append(spec)
        surfaces.append(tuple(flat) + params)

    mempool = graph_pool_handle() if pool is None else pool
    fwd_graphs = [NPUGraph() for _ in callables]
    bwd_graphs = [NPUGraph() for _ in callables]

    # Warm up forward and backward on a side stream (lazy initialisation, workspaces) before
    # anything is captured.
    synchronize()
    with stream_context(Stream()):
        for fn, args, surface in zip(callables, sample_args, surfaces):
            ins = tuple(x for x in surface if x.requires_grad)
            for _ in range(num_warmup_iters):
                outs = tuple(o for o in pytree.tree_leaves(fn(*args))
                             if isinstance(o, torch.Tensor) and o.requires_grad)
                if outs and ins:
                    torch.autograd.grad(outs, ins,
                                        grad_outputs=tuple(torch.empty_like(o) for o in outs),
                                        only_inputs=True, allow_unused=allow_unused_input)
    synchronize()

    static_outputs, out_specs, mutated_args = [], [], []
    for fn, args, fwd, flat in zip(callables, sample_args, fwd_graphs, flat_args):
        versions = [x._version for x in flat]
        with graph(fwd, pool=mempool):
            outputs = fn(*args)
        flat_out, out_spec = pytree.tree_flatten(outputs)
        static_outputs.append(tuple(flat_out))
        out_specs.append(out_spec)
        # Arguments the forward updates in place: a replay updates the graph's copy, which is
        # then written back to the caller's tensor (torch.cuda.make_graphed_callables leaves the
        # caller's tensor unchanged, silently).
        mutated_args.append(tuple(j for j, (x, v) in enumerate(zip(flat, versions))
                                  if x._version != v))

    static_grad_outputs = [None] * len(callables)
    static_grad_inputs = [None] * len(callables)
    for i in reversed(range(len(callables))):
        outs = tuple(o for o in static_outputs[i] if o.requires_grad)
        grad_outs = tuple(torch.empty_like(o) for o in outs)
        ins = tuple(x for x in surfaces[i] if x.requires_grad)
        grads = ()
        if outs and ins:
            with graph(bwd_graphs[i], pool=mempool):
                grads = torch.autograd.grad(outs, ins, grad_outputs=grad_outs, only_inputs=True,
                                            allow_unused=allow_unused_input)
        # One entry per surface tensor: its gradient, or None where none flows.
        it = iter(grads)
        static_grad_inputs[i] = tuple(next(it) if x.requires_grad else None
                                      for x in surfaces[i])
        static_grad_outputs[i] = grad_outs

    def make_function(i: int) -> Callable[..., Any]:
        fwd, bwd = fwd_graphs[i], bwd_graphs[i]
        surface, outputs = surfaces[i], static_outputs[i]
        grad_outputs, grad_inputs = static_grad_outputs[i], static_grad_inputs[i]
        n_user = len(flat_args[i])

        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                for static, given in zip(surface[:n_user], inputs[:n_user]):
                    if static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                fwd.replay()
                result = tuple(o.detach() for o in outputs)
                ctx.mark_non_differentiable(
                    *[r for r, o in zip(result, outputs) if not o.requires_grad])
                return result

            @staticmethod
            def backward(ctx, *grads):
                grads = [g for g, o in zip(grads, outputs) if o.requires_grad]
                for static, given in zip(grad_outputs, grads):
                    if given is not None and static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                if grad_outputs:
                    bwd.replay()
                return tuple(g.detach() if g is not None else None for g in grad_inputs)

        def functionalized(*user_args):
            flat, spec = pytree.tree_flatten(user_args)
            if spec != specs[i]:
                raise ValueError(f"graphed callable {i}: arguments {spec} differ from the "
                                 f"sample args' structure {specs[i]}")
            out = Graphed.apply(*(tuple(flat) + surface[n_user:]))
            for j in mutated_args[i]:
                if flat[j].data_ptr() != surface[j].data_ptr():
                    with torch.no_grad():
                        flat[j].copy_(surface[j])
            return pytree.tree_unflatten(list(out), out_specs[i])

        return functionalized

    graphed = []
    for i, fn in enumerate(callables):
        function = make_function(i)
        if isinstance(fn, torch.nn.Module):
            def make_forward(module, graphed_fn, training, original):
                def forward(*args, **kwargs):
                    # The graph holds the mode it was captured in; another mode runs eagerly.
                    if module.training == training:
                        return graphed_fn(*args, **kwargs)
                    return original(*args, **kwargs)
                return forward
            fn.forward = make_forward(fn, function, fn.training, fn.forward)
            graphed.append(fn)
        else:
            graphed.append(function)
    return graphed[0] if just_one else tuple(graphed)
