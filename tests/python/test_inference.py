"""Offline inference end to end: PyTorch -> ONNX -> atc -> .om -> the engine through AscendCL's
model API -> ais_bench, compared with onnxruntime's CPU provider on the same ONNX file."""

import os
import subprocess
import sys

import numpy as np
import pytest

from ais_bench._acl import AclError  # noqa: E402
from ais_bench.infer.interface import InferSession  # noqa: E402
from onnx_models import (DAMAGED_OM, TOL, WithReduceMean, atc, convert, export, make_models,  # noqa: E402
                         onnxruntime_run)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder"])
def test_model_matches_onnxruntime(models, name):
    onnx_path, om_path, shape = models[name]
    x = np.random.RandomState(0).randn(*shape).astype(np.float32)
    expected = onnxruntime_run(onnx_path, x)
    session = InferSession(0, om_path)
    assert [t.shape for t in session.get_inputs()] == [list(shape)]
    assert [t.shape for t in session.get_outputs()] == [list(e.shape) for e in expected]
    for _ in range(2):  # the second run reuses the arena and buffers of the first
        got = session.infer([x])
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)
    session.free_resource()



def test_atc_input_shape_sets_the_batch(models, tmp_path):
    onnx_path = models["mlp"][0]
    om_path = convert(onnx_path, tmp_path / "mlp8", "--input_shape=x:8,32")
    # The exported graph says batch 4; --input_shape replaces it and shape inference carries
    # the new batch through every node.
    session = InferSession(0, om_path)
    assert session.get_inputs()[0].shape == [8, 32]
    x = np.random.RandomState(1).randn(8, 32).astype(np.float32)
    (got,) = session.infer([x])
    # onnxruntime keeps the file's batch of 4: the reference is two runs of 4 rows.
    expected = np.concatenate([onnxruntime_run(onnx_path, x[:4])[0],
                               onnxruntime_run(onnx_path, x[4:])[0]])
    np.testing.assert_allclose(got, expected, rtol=TOL, atol=TOL)
    r = atc(f"--model={onnx_path}", "--framework=5", "--output=x", "--soc_version=Ascend910B2",
            "--input_shape=y:1,32")
    assert r.returncode == 1 and "has no input of that name" in r.stderr



def test_gpt_decoder_matches_onnxruntime(models):
    """Token ids (int64) through embeddings (Gather), a split qkv, a causal mask (Where over a
    folded constant) and two decoder blocks."""
    onnx_path, om_path, shape = models["gpt"]
    session = InferSession(0, om_path)
    assert session.get_inputs()[0].datatype == "int64"
    ids = np.random.RandomState(0).randint(0, 50, shape).astype(np.int64)
    (got,) = session.infer([ids])
    np.testing.assert_allclose(got, onnxruntime_run(onnx_path, ids)[0], rtol=TOL, atol=TOL)
    bad = ids.copy()
    bad[1, 3] = 50  # the vocabulary has 50 tokens
    with pytest.raises(AclError, match="index 50 is out of range for a dimension of size 50"):
        session.infer([bad])
    (again,) = session.infer([ids])  # the failure was reported; the stream runs again
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("damage, message", DAMAGED_OM)
def test_damaged_om_is_refused(models, tmp_path, damage, message):
    data = open(models["mlp"][1], "rb").read()
    bad = tmp_path / "bad.om"
    bad.write_bytes(damage(data))
    with pytest.raises(AclError, match=message) as e:
        InferSession(0, str(bad))
    assert e.value.code == 100013  # ACL_ERROR_PARSE_MODEL



def test_fused_pool_of_a_one_wide_conv_output_is_refused_by_name(tmp_path):
    """atc fuses a 2x2 / stride 2 MaxPool into the Conv before it; where the convolution's
    output is one column wide, the pool halves it to none: the engine says so, naming the fused
    pool and both shapes, instead of blaming the convolution's window."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]),
         helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 0])], [w],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 2, 1])])
    path = tmp_path / "narrow.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    om_path = convert(path, tmp_path / "narrow")
    message = (r"fused 2x2 / stride 2 max pool halves the convolution's output \[1, 4, 2, 1\] "
               r"to \[1, 4, 1, 0\]")
    with pytest.raises(AclError, match=message):
        InferSession(0, om_path)


def test_missing_om_is_refused(tmp_path):
    with pytest.raises(AclError, match="cannot open the model file") as e:
        InferSession(0, str(tmp_path / "missing.om"))
    assert e.value.code == 100014  # ACL_ERROR_READ_MODEL_FAILURE



def test_infer_checks_feeds(models):
    session = InferSession(0, models["mlp"][1])
    with pytest.raises(ValueError, match=r"input x must be float32 of shape \[4, 32\]"):
        session.infer([np.zeros((3, 32), np.float32)])
    with pytest.raises(ValueError, match="1 inputs"):
        session.infer([np.zeros((4, 32), np.float32)] * 2)
    got = session.infer({"x": np.zeros((4, 32), np.float32)})
    assert got[0].shape == (4, 10)



def test_ais_bench_cli(models, tmp_path):
    onnx_path, om_path, shape = models["cnn"]
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    xs = [np.random.RandomState(i).randn(*shape).astype(np.float32) for i in range(2)]
    for i, x in enumerate(xs):
        np.save(inputs / f"sample{i}.npy", x)
    r = subprocess.run([sys.executable, "-m", "ais_bench", "--model", om_path, "--input",
                        str(inputs), "--output", str(outputs), "--outfmt", "NPY", "--loop", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Performance Summary" in r.stdout and "NPU_compute_time (ms)" in r.stdout
    assert "throughput 1000*batchsize.mean(2)" in r.stdout
    for i, x in enumerate(xs):
        got = np.load(outputs / f"sample{i}_0.npy")
        np.testing.assert_allclose(got, onnxruntime_run(onnx_path, x)[0], rtol=TOL, atol=TOL)



def test_checked_in_example_model_is_what_atc_writes(tmp_path):
    """examples/acl/mlp_infer.c runs examples/acl/tiny_mlp.om (ctest); it must stay what this
    atc writes for examples/acl/make_tiny_mlp.py's model."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "examples/acl/make_tiny_mlp.py"),
                        str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(root, "examples/acl/tiny_mlp.om"), "rb") as f:
        assert (tmp_path / "tiny_mlp.om").read_bytes() == f.read()



def test_more_ops_match_onnxruntime(tmp_path):
    """Ops the exported models do not reach, in one hand-built graph: MatMul whose batch
    broadcasts (one gemm per batch index), Transpose, Concat, Sub/Div/Pow with broadcasting,
    Clip, LeakyRelu, Exp/Log/Sqrt/Abs/Neg, LogSoftmax, AveragePool, GlobalAveragePool,
    ReduceSum (axes as an input, keepdims=0), ReduceMax (axes attribute)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(3)
    w = rng.randn(3, 5, 6).astype(np.float32)
    c = rng.rand(6).astype(np.float32) + 0.5
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),                       # [2,3,4,6]
        helper.make_node("Transpose", ["m"], ["t"], perm=[0, 1, 3, 2]),      # [2,3,6,4]
        helper.make_node("Div", ["m", "c"], ["d"]),
        helper.make_node("Sub", ["d", "m"], ["s"]),
        helper.make_node("Abs", ["s"], ["a"]),
        helper.make_node("Sqrt", ["a"], ["q"]),
        helper.make_node("Neg", ["q"], ["n"]),
        helper.make_node("Exp", ["n"], ["e"]),
        helper.make_node("Log", ["e"], ["l"]),
        helper.make_node("Clip", ["l", "lo", "hi"], ["cl"]),
        helper.make_node("LeakyRelu", ["m"], ["lr"], alpha=0.2),
        helper.make_node("Pow", ["cl", "two"], ["p"]),
        helper.make_node("Concat", ["p", "lr"], ["cat"], axis=3),            # [2,3,4,12]
        helper.make_node("LogSoftmax", ["cat"], ["ls"], axis=-1),
        helper.make_node("AveragePool", ["t"], ["ap"], kernel_shape=[2, 2], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["t"], ["gp"]),
        helper.make_node("ReduceSum", ["t", "axes"], ["rs"], keepdims=0),  # axes as an input
        helper.make_node("ReduceMax", ["m"], ["rm"], axes=[-2]),
    ]
    inits = [numpy_helper.from_array(v, n) for v, n in (
        (w, "w"), (c, "c"), (np.array(-0.5, np.float32), "lo"), (np.array(1.5, np.float32), "hi"),
        (np.array(2.0, np.float32), "two"), (np.array([1, -1], np.int64), "axes"))]
    graph = helper.make_graph(
        nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("ls", "ap", "gp", "rs", "rm")],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "ops.onnx")
    import onnx
    onnx.save(model, path)
    om_path = convert(path, tmp_path / "ops")
    x = rng.randn(2, 3, 4, 5).astype(np.float32)
    import onnxruntime as ort
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = InferSession(0, om_path).infer([x])
    assert [g.shape for g in got] == [(2, 3, 4, 12), (2, 3, 4, 3), (2, 3, 1, 1), (2, 6),
                                      (2, 3, 1, 6)]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)


def test_reduce_mean_model_matches_onnxruntime(tmp_path):
    path = export(WithReduceMean(), (2, 3, 8, 8), tmp_path / "mean.onnx")
    x = np.random.RandomState(4).randn(2, 3, 8, 8).astype(np.float32)
    (got,) = InferSession(0, convert(path, tmp_path / "mean")).infer([x])
    np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)


def test_c_program_builds_with_find_package(tmp_path):
    """examples/acl as a user's CMake project: find_package(ascendcl) through the toolkit
    layout of this install (make setup writes .venv/Ascend), then the program runs the
    checked-in model."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    toolkit = os.path.join(venv, "Ascend", "ascend-toolkit", "latest")
    assert os.path.isdir(toolkit), "no toolkit layout: make setup creates .venv/Ascend"
    cmake = os.path.join(os.path.dirname(sys.executable), "cmake")
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "acl")
    build = tmp_path / "build"
    r = subprocess.run([cmake, "-S", examples, "-B", str(build),
                        f"-DCMAKE_PREFIX_PATH={toolkit}/lib64/cmake"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(build / "mlp_infer"), os.path.join(examples, "tiny_mlp.om")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2x3 output matches the host reference" in r.stdout


def test_fused_layer_norm_matches_onnxruntime(tmp_path):
    import torch
    from onnx_models import Encoder
    torch.manual_seed(2)
    path = str(tmp_path / "enc14.onnx")
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), (torch.randn(2, 8, 32),), path, dynamo=False,
                          input_names=["x"], opset_version=14)
    x = np.random.RandomState(5).randn(2, 8, 32).astype(np.float32)
    (got,) = InferSession(0, convert(path, tmp_path / "enc14")).infer([x])
    np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)


def _reshaped(om_bytes, tensor_of, new_dims):
    """The model with one tensor's dims replaced (same byte size, valid file): the shapes
    contradict each other, which only the engine's per-node checks can see."""
    from atc import om
    model = om.parse(om_bytes)
    t = tensor_of(model)
    assert int(np.prod(new_dims)) * t.dtype.itemsize == t.nbytes
    t.dims = tuple(new_dims)
    return om.serialize(model)


@pytest.mark.parametrize("case, message", [
    # A weight of MatMul read with the wrong inner dimension.
    ("matmul_weight", "inner dimensions differ"),
    # An activation whose shape disagrees with the MatMul (+ fused Relu) that writes it.
    ("relu_output", "but its inputs give"),
])
def test_om_with_contradicting_shapes_is_refused(models, tmp_path, case, message):
    from atc import om
    data = open(models["mlp"][1], "rb").read()
    model = om.parse(data)
    if case == "matmul_weight":
        node = next(n for n in model.nodes if n.op == "MatMul")
        w = model.tensors[node.inputs[1]]
        bad = _reshaped(data, lambda m: m.tensors[node.inputs[1]], w.dims[::-1] if
                        w.dims[0] != w.dims[1] else (w.dims[0] * 2, w.dims[1] // 2))
    else:
        node = next(n for n in model.nodes if n.op == "MatMul" and
                    n.attrs.get("activation") == "Relu")
        out = model.tensors[node.outputs[0]]
        bad = _reshaped(data, lambda m: m.tensors[node.outputs[0]],
                        (out.dims[0] * 2, out.dims[1] // 2))
    path = tmp_path / "bad.om"
    path.write_bytes(bad)
    with pytest.raises(AclError, match=message):
        InferSession(0, str(path))


@pytest.mark.parametrize("batch", [1, 5, 9, 64, 131])
def test_linear_layers_with_packed_weights_match_onnxruntime(tmp_path, batch):
    """Linear layers whose weight is B (engine/ops.cpp MatMulKernel: B packed into the GEMM's
    panels at load, bias and fused activation applied per block of C as the GEMM finishes it):
    the decode-sized rows (the GEMV path), rows around the 14-row tile, a 3-D input (MatMul +
    Add), each fused activation atc knows, widths around the 32-column panel, K past one
    384-deep block."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(400, 33)
            self.b = nn.Linear(33, 70)
            self.c = nn.Linear(70, 32, bias=False)
            self.d = nn.Linear(32, 5)

        def forward(self, x):
            h = torch.relu(self.a(x))
            h = torch.sigmoid(self.b(h))
            h = torch.tanh(self.c(h))
            return self.d(h)

    torch.manual_seed(batch)
    for shape in ((batch, 400), (2, batch, 400)):
        path = export(Net().eval(), shape, tmp_path / f"lin{len(shape)}.onnx")
        x = np.random.RandomState(batch).randn(*shape).astype(np.float32)
        session = InferSession(0, convert(path, tmp_path / f"lin{len(shape)}"))
        for _ in range(2):  # the packed weights serve every run
            (got,) = session.infer([x])
            np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
        session.free_resource()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_linear_gelu_is_fused_and_matches_onnxruntime(tmp_path, approximate):
    """A Linear followed by GELU (erf as exported in five ops, or tanh): atc fuses the GELU into
    the MatMul (activation Gelu / GeluTanh, no node of its own), the engine applies it to each
    block of C as the GEMM finishes it; outputs equal onnxruntime's, at rows on and off the
    8- and 14-row panels, with a 3-D input."""
    import json

    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff1 = nn.Linear(128, 200)
            self.ff2 = nn.Linear(200, 64)

        def forward(self, x):
            return self.ff2(nn.functional.gelu(self.ff1(x), approximate=approximate))

    torch.manual_seed(0)
    for shape in ((64, 128), (3, 37, 128)):
        path = export(Net().eval(), shape, tmp_path / f"gelu{len(shape)}.onnx")
        om_path = convert(path, tmp_path / f"gelu{len(shape)}")
        js = tmp_path / f"gelu{len(shape)}.json"
        r = atc("--mode=1", f"--om={om_path}", f"--json={js}")
        assert r.returncode == 0, r.stderr
        nodes = json.loads(js.read_text())["nodes"]
        assert [n["op"] for n in nodes] == ["MatMul", "MatMul"]
        assert nodes[0]["attrs"]["activation"] == ("GeluTanh" if approximate == "tanh" else "Gelu")
        x = np.random.RandomState(1).randn(*shape).astype(np.float32) * 2
        session = InferSession(0, om_path)
        (got,) = session.infer([x])
        np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
        session.free_resource()


@pytest.mark.parametrize("batch", [1, 3])
def test_direct_convolutions_match_onnxruntime(tmp_path, batch):
    """Convolutions the kernel library runs as direct convolutions (float32, stride 1 along W):
    a 3-channel first convolution on rows of 37 (two 16-pixel segments and a masked 5), a 3x5
    kernel with asymmetric padding and a stride along H, dilation with groups, channel counts
    off the 8-row panels, ReLU fused by atc and not; outputs equal onnxruntime's."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 20, 3, padding=1)
            self.c2 = nn.Conv2d(20, 13, (3, 5), stride=(2, 1), padding=(1, 2))
            self.c3 = nn.Conv2d(13, 12, 3, padding=2, dilation=2, groups=1)
            self.c4 = nn.Conv2d(12, 12, 3, padding=1, groups=4, bias=False)

        def forward(self, x):
            h = torch.relu(self.c1(x))
            h = torch.relu(self.c2(h))
            h = self.c3(h)
            return self.c4(torch.relu(h))

    shape = (batch, 3, 19, 37)
    path = export(Net().eval(), shape, tmp_path / "direct.onnx")
    session = InferSession(0, convert(path, tmp_path / "direct"))
    x = np.random.RandomState(batch).randn(*shape).astype(np.float32)
    (got,) = session.infer([x])
    np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
    session.free_resource()


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_max_pool_fusion_matches_onnxruntime(tmp_path, batch):
    """atc fuses Conv (+ Relu) + a 2x2 / stride 2 MaxPool into the Conv (attribute max_pool:
    the engine's direct convolution pools each register tile before its store): with ReLU and
    without, on odd sizes (19 x 37: the pool drops the last conv row and column), with a stride
    along W (the kernel's fallback: a temporary then max_pool2d). Left alone: a MaxPool after
    a Sigmoid, one with stride 1, and one whose conv output has another reader. Outputs equal
    onnxruntime's."""
    import json

    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 20, 3, padding=1)
            self.c2 = nn.Conv2d(20, 13, 3, padding=1)
            self.c3 = nn.Conv2d(13, 16, 3, stride=(1, 2), padding=1)
            self.c4 = nn.Conv2d(16, 8, 3, padding=1)
            self.c5 = nn.Conv2d(8, 8, 3, padding=1)
            self.c6 = nn.Conv2d(8, 8, 1)

        def forward(self, x):
            h = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)           # fused
            h = nn.functional.max_pool2d(self.c2(h), 2)                       # fused, no relu
            h = nn.functional.max_pool2d(torch.relu(self.c3(h)), 2)           # fused, fallback
            h = nn.functional.max_pool2d(torch.sigmoid(self.c4(h)), 2, 1)     # stride 1: not
            c = self.c5(h)
            h = nn.functional.max_pool2d(c, 2) + c[:, :, ::2, ::2]            # two readers: not
            return torch.relu(self.c6(h))

    shape = (batch, 3, 38, 75)
    path = export(Net().eval(), shape, tmp_path / "pool.onnx")
    om_path = convert(path, tmp_path / "pool")
    js = tmp_path / "pool.json"
    r = atc("--mode=1", f"--om={om_path}", f"--json={js}")
    assert r.returncode == 0, r.stderr
    nodes = json.loads(js.read_text())["nodes"]
    convs = [n for n in nodes if n["op"] == "Conv"]
    assert [n["attrs"]["max_pool"] for n in convs] == [2, 2, 2, 0, 0, 0]
    assert [n["op"] for n in nodes].count("MaxPool") == 2
    session = InferSession(0, om_path)
    x = np.random.RandomState(batch).randn(*shape).astype(np.float32)
    for _ in range(2):
        (got,) = session.infer([x])
        np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
    session.free_resource()


@pytest.mark.parametrize("c_in,c_out,size,relu,pool", [
    (16, 8, (8, 8), True, False),      # 4 tiles a row
    (32, 64, (32, 32), True, True),    # the benchmark CNN's 32 -> 64 (+ ReLU + MaxPool)
    (64, 128, (16, 16), True, True),   # its 64 -> 128
    (17, 13, (11, 37), False, False),  # odd sizes, an edge panel, no activation
    (20, 9, (9, 10), True, True),      # odd rows under the pool
])
def test_winograd_conv_within_bound_of_float64(tmp_path, c_in, c_out, size, relu, pool):
    """The engine computes 3x3 / stride 1 float32 convolutions with >= 16 input channels by
    Winograd F(2x2, 3x3) (Conv2dParams::winograd): not bit-equal to the direct convolution, so
    each output is held to a float64 reference within 16 float32 ulps (2^-24) of the sum of
    |w x| + |b| over its taps (the C++ test's bound, docs/inference.md), and to onnxruntime
    within the suite's TOL; batch 2."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

        def forward(self, x):
            h = self.conv(x)
            h = torch.relu(h) if relu else h
            return nn.functional.max_pool2d(h, 2) if pool else h

    torch.manual_seed(c_in)
    net = Net().eval()
    shape = (2, c_in, *size)
    path = export(net, shape, tmp_path / "wino.onnx")
    session = InferSession(0, convert(path, tmp_path / "wino"))
    x = np.random.RandomState(c_out).randn(*shape).astype(np.float32)
    (got,) = session.infer([x])
    session.free_resource()
    np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
    w = net.conv.weight.detach().double()
    b = net.conv.bias.detach().double()
    xd = torch.from_numpy(x).double()
    ref = nn.functional.conv2d(xd, w, b, padding=1)
    mag = nn.functional.conv2d(xd.abs(), w.abs(), b.abs(), padding=1)
    if relu:
        ref = torch.relu(ref)
    if pool:  # the bound of the window's largest magnitude holds for the pooled value
        ref = nn.functional.max_pool2d(ref, 2)
        mag = nn.functional.max_pool2d(mag, 2)
    err = (torch.from_numpy(got).double() - ref).abs()
    assert (err <= 16 * 2.0 ** -24 * mag).all(), float((err / mag).max() / 2.0 ** -24)


@pytest.mark.parametrize("heads,tokens", [(3, 7), (4, 16)])
def test_attention_reads_and_writes_through_folded_transposes(tmp_path, heads, tokens):
    """The heads' split ([B, S, H, D] -> [B, H, S, D] for q, k and v, k's as one [0, 2, 3, 1]
    Transpose for q @ k^T) and merge around attention are folded by atc into the Attention
    node (perm_q / perm_k / perm_v / perm_out: no Transpose node left), and the engine reads
    and writes through strided views; outputs equal onnxruntime's (batch 2, odd and even
    token counts, head dim 8)."""
    import json

    from onnx_models import Encoder

    torch_model = Encoder(heads * 8, heads)
    shape = (2, tokens, heads * 8)
    path = export(torch_model.eval(), shape, tmp_path / "enc.onnx")
    om_path = convert(path, tmp_path / "enc")
    js = tmp_path / "enc.json"
    r = atc("--mode=1", f"--om={om_path}", f"--json={js}")
    assert r.returncode == 0, r.stderr
    nodes = json.loads(js.read_text())["nodes"]
    assert "Transpose" not in [n["op"] for n in nodes]
    (att,) = [n for n in nodes if n["op"] == "Attention"]
    assert att["attrs"]["perm_q"] == att["attrs"]["perm_v"] == [0, 2, 1, 3]
    assert att["attrs"]["perm_k"] == [0, 2, 3, 1] and att["attrs"]["perm_out"] == [0, 2, 1, 3]
    x = np.random.RandomState(heads).randn(*shape).astype(np.float32)
    session = InferSession(0, om_path)
    for _ in range(2):
        (got,) = session.infer([x])
        np.testing.assert_allclose(got, onnxruntime_run(path, x)[0], rtol=TOL, atol=TOL)
    session.free_resource()
