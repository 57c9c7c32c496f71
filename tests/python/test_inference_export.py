"""Models exported by PyTorch's current ONNX exporter (torch.onnx.export(dynamo=True), through
onnxscript) convert with atc and run on the engine with onnxruntime's results: the test
models of onnx_models.py and tiny Hugging Face BERT, ViT, GPT-2 and LLaMA built from configs
(their graphs bring IsNaN + Where from safe softmax, GatherElements, Slice / Expand on run-time
data for rotary embeddings, Split, Pow, Tanh). Plus one hand-built graph for the data-movement
and test ops on edge cases (negative steps, clamped bounds, casts, NaN, negative indices)."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from ais_bench._acl import AclError
from ais_bench.infer.interface import InferSession
from onnx_models import CNN, GPT, MLP, TOL, Encoder, atc, convert


def dynamo_export(model, example, path):
    torch.manual_seed(0)
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), str(path), dynamo=True, input_names=["x"])
    return str(path)


def run_both(onnx_path, om_path, feed):
    expected = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
        None, {"x": feed})
    session = InferSession(0, om_path)
    got = session.infer([feed])
    session.free_resource()
    assert [g.shape for g in got] == [e.shape for e in expected]
    return got, expected


def ops_of(path):
    return {n.op_type for n in onnx.load(path).graph.node}


def hf_models():
    from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM, ViTConfig, ViTModel)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    small = dict(num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return {
        "bert": (lambda: BertModel(BertConfig(vocab_size=100, hidden_size=32,
                                              max_position_embeddings=64, **small)), ids),
        "vit": (lambda: ViTModel(ViTConfig(hidden_size=32, image_size=32, patch_size=8, **small)),
                torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))),
        "gpt2": (lambda: GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2,
                                                    n_head=4, n_positions=64, use_cache=False,
                                                    bos_token_id=0, eos_token_id=0)), ids),
        "llama": (lambda: LlamaForCausalLM(LlamaConfig(
            vocab_size=100, hidden_size=32, num_key_value_heads=2, max_position_embeddings=64,
            use_cache=False, **small)), ids),
    }


# The ops each export must contain, so the test keeps covering what it was written for.
EXPECTED_OPS = {"bert": {"IsNaN", "GatherElements", "Expand"}, "vit": {"IsNaN", "Conv"},
                "gpt2": {"IsNaN", "Split", "Tanh", "Pow"}, "llama": {"IsNaN", "Slice", "Expand"}}


# What atc's fusions must make of each (attention -> one Attention node; GPT-2's tanh GELU ->
# one Gelu), with no Softmax / Tanh left over.
EXPECTED_FUSED = {"bert": {"Attention": 2}, "vit": {"Attention": 2},
                  "gpt2": {"Attention": 2, "Gelu": 2}, "llama": {"Attention": 2}}


def engine_ops(om_path):
    from atc import om
    with open(om_path, "rb") as f:
        model = om.parse(f.read())
    # A Reshape between two arena tensors must have become an alias in the memory plan.
    assert not [n for n in model.nodes if n.op == "Reshape" and all(
        model.tensors[i].storage == om.ARENA for i in n.inputs + n.outputs)]
    return [n.op for n in model.nodes]


@pytest.mark.parametrize("name, make, shape", [
    ("mlp", MLP, (4, 32)), ("cnn", CNN, (2, 3, 32, 32)), ("encoder", Encoder, (2, 8, 32))])
def test_dynamo_export_matches_onnxruntime(tmp_path, name, make, shape):
    torch.manual_seed(1)
    path = dynamo_export(make(), torch.randn(*shape), tmp_path / f"{name}.onnx")
    x = np.random.RandomState(0).randn(*shape).astype(np.float32)
    got, expected = run_both(path, convert(path, tmp_path / name), x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)


def test_dynamo_export_gpt_matches_onnxruntime(tmp_path):
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 16))
    path = dynamo_export(GPT(), ids, tmp_path / "gpt.onnx")
    got, expected = run_both(path, convert(path, tmp_path / "gpt"), ids.numpy())
    np.testing.assert_allclose(got[0], expected[0], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", ["bert", "vit", "gpt2", "llama"])
def test_hugging_face_model_matches_onnxruntime(tmp_path, name):
    make, example = hf_models()[name]
    torch.manual_seed(0)
    path = dynamo_export(make(), example, tmp_path / f"{name}.onnx")
    assert EXPECTED_OPS[name] <= ops_of(path)
    om_path = convert(path, tmp_path / name)
    ops = engine_ops(om_path)
    assert {op: ops.count(op) for op in EXPECTED_FUSED[name]} == EXPECTED_FUSED[name]
    assert "Softmax" not in ops and "Tanh" not in ops
    got, expected = run_both(path, om_path, example.numpy())
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)


def _save(tmp_path, nodes, inits, out_names, x_type=TensorProto.FLOAT, x_shape=(3, 4, 5)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [onnx.ValueInfoProto(name=n) for n in out_names],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path = str(tmp_path / "g.onnx")
    onnx.save(model, path)
    return path


def test_data_movement_and_test_ops_match_onnxruntime(tmp_path):
    """Slice with axes, negative and clamped bounds and steps (-1 walks backwards), Expand,
    Cast to int64 / bool and back, IsNaN / IsInf on NaN and inf, comparisons, And / Or / Not,
    Where over them, GatherElements with negative indices; outputs of every engine dtype."""
    i64 = np.int64
    nodes = [
        helper.make_node("Slice", ["x", "s0", "e0", "a0", "p0"], ["sl"]),
        helper.make_node("Slice", ["x", "s1", "e1"], ["sl2"]),
        helper.make_node("Expand", ["sl2", "shape"], ["ex"]),
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
        helper.make_node("Cast", ["xi"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BOOL),
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("IsInf", ["x"], ["inf"]),
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("LessOrEqual", ["xi", "one"], ["small"]),
        helper.make_node("Or", ["nan", "pos"], ["either"]),
        helper.make_node("And", ["xb", "either"], ["both"]),
        helper.make_node("Not", ["both"], ["neither"]),
        helper.make_node("Where", ["neither", "xf", "zero"], ["wh"]),
        helper.make_node("GatherElements", ["x", "idx"], ["ge"], axis=1),
    ]
    inits = {"s0": np.array([3, -1], i64), "e0": np.array([0, -100], i64),
             "a0": np.array([1, -1], i64), "p0": np.array([-1, -2], i64),
             "s1": np.array([1], i64), "e1": np.array([2], i64),
             "shape": np.array([2, 3, 1, 5], i64), "zero": np.array(0.0, np.float32),
             "one": np.array(1, i64),
             "idx": np.random.RandomState(1).randint(-4, 4, (3, 6, 5)).astype(i64)}
    outs = ["sl", "ex", "xf", "xb", "inf", "small", "wh", "ge"]
    path = _save(tmp_path, nodes, inits, outs)
    x = np.random.RandomState(0).randn(3, 4, 5).astype(np.float32) * 3
    x[0, 1, 2], x[1, 2, 3], x[2, 0, 0] = np.nan, np.inf, -np.inf
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = InferSession(0, convert(path, tmp_path / "g")).infer([x])
    for name, g, e in zip(outs, got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        np.testing.assert_array_equal(g, e, err_msg=name)


def test_gather_elements_index_out_of_range_fails_the_run(tmp_path):
    nodes = [helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=0)]
    path = _save(tmp_path, nodes, {}, ["y"], x_shape=(4,))
    graph = onnx.load(path)
    graph.graph.input.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [3]))
    onnx.save(graph, path)
    session = InferSession(0, convert(path, tmp_path / "g"))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(session.infer([x, np.array([3, -4, 1])])[0], [3, 0, 1])
    with pytest.raises(AclError, match="index 4 is out of range for a dimension of size 4"):
        session.infer([x, np.array([0, 4, 1])])


def test_atc_refuses_math_on_integers(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    path = _save(tmp_path, nodes, {}, ["y"], x_type=TensorProto.INT64)
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'g'}",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1
    assert "input x is int64; the engine takes float32 there" in r.stderr


def test_atc_refuses_slice_bounds_known_only_at_run_time(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["n"], to=TensorProto.INT64),
             helper.make_node("ReduceMax", ["n"], ["end"], keepdims=1, axes=[0, 1, 2]),
             helper.make_node("Reshape", ["end", "one"], ["end1"]),
             helper.make_node("Slice", ["x", "zero", "end1"], ["y"])]
    path = _save(tmp_path, nodes, {"one": np.array([1], np.int64),
                                   "zero": np.array([0], np.int64)}, ["y"])
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'g'}",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1
    assert "Slice's starts / ends / axes / steps are not constants" in r.stderr


class MaskedAttention(torch.nn.Module):
    """Attention with a constant mask: `rows` hides every key of query row 0 (not fusable: the
    fused kernel would give 0 there, softmax of finfo.min gives a uniform row)."""

    def __init__(self, hide_a_row):
        super().__init__()
        mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
        if hide_a_row:
            mask[0] = False
        self.register_buffer("mask", mask)

    def forward(self, x):
        q, k, v = x, x * 0.5, x + 1.0
        s = (q @ k.transpose(-1, -2)) / 4.0
        s = s.masked_fill(~self.mask, torch.finfo(torch.float32).min)
        return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("hide_a_row, fused", [(False, 1), (True, 0)])
def test_masked_attention_fuses_only_when_every_row_sees_a_key(tmp_path, hide_a_row, fused):
    x = torch.randn(2, 3, 8, 16)
    path = dynamo_export(MaskedAttention(hide_a_row), x, tmp_path / "att.onnx")
    om_path = convert(path, tmp_path / "att")
    assert engine_ops(om_path).count("Attention") == fused
    got, expected = run_both(path, om_path, x.numpy())
    np.testing.assert_allclose(got[0], expected[0], rtol=TOL, atol=TOL)
