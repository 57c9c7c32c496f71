"""atc: ONNX -> .om conversion, its passes, its errors and its determinism; the .om reader of
`atc --mode=1`. The engine side is test_inference.py."""

import json

import numpy as np
import pytest

from onnx_models import DAMAGED_OM, WithCumSum, atc, convert, export, make_models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("models"))


def test_cnn_passes_fold_and_fuse(models, tmp_path):
    """The CNN's BNs are in the ONNX file (exported without folding); atc must fold bn1/bn2
    into their convs, turn bn3 into a scale-shift, fuse the activations and share memory."""
    _, om_path, _ = models["cnn"]
    js = tmp_path / "cnn.json"
    r = atc("--mode=1", f"--om={om_path}", f"--json={js}")
    assert r.returncode == 0, r.stderr
    dump = json.loads(js.read_text())
    ops = [n["op"] for n in dump["nodes"]]
    assert ops.count("BatchNormalization") == 1  # bn3 only; bn1 and bn2 folded
    assert "Relu" not in ops and "Sigmoid" not in ops[:3]  # fused into conv1 / conv3
    assert [n["attrs"]["activation"] for n in dump["nodes"] if n["op"] == "Conv"] == [
        "Relu", "", "Relu"]
    # conv1's 2x2 max pool is fused into it; the average pool stays.
    assert [n["attrs"]["max_pool"] for n in dump["nodes"] if n["op"] == "Conv"] == [2, 0, 0]
    assert "MaxPool" not in ops and "AveragePool" in ops
    assert ops[-1] == "MatMul" and dump["nodes"][-1]["inputs"][2]  # the classifier's bias
    # The classifier's Gemm (transB=1, a [10, 272] weight) at batch 2 has at most 8 rows:
    # atc gives its GEMM the weight as [N, K] = [10, 272] read transposed, the layout of the
    # kernel's few-row (dot product) path; a larger batch gets [272, 10] (packed rows).
    fc = dump["nodes"][-1]
    assert fc["attrs"]["trans_b"] == 1
    weight = next(t for t in dump["tensors"] if t["name"] == fc["inputs"][1])
    assert weight["storage"] == "weight" and weight["shape"] == [10, 272]
    arena = dump["memory_plan"]["arena_bytes"]
    unshared = sum(t["bytes"] for t in dump["tensors"] if t["storage"] == "arena")
    assert arena < unshared  # buffers were reused
    assert dump["format"] == {"magic": "SIMNPUOM", "version": 1}



def test_atc_is_deterministic(models, tmp_path):
    onnx_path, om_path, _ = models["cnn"]
    again = convert(onnx_path, tmp_path / "again")
    with open(om_path, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()



def test_atc_refuses_unsupported_op(tmp_path):
    path = export(WithCumSum(), (1, 3, 8, 8), tmp_path / "cumsum.onnx")
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'cumsum'}",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1
    assert "ATC run failed" in r.stderr
    assert "'CumSum'" in r.stderr and "opset 17" in r.stderr and "node '" in r.stderr
    assert not (tmp_path / "cumsum.om").exists()



@pytest.mark.parametrize("framework, reason", [("3", "TensorFlow"), ("7", "must be")])
def test_atc_refuses_other_frameworks(models, framework, reason):
    r = atc(f"--model={models['mlp'][0]}", f"--framework={framework}", "--output=x",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1
    assert f"E10001: Value [{framework}] for parameter [--framework] is invalid" in r.stderr
    assert reason in r.stderr



def test_atc_refuses_a_file_that_is_not_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage" * 10)
    r = atc(f"--model={bad}", "--framework=5", f"--output={tmp_path / 'bad'}",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1 and "not a readable ONNX model" in r.stderr




@pytest.mark.parametrize("damage, message", DAMAGED_OM)
def test_mode1_refuses_damaged_om(models, tmp_path, damage, message):
    data = open(models["mlp"][1], "rb").read()
    bad = tmp_path / "bad.om"
    bad.write_bytes(damage(data))
    r = atc("--mode=1", f"--om={bad}", f"--json={tmp_path / 'bad.json'}")
    assert r.returncode == 1 and "ATC run failed" in r.stderr
    assert message in r.stderr


def test_decomposed_layer_norm_and_gelu_are_fused(tmp_path):
    """Below opset 17 the exporter spells LayerNorm out (ReduceMean, Sub, Pow, ReduceMean,
    Add, Sqrt, Div, Mul, Add); atc puts the LayerNormalization back, and the GELU too."""
    import torch
    from onnx_models import Encoder
    torch.manual_seed(2)
    path = tmp_path / "enc14.onnx"
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), (torch.randn(2, 8, 32),), str(path), dynamo=False,
                          input_names=["x"], opset_version=14)
    om_path = convert(path, tmp_path / "enc14")
    js = tmp_path / "enc14.json"
    assert atc("--mode=1", f"--om={om_path}", f"--json={js}").returncode == 0
    nodes = json.loads(js.read_text())["nodes"]
    ops = [n["op"] for n in nodes]
    assert ops.count("LayerNormalization") == 2
    assert "ReduceMean" not in ops and "Sqrt" not in ops and "Pow" not in ops
    # and the exported erf GELU (Div, Erf, Add, Mul, Mul) is one Gelu, fused into the MatMul
    # (ff1) that feeds it
    assert "Gelu" not in ops and "Erf" not in ops
    assert [n["attrs"].get("activation") for n in nodes if n["op"] == "MatMul"].count("Gelu") == 1


def _round16(a, kind):
    """float32 -> float16 / bfloat16 (to nearest even) -> float32, as the cube unit sees it."""
    a = np.asarray(a, np.float32)
    if kind == "float16":
        return a.astype(np.float16).astype(np.float32)
    bits = a.view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("mode, kind, tol", [("allow_fp32_to_fp16", "float16", 2e-3),
                                             ("allow_fp32_to_bf16", "bfloat16", 2e-2)])
def test_precision_mode_runs_matrix_ops_in_16_bits(models, tmp_path, mode, kind, tol):
    """The MLP's three Linear layers (MatMul + bias + fused ReLU / Tanh) take 16-bit operands
    and give a 16-bit result; softmax stays float32. Reference: the same steps in NumPy."""
    import onnx
    from onnx import numpy_helper
    from ais_bench.infer.interface import InferSession
    onnx_path = models["mlp"][0]
    om16 = convert(onnx_path, tmp_path / "mlp16", f"--precision_mode={mode}")
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(onnx_path).graph.initializer}
    layers = [(weights[f"fc{k}.weight"], weights[f"fc{k}.bias"]) for k in (1, 2, 3)]
    x = np.random.RandomState(0).randn(4, 32).astype(np.float32)
    h = x
    for (w, b), act in zip(layers, (lambda v: np.maximum(v, 0), np.tanh, lambda v: v)):
        acc = _round16(h, kind).astype(np.float64) @ _round16(w, kind).T.astype(np.float64)
        h = _round16(act((acc + b).astype(np.float32)), kind)
    e = np.exp(h - h.max(-1, keepdims=True))
    expected = e / e.sum(-1, keepdims=True)
    (got,) = InferSession(0, om16).infer([x])
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol)
    (full,) = InferSession(0, models["mlp"][1]).infer([x])
    assert np.abs(got - full).max() > 1e-6  # the 16-bit rounding did happen
    assert np.abs(got - full).max() < 10 * tol


@pytest.mark.parametrize("mode, reason", [
    ("force_fp16", "vector ops in float32 only"), ("allow_mix_precision", "vector ops"),
    ("fp8_please", "unknown precision mode")])
def test_precision_modes_that_lower_vector_ops_are_refused(models, mode, reason):
    r = atc(f"--model={models['mlp'][0]}", "--framework=5", "--output=x",
            "--soc_version=Ascend910B2", f"--precision_mode={mode}")
    assert r.returncode == 1
    assert f"Value [{mode}] for parameter [--precision_mode] is invalid" in r.stderr
    assert reason in r.stderr and "allow_fp32_to_fp16" in r.stderr
