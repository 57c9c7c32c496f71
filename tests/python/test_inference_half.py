"""float16 and bfloat16 ONNX models through atc and ais_bench's InferSession.

The engine computes each op in float32 and rounds its result to the model's type (atc marks
the ops; docs/inference.md, "16-bit models"). References: onnxruntime for float16 (its CPU
kernels also compute in float32 per op and round), the torch CPU result for bfloat16
(onnxruntime's CPU provider lacks bfloat16 kernels for most ops). Both sides round at every
op boundary, in places that need not coincide (atc fuses Conv+BN, MatMul+bias, ...), so each
comparison allows a few units of the type's rounding step relative to the output's scale:
float16 keeps 11 significant bits (step 2^-11 ~ 4.9e-4), bfloat16 8 (2^-8 ~ 3.9e-3). For the
depth of these models (3-4 rounded layers, reductions over <= 288 terms computed in float32),
8 steps is ample; a graph run in plain float32 or without rounding would still pass, so the
tests also check that the result differs from float32 by about the expected rounding."""

import numpy as np
import pytest
import torch
from torch import nn

from onnx_models import CNN, convert

ml_dtypes = pytest.importorskip("ml_dtypes")

STEP = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class HalfMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 128), nn.Linear(128, 96), nn.Linear(96, 10)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


def _export(model, x, path):
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17, do_constant_folding=False)
    return str(path)


def _session(om_path):
    from ais_bench.infer.interface import InferSession
    return InferSession(0, om_path)


def _np(t: torch.Tensor, kind: str) -> np.ndarray:
    if kind == "bfloat16":
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _close(ours: np.ndarray, ref: np.ndarray, kind: str, steps: float = 8.0) -> float:
    ours, ref = ours.astype(np.float64), ref.astype(np.float64)
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    assert err <= steps * STEP[kind], f"{kind}: max error {err:.3g} of the output's scale"
    return err


@pytest.fixture(params=["mlp", "cnn"])
def model_case(request):
    torch.manual_seed(3)
    if request.param == "mlp":
        return request.param, HalfMLP().eval(), (8, 64)
    return request.param, CNN().eval(), (2, 3, 32, 32)


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_half_model_converts_and_runs(model_case, kind, tmp_path):
    name, model32, shape = model_case
    torch.manual_seed(4)
    x32 = torch.randn(*shape)
    model = model32.to(TORCH[kind])
    x = x32.to(TORCH[kind])
    path = _export(model, x, tmp_path / f"{name}_{kind}.onnx")
    om = convert(path, tmp_path / f"{name}_{kind}", f"--input_shape=x:{','.join(map(str, shape))}")
    session = _session(om)
    ins, outs = session.get_inputs(), session.get_outputs()
    assert ins[0].datatype == kind and outs[0].datatype == kind
    assert ins[0].size == x.numel() * 2
    y, = session.infer([_np(x, kind)])
    assert y.dtype == np.dtype(kind) and list(y.shape) == list(outs[0].shape)
    if kind == "float16":
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"x": x.numpy()})[0]
    else:
        with torch.no_grad():
            ref = model(x).float().numpy()
    _close(y, ref, kind)
    # Rounding happened: the float32 model on the same (16-bit) weights and input differs.
    with torch.no_grad():
        y32 = model.float()(x.float()).numpy()
    diff = np.abs(y.astype(np.float64) - y32).max() / np.abs(y32).max()
    assert 0 < diff <= 8 * STEP[kind]
    session.free_resource()


def test_half_input_of_the_wrong_dtype_is_refused(tmp_path):
    torch.manual_seed(3)
    model = HalfMLP().eval().half()
    x = torch.randn(8, 64).half()
    om = convert(_export(model, x, tmp_path / "m.onnx"), tmp_path / "m")
    session = _session(om)
    with pytest.raises(ValueError, match="float16"):
        session.infer([x.float().numpy()])
    session.free_resource()


def test_mixed_float16_and_bfloat16_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 4], [0.0] * 16)
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
                               helper.make_node("MatMul", ["xb", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 4])],
                              [w])
    path = tmp_path / "mixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    from onnx_models import atc
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'mixed'}",
            "--soc_version=Ascend910B2")
    assert r.returncode == 1
    assert "mixes float16 and bfloat16" in r.stderr


def test_half_model_with_batch_gears(tmp_path):
    """A float16 CNN converted with --dynamic_batch_size: every gear takes and returns float16
    and matches onnxruntime within the same 8 rounding steps."""
    import onnxruntime as ort
    torch.manual_seed(3)
    model = CNN().eval().half()
    path = str(tmp_path / "cnn_fp16_dyn.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(2, 3, 32, 32).half(),), path, dynamo=False,
                          input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    om = convert(path, tmp_path / "cnn_fp16_dyn", "--input_shape=x:-1,3,32,32",
                 "--dynamic_batch_size=1,4")
    session, ref = _session(om), ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b in (4, 1):
        x = torch.randn(b, 3, 32, 32).half().numpy()
        y, = session.infer([x], mode="dymbatch")
        assert y.dtype == np.float16 and y.shape == (b, 10)
        _close(y, ref.run(None, {"x": x})[0], "float16")
    session.free_resource()
