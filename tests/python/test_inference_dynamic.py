"""Dynamic gears as ATC makes them: --dynamic_batch_size and --dynamic_dims build one planned
graph per gear into the .om; the engine runs the gear the input selects (ais_bench's
infer(mode="dymbatch" / "dymdims")) with one arena sized for the largest gear. Each gear is
compared with onnxruntime running the same ONNX file (dynamic axes) within 1e-4, as the
static models of test_inference.py."""

import json

import numpy as np
import pytest
import torch

from onnx_models import (CNN, KV_INPUTS, KVCacheDecoder, atc, convert, export_kv_decoder,
                         kv_decoder_input_shape)

TOL = 1e-4
BATCHES = (1, 2, 4, 8)


def _session(om_path):
    from ais_bench.infer.interface import InferSession
    return InferSession(0, str(om_path))


def _ort(path):
    import onnxruntime as ort
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _export_cnn(path):
    torch.manual_seed(1)
    model = CNN().eval()
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(2, 3, 32, 32),), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return str(path)


@pytest.fixture(scope="module")
def cnn_gears(tmp_path_factory):
    d = tmp_path_factory.mktemp("dyn")
    path = _export_cnn(d / "cnn.onnx")
    om = convert(path, d / "cnn", "--input_shape=x:-1,3,32,32",
                 "--dynamic_batch_size=" + ",".join(map(str, BATCHES)))
    return path, om, d


def test_dynamic_batch_runs_every_gear(cnn_gears):
    path, om, _ = cnn_gears
    session, ref = _session(om), _ort(path)
    # The buffers are the largest gear's.
    assert session.get_inputs()[0].shape == [8, 3, 32, 32]
    rng = np.random.default_rng(0)
    for b in (4, 1, 8, 2, 1):  # any order: no re-planning between calls
        x = rng.standard_normal((b, 3, 32, 32), dtype=np.float32)
        y, = session.infer([x], mode="dymbatch")
        want, = ref.run(None, {"x": x})
        assert y.shape == (b, 10)
        np.testing.assert_allclose(y, want, rtol=TOL, atol=TOL)
    session.free_resource()


def test_dynamic_batch_om_holds_one_plan_per_gear(cnn_gears, tmp_path):
    _, om, _ = cnn_gears
    js = tmp_path / "cnn.json"
    r = atc("--mode=1", f"--om={om}", f"--json={js}")
    assert r.returncode == 0, r.stderr
    dump = json.loads(js.read_text())
    assert dump["format"]["version"] == 2
    assert dump["dynamic"]["mode"] == "dynamic_batch_size"
    assert sorted(g[0] for g in dump["dynamic"]["gears"]) == list(BATCHES)
    assert dump["dynamic"]["gears"][0] == [8]  # the largest first: its sizes serve all
    arenas = dump["dynamic"]["arena_bytes"]
    assert arenas[0] == max(arenas) and len(set(arenas)) == 4
    assert [g["inputs"][0]["shape"][0] for g in dump["gears"]] == [
        g[0] for g in dump["dynamic"]["gears"][1:]]
    # One weights section: every gear's weight tensors point into it, shared.
    w0 = {t["name"]: t["offset"] for t in dump["tensors"] if t["storage"] == "weight"}
    for g in dump["gears"]:
        wg = {t["name"]: t["offset"] for t in g["tensors"] if t["storage"] == "weight"}
        assert wg == w0


def test_batch_matching_no_gear_is_refused(cnn_gears):
    from ais_bench._acl import AclError
    _, om, _ = cnn_gears
    session = _session(om)
    x = np.zeros((3, 3, 32, 32), np.float32)
    with pytest.raises(AclError, match=r"batch size 3 is not one of the model's gears \(8,4,2,1"):
        session.infer([x], mode="dymbatch")
    with pytest.raises(ValueError, match="dymbatch"):
        session.infer([x[:1]])  # the static mode on a model with gears
    # The session still works after the refusals.
    y, = session.infer([x[:2]], mode="dymbatch")
    assert y.shape == (2, 10)
    session.free_resource()


@pytest.mark.parametrize("args, code, words", [
    (["--input_shape=x:2,-1,32,32", "--dynamic_batch_size=1,2"], "E10018",
     "only batch size N can be -1"),
    (["--input_shape=x:2,3,32,32", "--dynamic_batch_size=1,2"], "E10031", "batch size of -1"),
    (["--input_shape=x:-1,3,32,32", "--dynamic_batch_size=1,0"], "E10001", "positive"),
    (["--input_shape=x:-1,3,32,32", "--dynamic_batch_size=1,2", "--dynamic_dims=1;2"],
     "E10001", "mutually exclusive"),
    (["--input_shape=x:-1,3,-1,32", "--dynamic_dims=1;2"], "E10001",
     "each gear must give 2 values"),
    (["--input_shape=x:-1,3,32,32"], "E10002", "--dynamic_batch_size or --dynamic_dims"),
    (["--input_shape_range=x:[1~8],3,32,32"], "E10001", "use --dynamic_dims"),
])
def test_bad_gear_options_are_refused(cnn_gears, tmp_path, args, code, words):
    path, _, _ = cnn_gears
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'bad'}",
            "--soc_version=Ascend910B2", *args)
    assert r.returncode == 1, r.stdout
    assert code in r.stderr and words in r.stderr, r.stderr
    assert not (tmp_path / "bad.om").exists()


def test_dynamic_dims_on_a_sequence_axis(tmp_path):
    """--input_shape="x:1,-1,32" --dynamic_dims="16;32;64" on the encoder layer."""
    from onnx_models import Encoder
    torch.manual_seed(1)
    model = Encoder().eval()
    path = tmp_path / "enc.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, 16, 32),), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {1: "S"}, "y": {1: "S"}})
    om = convert(path, tmp_path / "enc", "--input_shape=x:1,-1,32", "--dynamic_dims=16;32;64")
    session, ref = _session(om), _ort(path)
    rng = np.random.default_rng(1)
    for s in (32, 16, 64):
        x = rng.standard_normal((1, s, 32), dtype=np.float32)
        y, = session.infer({"x": x}, mode="dymdims")
        np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=TOL, atol=TOL)
    from ais_bench._acl import AclError
    with pytest.raises(AclError, match="match none of the model's gears.*64;32;16"):
        session.infer([np.zeros((1, 24, 32), np.float32)], mode="dymdims")
    session.free_resource()


def test_kv_cache_decoder_prefill_and_decode_loop(tmp_path):
    """A GPT-2-shaped decoder with a static KV cache: a prefill gear (8 prompt tokens) and a
    decode gear (1 token), greedy decoding 12 tokens; every step's logits and caches against
    onnxruntime fed the same inputs, and the greedy tokens identical."""
    torch.manual_seed(5)
    model = KVCacheDecoder()
    path = export_kv_decoder(model, tmp_path / "kv.onnx", prompt=8)
    om = convert(path, tmp_path / "kv", f"--input_shape={kv_decoder_input_shape(model)}",
                 "--dynamic_dims=8,8,8,8;1,1,1,1")
    session, ref = _session(om), _ort(path)
    ids = torch.randint(0, 96, (1, 8))
    ck, cv = model.empty_cache()
    ck, cv = ck.numpy(), cv.numpy()
    rk, rv = ck, cv
    tokens, ref_tokens, start = [], [], 0
    cur = ids
    for step in range(13):
        pos, place, mask = model.step_inputs(cur, start)
        feeds = [cur.numpy(), pos.numpy(), place.numpy(), mask.numpy()]
        logits, ck, cv = session.infer(feeds + [ck, cv], mode="dymdims")
        want, rk, rv = ref.run(None, dict(zip(KV_INPUTS, feeds + [rk, rv])))
        assert logits.shape == (1, cur.shape[1], 96)
        np.testing.assert_allclose(logits, want, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(ck, rk, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(cv, rv, rtol=TOL, atol=TOL)
        start += cur.shape[1]
        nxt, ref_nxt = int(logits[0, -1].argmax()), int(want[0, -1].argmax())
        tokens.append(nxt)
        ref_tokens.append(ref_nxt)
        cur = torch.tensor([[nxt]])
    assert tokens == ref_tokens
    assert start == 8 + 12
    # The cache really is filled: slots 0..19 written, the rest still zero.
    assert np.abs(ck[:, :, :, :20]).min(axis=-1).max() > 0
    assert not ck[:, :, :, 20:].any()
    session.free_resource()


def test_dims_mode_on_a_static_model_is_refused(cnn_gears, tmp_path):
    path, _, d = cnn_gears
    om = convert(path, tmp_path / "static", "--input_shape=x:2,3,32,32")
    session = _session(om)
    with pytest.raises(ValueError, match="static shapes"):
        session.infer([np.zeros((2, 3, 32, 32), np.float32)], mode="dymdims")
    with pytest.raises(NotImplementedError, match="dymdims"):
        session.infer([np.zeros((2, 3, 32, 32), np.float32)], mode="dymshape")
    session.free_resource()


def test_exported_tanh_gelu_is_fused(tmp_path):
    """gelu(approximate="tanh") as the exporter writes it (x ^ 3 as x * (x * x), nine ops)
    becomes one Gelu(tanh) in the decoder's .om, and the Transpose of the cache's keys for
    q @ k^T (attention left unfused: its mask is an input) is read by the MatMul as trans_b;
    the decoder gears above check the values of both."""
    torch.manual_seed(5)
    model = KVCacheDecoder(layers=1)
    path = export_kv_decoder(model, tmp_path / "kv1.onnx", prompt=4)
    om = convert(path, tmp_path / "kv1", f"--input_shape={kv_decoder_input_shape(model)}",
                 "--dynamic_dims=4,4,4,4;1,1,1,1")
    js = tmp_path / "kv1.json"
    assert atc("--mode=1", f"--om={om}", f"--json={js}").returncode == 0
    dump = json.loads(js.read_text())
    for gear in [dump] + dump["gears"]:
        ops = [n["op"] for n in gear["nodes"]]
        # one tanh GELU, fused into the feed-forward MatMul that feeds it
        gelu = [n for n in gear["nodes"] if n["op"] == "MatMul"
                and n["attrs"].get("activation") == "GeluTanh"]
        assert len(gelu) == 1 and "Gelu" not in ops
        assert "Tanh" not in ops
        storage = {t["name"]: t["storage"] for t in gear["tensors"]}
        qk = [n for n in gear["nodes"] if n["op"] == "MatMul" and n["attrs"]["trans_b"] == 1
              and storage[n["inputs"][1]] == "arena"]
        assert len(qk) == 1
        # One layout per weight for both gears (the decode gear's few-row [N, K] one), so the
        # gears share every weight's bytes.
        weights = {t["name"]: t["offset"] for t in gear["tensors"] if t["storage"] == "weight"}
        first = {t["name"]: t["offset"] for t in dump["tensors"] if t["storage"] == "weight"}
        assert {k: v for k, v in weights.items() if k.endswith("_nk")} == {
            k: v for k, v in first.items() if k.endswith("_nk")} != {}


def test_ais_bench_command_runs_a_gear(cnn_gears, tmp_path):
    """python -m ais_bench --dymBatch 2 over .npy inputs writes the gear's outputs, equal to
    onnxruntime's; a batch that is no gear fails naming the gears."""
    import subprocess
    import sys
    path, om, _ = cnn_gears
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32), dtype=np.float32)
    np.save(inp / "img0.npy", x)
    r = subprocess.run([sys.executable, "-m", "ais_bench", "--model", om, "--input", str(inp),
                        "--output", str(out), "--outfmt", "NPY", "--dymBatch", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "throughput 1000*batchsize.mean(2)" in r.stdout
    np.testing.assert_allclose(np.load(out / "img0_0.npy"), _ort(path).run(None, {"x": x})[0],
                               rtol=TOL, atol=TOL)
    r = subprocess.run([sys.executable, "-m", "ais_bench", "--model", om, "--dymBatch", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "batch size 3 is not one of the model's gears" in r.stderr


@pytest.mark.parametrize("damage, words", [
    ("dtype", "a gear's inputs"),
    ("larger", "a gear's inputs"),
    ("mode", "the gear table"),
])
def test_engine_refuses_inconsistent_gears(cnn_gears, tmp_path, damage, words):
    """A hand-made or damaged .om whose gears disagree with the first gear (an input's dtype,
    an input larger than the first gear's buffers) or with an unknown mode is refused at load
    naming the problem (the checksum is right: the readers' own checks must catch it)."""
    from ais_bench._acl import AclError
    from atc import om as omfmt
    _, om_path, _ = cnn_gears
    with open(om_path, "rb") as f:
        model = omfmt.parse(f.read(), om_path)
    gear = model.gears[0]
    t = gear.tensors[gear.inputs[0]]
    if damage == "dtype":
        t.dtype = np.dtype("int32")
    elif damage == "larger":
        t.dims = (16,) + tuple(t.dims[1:])
        t.nbytes = int(np.prod(t.dims)) * 4
    else:
        model.dynamic_mode = 7
    bad = tmp_path / "bad.om"
    bad.write_bytes(omfmt.serialize(model))
    with pytest.raises(AclError, match=words):
        _session(bad)


def test_a_gear_the_export_cannot_take_is_named(tmp_path):
    """A traced view(2, 12) bakes the batch in: the batch-1 gear cannot be built, and atc says
    which gear and its input shapes."""
    class Baked(torch.nn.Module):
        def forward(self, x):
            return x.view(2, 12).relu()
    path = tmp_path / "baked.onnx"
    torch.onnx.export(Baked(), (torch.randn(2, 3, 4),), str(path), dynamo=False,
                      input_names=["x"], opset_version=17)
    r = atc(f"--model={path}", "--framework=5", f"--output={tmp_path / 'baked'}",
            "--soc_version=Ascend910B2", "--input_shape=x:-1,3,4", "--dynamic_batch_size=1,2")
    assert r.returncode == 1
    assert "E19011" in r.stderr and "cannot reshape [1, 3, 4] into [2, 12]" in r.stderr
    assert "in the gear 1 of --dynamic_batch_size" in r.stderr and "'x': [1, 3, 4]" in r.stderr
