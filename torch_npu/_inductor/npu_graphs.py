"""torch.compile(mode="reduce-overhead") on npu: compiled regions replayed from NPU graphs.

The mode turns on Inductor's ``triton.cudagraphs``. Inductor then hands each compiled graph it
finds fit (one device, static input storage) to ``config.cudagraph_policy.cudagraphify``; the
policy installed here wraps npu graphs with ``graphify`` below and leaves the others to
Inductor's own CUDA graph trees.

``graphify`` follows the rules CUDA graph trees apply to each kind of input and output:

- Static inputs (parameters, buffers, tensors marked with ``torch._dynamo.mark_static_address``,
  such as Hugging Face's StaticCache) are read and written where they are, never copied. If one
  moves (a new tensor at that position), the region is captured again, as CUDA re-records.
- Other tensor inputs are copied into the graph's own buffers before each replay. An output
  that views such an input is handed back as the same view of the caller's tensor.
- A region that mutates an input that is not static is not graphed (a replay would update the
  graph's private copy and the caller would never see it): Inductor's line "skipping cudagraphs
  due to mutated inputs (N instances)" is logged once, and the region runs as compiled code.
  The exception is CUDA graph trees' too: an input that an earlier compiled npu region returned
  (graph trees' "cudagraph-recorded tensor") may be mutated. It is read and written where it is,
  like a static input, and the region is captured again if it moves, at most
  ``triton.cudagraph_unexpected_rerecord_limit`` times (then it runs as compiled code). Hugging
  Face's StaticCache made inside a compiled forward is such an input: the prefill region
  creates the cache tensors and returns them, the decode region updates them. (CUDA graphs a
  prefill region with CPU ops in it as graph partitions whose outputs are recorded tensors;
  here a region with CPU ops runs as compiled code, and its outputs count the same.)
- Dynamic shapes: one graph per distinct set of integer inputs (and of the copied inputs'
  shapes), with Inductor's warning past ``triton.cudagraph_dynamic_shape_warn_limit`` and its
  ``triton.cudagraph_capture_sizes`` filter (other sizes run as compiled code).
- Outputs: one in the graph's own memory is handed back without a copy, as an alias of that
  memory (``torch_npu._C._NPUGraphOutputs``, adapter/GraphOutputs.h). CUDA graph trees track
  such outputs' liveness and let the next replay overwrite them (reading one then raises);
  here, before each replay, an alias still referenced (a loss kept across steps, a gradient
  that AccumulateGrad kept) gets its own copy of its bytes first, so no one's tensor changes
  under them, and the ones nobody holds (saved activations the backward consumed, used
  gradients) cost nothing. ``counters["npu"]["outputs_preserved"]`` counts those copies. An
  output that views a static input is returned as it is.

The first call for a signature runs the region once as compiled code on a side stream (warm-up:
kernel libraries loaded, the allocator primed; its results are returned, so in-place updates
happen once), then captures it; later calls copy inputs in and replay.
``torch._dynamo.utils.counters["npu"]`` counts ``graphs_recorded`` and ``graph_replays``.

A region that cannot be captured (it synchronizes, or draws a seed on the host) is not an
error: it is logged as Inductor logs a skipped CUDA graph (an error with
``torch._inductor.config.triton.cudagraph_or_error``) and runs as compiled code without a graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Any, Callable, Sequence

import torch
import torch_npu
from torch._inductor import cudagraph_utils as _cudagraph_utils
from torch._inductor import output_code as _output_code
from torch._dynamo.utils import counters
from torch._inductor.cudagraph_utils import CUDAGraphPolicy
from torch.multiprocessing.reductions import StorageWeakRef

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


def _remember_model_state(x: torch.Tensor) -> None:
    if len(_static_addresses) > 4096:  # drop the entries of tensors that are gone
        for address in [a for a, r in _static_addresses.items() if r() is None]:
            del _static_addresses[address]
    _static_addresses[x.data_ptr()] = weakref.ref(x)


class _Storages:
    """A set of npu storages, by address, that does not keep them alive: an entry whose storage
    is gone no longer counts (its address may be reused by any tensor)."""

    def __init__(self) -> None:
        self._refs: dict[int, StorageWeakRef] = {}

    def add(self, tensors: Any) -> None:
        if len(self._refs) > 4096:  # drop the entries of storages that are gone
            for address in [a for a, r in self._refs.items() if r.expired()]:
                del self._refs[address]
        for t in tensors if isinstance(tensors, (list, tuple)) else (tensors,):
            if isinstance(t, torch.Tensor) and t.device.type == "npu":
                storage = t.untyped_storage()
                self._refs[storage.data_ptr()] = StorageWeakRef(storage)

    def __contains__(self, x: Any) -> bool:
        if not isinstance(x, torch.Tensor) or x.device.type != "npu":
            return False
        ref = self._refs.get(x.untyped_storage().data_ptr())
        return ref is not None and not ref.expired()


# Storages that compiled npu regions returned (graph trees' "cudagraph-recorded tensors"): a later
# region may mutate them in place and still be graphed.
_region_outputs = _Storages()

# The graphs' own output storages: a region given an output of another region's replay (an alias
# of that graph's memory, such as a backward's saved activations) reads it where it is instead of
# copying it in, as CUDA graph trees keep a backward's saved tensors in the forward's pool. An
# alias that was preserved (moved to a block of its own) is no longer there.
_graph_memory = _Storages()

# Outputs of captures' warm-ups (new memory, where later replays give graph memory): a region
# given one waits a call before it is captured itself (``defers_capture`` in graphify).
_warm_up_outputs = _Storages()


def _is_region_output(x: Any) -> bool:
    return x in _region_outputs or x in _graph_memory


def _addresses(inputs: list[Any], idxs: list[int]) -> tuple[list[int], list[int]]:
    return list(idxs), [inputs[i].data_ptr() for i in idxs]


@dataclasses.dataclass
class _Recording:
    """One captured graph: the region for one input signature."""

    graph: Any
    static_inputs: list            # what the graph reads: copies, or the callers' static tensors
    copied: list[int]              # inputs copied in before each replay
    in_place: tuple[list[int], list[int]]  # (input indices, their addresses) read where they are
    outputs: tuple                 # the graph's outputs, rewritten by each replay
    # Per output: "graph" (graph memory, handed out as an alias), "clone" (a CPU tensor made at
    # capture), "as_is" (views a static input), or the index of the copied input it views
    # (handed back as the same view of the caller's tensor).
    delivery: list
    handout: Any = None  # _NPUGraphOutputs over the "graph" outputs (None if there are none)
    # (input indices, addresses) read where they are in another graph's memory
    from_graphs: tuple[list[int], list[int]] = ([], [])
    views_inputs: bool = False  # some output is handed back as a view of a caller's tensor
    all_graph: bool = dataclasses.field(init=False)  # every output is the graph's own

    def __post_init__(self) -> None:
        self.all_graph = self.handout is not None and all(how == "graph" for how in self.delivery)


def _view_of_caller_input(out: torch.Tensor, static: torch.Tensor,
                          given: torch.Tensor) -> torch.Tensor:
    """``out`` views ``static`` (the graph's copy of ``given``, same strides): the same view of
    ``given``."""
    offset = out.storage_offset() - static.storage_offset() + given.storage_offset()
    return given.as_strided(out.size(), out.stride(), offset)


def _deliver(outputs: Sequence[Any], delivery: list, static_inputs: list, given: list,
             graph_owned: Sequence[torch.Tensor] | None = None) -> list:
    """The caller's outputs. For a replay, ``graph_owned`` holds the aliases of its "graph"
    outputs, in order, and its "clone" outputs are cloned; a warm-up's (``graph_owned`` None)
    are fresh and are handed back as they are."""
    result = []
    replay = graph_owned is not None
    aliases = iter(graph_owned or ())
    for o, how in zip(outputs, delivery):
        if isinstance(how, int):
            result.append(_view_of_caller_input(o, static_inputs[how], given[how]))
        elif how == "graph" and replay:
            result.append(next(aliases))
        elif how == "clone" and replay:
            result.append(o.clone())
        else:
            result.append(o)
    return result


def graphify(model: Callable[[list[Any]], Any], static_input_idxs: Sequence[int],
             device_index: int, is_backward: bool, mutated_input_idxs: Sequence[int] = (),
             placeholders: Sequence[Any] = ()) -> Callable[[list[Any]], Any]:
    """Wraps a compiled graph (boxed calling convention: it takes a list and clears it) so that
    it runs as an NPU graph replay after its first call for each input signature (see the
    module's docstring for the rules)."""
    static = set(static_input_idxs)
    mutated = set(mutated_input_idxs)
    recordings: dict[Any, _Recording] = {}
    state: dict[str, Any] = {"checked": False, "eager": False, "warned_dynamic": False,
                             "rerecords": 0, "deferred": False}
    # Mutated non-static inputs that earlier regions returned: read in place (see the module's
    # docstring), decided at the first call.
    mutated_in_place: list[int] = []

    def skips_for_mutation(inputs: list[Any]) -> bool:
        """CUDA graph trees' rule: a region that mutates a non-static input that no compiled
        region returned runs without a graph (logged once). Decided at the first call, as
        graph trees decide per function."""
        state["checked"] = True
        non_static = sorted(i for i in mutated if i not in static)
        unmanaged = [i for i in non_static if not _is_region_output(inputs[i])]
        if not unmanaged:
            mutated_in_place.extend(non_static)
            return False
        message = _cudagraph_utils.get_mutation_stack_trace(list(placeholders), unmanaged) \
            if placeholders else _cudagraph_utils.format_default_skip_message(
                f"mutated inputs ({len(unmanaged)} instances)")
        state["eager"] = True
        _cudagraph_utils.log_cudagraph_skip_and_bump_counter(message)
        return True

    def signature(inputs: list[Any]) -> tuple:
        # Which inputs are integers and which are copied tensors does not change between calls
        # of one compiled graph: found once, so that a call looks at those inputs only (not at
        # every parameter).
        if "int_idxs" not in state:
            state["int_idxs"] = [i for i, x in enumerate(inputs) if isinstance(x, int)]
            state["copied_idxs"] = [i for i, x in enumerate(inputs)
                                    if isinstance(x, torch.Tensor) and i not in static]
        return (tuple(inputs[i] for i in state["int_idxs"]),
                tuple(inputs[i].shape for i in state["copied_idxs"]))

    def in_place_idxs(inputs: list[Any]) -> list[int]:
        # A forward reads every static input where it is; a backward reads parameters and
        # buffers there, and whatever it mutates (a copy would swallow the update).
        return [i for i in static_input_idxs
                if isinstance(inputs[i], torch.Tensor)
                and (not is_backward or i in mutated or _is_model_state(inputs[i]))] \
            + mutated_in_place

    def record(inputs: list[Any], key: Any) -> list:
        in_place = in_place_idxs(inputs)
        if not is_backward:
            for i in in_place:
                _remember_model_state(inputs[i])
        from_graphs = [i for i, x in enumerate(inputs)
                       if i not in in_place and x in _graph_memory]
        copied = [i for i, x in enumerate(inputs)
                  if isinstance(x, torch.Tensor) and i not in in_place and i not in from_graphs]
        static_inputs = list(inputs)
        for i in copied:
            x = inputs[i]
            static_inputs[i] = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype,
                                                   device=x.device)
            static_inputs[i].copy_(x)
        in_place_storages = {inputs[i].untyped_storage().data_ptr()
                             for i in in_place + from_graphs}
        copied_storages = {static_inputs[i].untyped_storage().data_ptr(): i for i in copied}

        def delivery_of(o: Any) -> Any:
            if not isinstance(o, torch.Tensor):
                return "as_is"
            storage = o.untyped_storage().data_ptr()
            if storage in in_place_storages:
                return "as_is"
            if o.device.type != "npu":  # a CPU scalar the region made at capture: a clone
                return "clone"
            return copied_storages.get(storage, "graph")

        def warm_up_results(first_outputs: Any) -> list:
            # The warm-up ran on the copies: its outputs that view a copied input are handed
            # back as views of the caller's tensor. The others are fresh memory: no clone.
            first = tuple(first_outputs) if isinstance(first_outputs, (list, tuple)) \
                else (first_outputs,)
            how = [delivery_of(o) for o in first]
            _warm_up_outputs.add([o for o, d in zip(first, how) if d == "graph"])
            return _deliver(first, how, static_inputs, inputs)

        with torch.npu.device(device_index):
            stream = torch.npu.Stream()
            stream.wait_stream(torch.npu.current_stream())
            with torch.npu.stream(stream):
                # The warm-up is this call's run (its results are returned): a graph that
                # updates static inputs in place (batch norm's running stats, a KV cache)
                # updates them once.
                first_outputs = model(list(static_inputs))
            torch.npu.current_stream().wait_stream(stream)
            graph = torch.npu.NPUGraph()
            try:
                with _capture(graph, stream):
                    outputs = model(list(static_inputs))
            except (RuntimeError, NotImplementedError) as error:
                _cudagraph_utils.log_cudagraph_skip_and_bump_counter(
                    f"skipping NPU graphs: the compiled region cannot be captured ({error})")
                state["eager"] = True
                return warm_up_results(first_outputs)
        counters["npu"]["graphs_recorded"] += 1
        outputs = tuple(outputs) if isinstance(outputs, (list, tuple)) else (outputs,)
        delivery = [delivery_of(o) for o in outputs]
        # No reference is kept to the inputs read in place because they are mutated (a cache):
        # when the caller drops one, the next of its size may get its memory, and the replays
        # update that one without a new capture (addresses are checked at each call).
        for i in mutated_in_place:
            static_inputs[i] = None
        graph_owned = [o for o, how in zip(outputs, delivery) if how == "graph"]
        handout = torch_npu._C._NPUGraphOutputs(graph_owned) if graph_owned else None
        _graph_memory.add(graph_owned)
        for i in from_graphs:
            static_inputs[i] = None  # read where it is; no reference kept
        recordings[key] = _Recording(graph, static_inputs, copied,
                                     _addresses(inputs, in_place), outputs,
                                     delivery, handout=handout,
                                     from_graphs=_addresses(inputs, from_graphs),
                                     views_inputs=any(isinstance(d, int) for d in delivery))
        return warm_up_results(first_outputs)

    def past_rerecord_limit() -> bool:
        """Counts a capture made again because an input read in place moved; True (and logged
        once) past ``triton.cudagraph_unexpected_rerecord_limit``."""
        from torch._inductor import config

        state["rerecords"] += 1
        limit = config.triton.cudagraph_unexpected_rerecord_limit
        if state["rerecords"] != limit + 1:
            return state["rerecords"] > limit
        _cudagraph_utils.log_cudagraph_skip_and_bump_counter(
            "skipping cudagraphs due to the re-record limit: an input read in place "
            f"moved more than {limit} times (triton.cudagraph_unexpected_rerecord_limit)")
        return True

    def defers_capture(inputs: list[Any]) -> bool:
        """The first capture waits one call when an input comes from another region's warm-up
        (new memory): from that region's replays on, the input is in graph memory, which the
        capture then reads where it is (a backward after its forward's first call). Decided
        once."""
        state["deferred"] = True
        return any(x in _warm_up_outputs for x in inputs)

    def compiled_code(inputs: list[Any]) -> Any:
        outputs = model(inputs)
        _region_outputs.add(outputs)
        return outputs

    def run(new_inputs: list[Any]) -> Any:
        if not state["checked"] and skips_for_mutation(new_inputs):
            return compiled_code(new_inputs)
        if state["eager"]:
            return compiled_code(new_inputs)
        key = signature(new_inputs)
        if key[0] and not _captures_size(key[0]):
            return compiled_code(new_inputs)
        recording = recordings.get(key)
        if recording is None and not state["deferred"] and defers_capture(new_inputs):
            return compiled_code(new_inputs)
        if recording is not None and recording.from_graphs[0] \
                and not torch_npu._C._npu_dataPtrsAt(new_inputs, *recording.from_graphs):
            # An input the graph reads from another graph's memory is elsewhere: kept past that
            # graph's next replay (preserved in a block of its own: this call runs as compiled
            # code), or from another capture of it (captured again, within the limit).
            if not all(new_inputs[i] in _graph_memory for i in recording.from_graphs[0]) \
                    or past_rerecord_limit():
                return compiled_code(new_inputs)
            recording = None
        if recording is None or not torch_npu._C._npu_dataPtrsAt(new_inputs, *recording.in_place):
            if recording is None and recordings and not state["warned_dynamic"]:
                state["warned_dynamic"] = _cudagraph_utils.maybe_warning_due_to_dynamic_shape(
                    recordings, key)
            if recording is not None and mutated_in_place and past_rerecord_limit():
                # An input read in place moved (a new cache): CUDA graph trees' re-record limit.
                state["eager"] = True
                return compiled_code(new_inputs)
            given = list(new_inputs)
            new_inputs.clear()
            results = record(given, key)
            _region_outputs.add(results)
            return results
        static_inputs = recording.static_inputs
        for i in recording.copied:
            static_inputs[i].copy_(new_inputs[i])
        counters["npu"]["inputs_copied"] += len(recording.copied)
        given = list(new_inputs) if recording.views_inputs else None
        new_inputs.clear()
        handout = recording.handout
        if handout is not None:
            preserved = handout.preserve_live()  # queued before the replay overwrites them
            if preserved:
                counters["npu"]["outputs_preserved"] += preserved
        recording.graph.replay()
        counters["npu"]["graph_replays"] += 1
        if recording.all_graph:  # the usual case: every output is the graph's own
            return handout.hand_out()
        # Nothing to remember as a region output: the graph's own outputs are known by their
        # address (_graph_memory), views of static inputs were remembered at the capture,
        # and the others are the caller's tensors or CPU clones.
        return _deliver(recording.outputs, recording.delivery, static_inputs, given,
                        handout.hand_out() if handout is not None else [])

    return run


@contextlib.contextmanager
def _capture(graph: Any, stream: Any):
    """torch.npu.graph without its synchronize, gc.collect and empty_cache: the capture follows
    the warm-up on the same stream, and a region captured again because its cache moved (each
    Hugging Face ``generate`` makes a new one) should cost its run, not a full collection (0.2 s
    in a generate) nor the allocator's cached blocks, which the next cache may reuse."""
    with torch.npu.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            yield
        except BaseException:
            graph.reset()  # abandon the capture; the body's error is the one to see
            raise
        graph.capture_end()


def _captures_size(ints: tuple) -> bool:
    """Inductor's ``triton.cudagraph_capture_sizes``: None captures every size, else only the
    listed integer keys (one int, or a tuple of them)."""
    from torch._inductor import config

    sizes = config.triton.cudagraph_capture_sizes
    if sizes is None:
        return True
    key = ints[0] if len(ints) == 1 else ints
    return key in sizes


class NPUGraphPolicy(CUDAGraphPolicy):
    """Inductor's CUDA graph policy with npu graphs wrapped by NPU graphs."""

    def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index,
                     is_backward, is_inference, **kwargs):
        if _on_npu(example_inputs):
            return graphify(model, static_input_idxs, device_index, is_backward,
                            mutated_input_idxs=kwargs.get("mutated_input_idxs", ()),
                            placeholders=kwargs.get("placeholders", ()))
        return super().cudagraphify(model, example_inputs, static_input_idxs,
                                    device_index=device_index, is_backward=is_backward,
                                    is_inference=is_inference, **kwargs)


_original_device_check = _cudagraph_utils.check_multiple_devices_or_any_cpu_nodes
_original_backward_generation = _output_code.maybe_handle_backward_generation


def _device_check(device_node_mapping):
    """Inductor's check accepts one CUDA device; one npu device is as good. A region with CPU
    ops beside npu ones is not graphed: Inductor would split a CUDA region around them (graph
    partitions), NPU graphs do not, and Inductor's own check would then call the one npu
    device "multiple devices"."""
    devices = [d for d in device_node_mapping if d.type != "meta"]
    if len(devices) == 1 and devices[0].type == "npu":
        return None
    cpu_node = device_node_mapping.get(torch.device("cpu"))
    if cpu_node is not None and any(d.type == "npu" for d in devices):
        return _cudagraph_utils.format_default_skip_message(
            f"cpu device ({cpu_node.name}); NPU graphs do not split a region around CPU ops")
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
    the same way, never skipped silently. (A reason found while lowering has already turned
    the graph's cudagraphs flag off when it is compiled afresh; the mode's setting says it was
    asked for.)"""
    from torch._inductor import config

    wanted = bool(graph_kwargs.get("cudagraphs")) or bool(config.triton.cudagraphs)
    _original_post_compile(self, example_inputs, constants, graph_kwargs)
    if wanted and not graph_kwargs["cudagraphs"] and "npu" in self.device_types:
        info = self.cudagraph_info
        reason = self.disabled_cudagraphs_reason or (
            f"skipping cudagraphs due to {info.cudagraph_fail_reasons}" if info else "")
        message = f"NPU graphs: {reason or 'skipping cudagraphs'}"
        _cudagraph_utils.cudagraphs_log.warning(message)
        if config.triton.cudagraph_or_error:
            raise RuntimeError(message)
        # Its outputs are recorded tensors for the regions after it (CUDA would graph it in
        # partitions): a decode region may update a cache this region created.
        inner = self.current_callable
        if inner is not None:
            def remembering(inputs: list[Any]) -> Any:
                outputs = inner(inputs)
                _region_outputs.add(outputs)
                return outputs
            self.current_callable = remembering


def install() -> None:
    """Makes Inductor's CUDA graph path take npu graphs (idempotent). The functions replaced
    are looked up by name in their modules (or on the class) when a graph is compiled."""
    from torch._inductor import config

    if config.cudagraph_policy is None:
        config.cudagraph_policy = NPUGraphPolicy()
    _cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _device_check
    _output_code.maybe_handle_backward_generation = _backward_generation
    _output_code.CompiledFxGraph.post_compile = _post_compile
