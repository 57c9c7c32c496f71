"""torch.compile(mode="reduce-overhead") on npu: compiled regions replayed from NPU graphs.

The mode turns on Inductor's ``triton.cudagraphs``. Inductor then hands each compiled graph it
finds fit (one device, no mutated non-static input, static shapes) to
``config.cudagraph_policy.cudagraphify``; the policy installed here wraps npu graphs with
``graphify`` below and leaves the others to Inductor's own CUDA graph trees.

``graphify`` is the single-graph scheme of Inductor's ``cudagraphify_impl`` on torch.npu: on the
first call it copies the non-static inputs into static buffers, runs the compiled graph once on
a side stream (warm-up: kernel libraries loaded, the allocator primed), captures it into an
NPUGraph, and from then on copies new inputs in and replays. Parameters and buffers are static
inputs (the graph reads them where they are; if one moves, the region is captured again).
``torch._dynamo.utils.counters["npu"]`` counts
``graphs_recorded`` and ``graph_replays``. Outputs are returned as clones: a replay
rewrites the graph's output buffers, and a result the caller still holds must not change under
it (Inductor's CUDA graph trees track that instead of copying; a later step). The first call
runs the region once as compiled code (warm-up; its results are returned), then captures it.

A region that cannot be captured (it synchronizes, or draws a seed on the host) is not an
error: it is logged as Inductor logs a skipped CUDA graph (an error with
``torch._inductor.config.triton.cudagraph_or_error``) and runs as compiled code without a graph.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import torch
from torch._inductor import cudagraph_utils as _cudagraph_utils
from torch._inductor import output_code as _output_code
from torch._dynamo.utils import counters
from torch._inductor.cudagraph_utils import CUDAGraphPolicy

__all__ = ["NPUGraphPolicy", "graphify", "install"]


def _on_npu(inputs: Sequence[Any]) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "npu" for t in inputs)


# Parameters and buffers the forward graphs read in place, by address. A backward graph gets its
# saved tensors as plain tensors, all marked static by Inductor (CUDA graph trees keep the
# forward's outputs at fixed addresses); here only those at a parameter's or buffer's address
# are read in place, the saved activations are copied in.
_static_addresses: dict[int, weakref.ref] = {}


def _is_model_state(x: torch.Tensor) -> bool:
    ref = _static_addresses.get(x.data_ptr())
    owner = ref() if ref is not None else None
    return owner is not None and owner.data_ptr() == x.data_ptr()


def graphify(model: Callable[[list[Any]], Any], static_input_idxs: Sequence[int],
             device_index: int, is_backward: bool) -> Callable[[list[Any]], Any]:
    """Wraps a compiled graph (boxed calling convention: it takes a list and clears it) so that
    it runs as an NPU graph replay after its first call, and is captured again if a tensor it
    reads in place (a parameter or buffer) has moved."""
    state: dict[str, Any] = {}

    def record(inputs: list[Any]) -> Any:
        state.clear()
        in_place = [i for i in static_input_idxs
                    if isinstance(inputs[i], torch.Tensor)
                    and (not is_backward or _is_model_state(inputs[i]))]
        if not is_backward:
            for i in in_place:
                _static_addresses[inputs[i].data_ptr()] = weakref.ref(inputs[i])
        copied = [i for i, x in enumerate(inputs)
                  if isinstance(x, torch.Tensor) and i not in in_place]
        static_inputs = list(inputs)
        for i in copied:
            x = inputs[i]
            static_inputs[i] = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype,
                                                   device=x.device)
            static_inputs[i].copy_(x)
        with torch.npu.device(device_index):
            stream = torch.npu.Stream()
            stream.wait_stream(torch.npu.current_stream())
            with torch.npu.stream(stream):
                # The warm-up is this call's run (its results are returned): a graph that
                # updates buffers in place (batch norm's running stats) updates them once.
                first_outputs = model(list(static_inputs))
            torch.npu.current_stream().wait_stream(stream)
            graph = torch.npu.NPUGraph()
            try:
                with torch.npu.graph(graph, stream=stream, capture_error_mode="thread_local"):
                    outputs = model(list(static_inputs))
            except (RuntimeError, NotImplementedError) as error:
                _cudagraph_utils.log_cudagraph_skip_and_bump_counter(
                    f"skipping NPU graphs: the compiled region cannot be captured ({error})")
                state["eager"] = True
                return first_outputs
        counters["npu"]["graphs_recorded"] += 1
        outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
        # An output in the graph's own memory is rewritten by the next replay: it is returned as
        # a clone. One that views a parameter or buffer (a transposed weight saved for the
        # backward) is returned as it is, so that the backward still finds it in place.
        model_storages = {inputs[i].untyped_storage().data_ptr() for i in in_place}
        cloned = [isinstance(o, torch.Tensor)
                  and o.untyped_storage().data_ptr() not in model_storages for o in outputs]
        state.update(graph=graph, static_inputs=static_inputs, copied=copied,
                     in_place=[(i, inputs[i].data_ptr()) for i in in_place],
                     outputs=outputs, cloned=cloned)
        return first_outputs

    def run(new_inputs: list[Any]) -> Any:
        if state.get("eager"):
            return model(new_inputs)
        if not state or any(new_inputs[i].data_ptr() != address
                            for i, address in state["in_place"]):
            first_outputs = record(new_inputs)
            new_inputs.clear()
            return first_outputs
        static_inputs = state["static_inputs"]
        for i in state["copied"]:
            static_inputs[i].copy_(new_inputs[i])
        new_inputs.clear()
        state["graph"].replay()
        counters["npu"]["graph_replays"] += 1
        return [o.clone() if clone else o for o, clone in zip(state["outputs"], state["cloned"])]

    return run


class NPUGraphPolicy(CUDAGraphPolicy):
    """Inductor's CUDA graph policy with npu graphs wrapped by NPU graphs."""

    def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index,
                     is_backward, is_inference, **kwargs):
        if _on_npu(example_inputs):
            return graphify(model, static_input_idxs, device_index, is_backward)
        return super().cudagraphify(model, example_inputs, static_input_idxs,
                                    device_index=device_index, is_backward=is_backward,
                                    is_inference=is_inference, **kwargs)


_original_device_check = _cudagraph_utils.check_multiple_devices_or_any_cpu_nodes
_original_backward_generation = _output_code.maybe_handle_backward_generation


def _device_check(device_node_mapping):
    """Inductor's check accepts one CUDA device; one npu device is as good."""
    devices = [d for d in device_node_mapping if d.type != "meta"]
    if len(devices) == 1 and devices[0].type == "npu":
        return None
    return _original_device_check(device_node_mapping)


def _backward_generation(compiled_graph, boxed_forward_device_index):
    # CUDA graph trees tell their manager that a backward runs outside the graphs; NPU graphs
    # keep no manager.
    if "npu" in compiled_graph.device_types:
        return None
    return _original_backward_generation(compiled_graph, boxed_forward_device_index)


_original_post_compile = _output_code.CompiledFxGraph.post_compile


def _post_compile(self, example_inputs, constants, graph_kwargs):
    """Inductor logs a skipped CUDA graph only for cuda graphs; an npu graph that
    mode="reduce-overhead" cannot wrap (an op unsafe to replay, a mutated input, ...) is logged
    the same way, never skipped silently."""
    wanted = bool(graph_kwargs.get("cudagraphs"))
    _original_post_compile(self, example_inputs, constants, graph_kwargs)
    if wanted and not graph_kwargs["cudagraphs"] and "npu" in self.device_types:
        info = self.cudagraph_info
        reason = self.disabled_cudagraphs_reason or (
            f"skipping cudagraphs due to {info.cudagraph_fail_reasons}" if info else "")
        message = f"NPU graphs: {reason or 'skipping cudagraphs'}"
        _cudagraph_utils.cudagraphs_log.warning(message)
        from torch._inductor import config

        if config.triton.cudagraph_or_error:
            raise RuntimeError(message)


def install() -> None:
    """Makes Inductor's CUDA graph path take npu graphs (idempotent). The functions replaced
    are looked up by name in their modules (or on the class) when a graph is compiled."""
    from torch._inductor import config

    if config.cudagraph_policy is None:
        config.cudagraph_policy = NPUGraphPolicy()
    _cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _device_check
    _output_code.maybe_handle_backward_generation = _backward_generation
    _output_code.CompiledFxGraph.post_compile = _post_compile
