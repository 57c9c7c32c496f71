"""The 910B support data (torch_npu/data/card_910B.toml) and the readiness report
(python -m torch_npu.utils.op_report --target 910B): the data file's schema, the loader's lookups,
and reports on a GPT-style model, a CNN and a tiny Hugging Face LLaMA whose every (op, dtype) row
is what the data file says."""

import json
import re
import subprocess
import sys
import tomllib

import pytest
import torch

import torch_npu  # noqa: F401
from torch_npu.testing import models
from torch_npu.utils import card_support, op_report

DTYPES = {"float16", "bfloat16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64",
          "bool", "complex64", "complex128"}


@pytest.fixture(scope="module")
def card():
    return card_support.load("910B")


# --- the data file ------------------------------------------------------------------------------

def test_data_file_schema(card):
    data = card.data
    assert data["schema"] == 1 and data["target"] == "910B"
    assert tuple(data["kinds"]) == card_support.KINDS
    names = [r["name"] for r in data["op"]]
    assert len(names) == len(set(names)), "duplicate op rows"
    assert len(names) >= 200
    for r in data["op"]:
        where = f"row {r['name']}"
        assert re.fullmatch(r"[a-z_][a-zA-Z0-9_]*(\.[A-Za-z0-9_]+)?", r["name"]), where
        assert r["kind"] in card_support.KINDS, where
        assert r["dtypes"] and all(d in DTYPES | {"*", "unknown"} for d in r["dtypes"]), where
        assert r["other_dtypes"] in (*card_support.KINDS, "unknown"), where
        assert all(d in DTYPES and k in card_support.KINDS
                   for d, k in r.get("dtype_kinds", {}).items()), where
        assert r.get("hf32") in (None, "matmul", "conv"), where
        assert r["sources"], f"{where} names no source"
        for key in r["sources"]:
            assert key in card.sources, f"{where}: source {key!r} is not in [sources]"
    for key, s in card.sources.items():
        if "url" in s:
            assert s["url"].startswith("https://"), key
        else:
            assert s["repo"].count("/") == 1 and s["path"], key
            assert re.fullmatch(r"[0-9a-f]{40}|v[0-9.]+", s["commit"]), key
    for key, m in card.messages.items():
        assert m["text"] and m["sources"], key
        assert all(k in card.sources for k in m["sources"]), key
    for family in ("matmul", "conv"):
        assert set(card.hf32[family]) >= {"flag", "default", "sources"}
    assert card.hf32_flag("matmul") == ("torch.npu.matmul.allow_hf32", False)
    assert card.hf32_flag("conv") == ("torch.npu.conv.allow_hf32", True)


def test_data_file_covers_every_kind_and_the_npu_ops(card):
    kinds = {r["kind"] for r in card.data["op"]} | {
        k for r in card.data["op"] for k in r.get("dtype_kinds", {}).values()}
    assert {"native", "aicpu", "cpu_fallback"} <= kinds
    assert any(r["other_dtypes"] == "unsupported" for r in card.data["op"])
    # Every npu_* op SimNPU registers has a row.
    for name in ("npu_rms_norm", "npu_add_rms_norm", "npu_rotary_mul", "npu_swiglu",
                 "npu_fusion_attention", "npu_fused_infer_attention_score",
                 "npu_apply_rotary_pos_emb", "npu_format_cast"):
        assert card.row(name) is not None, name


def test_data_file_is_what_the_wheel_ships():
    # scikit-build-core's wheel.packages copies every file of the torch_npu package.
    text = (card_support.importlib.resources.files("torch_npu") / "data" / "card_910B.toml")
    assert tomllib.loads(text.read_text(encoding="utf-8"))["target"] == "910B"
    assert card_support.targets() == ["910B"]


def test_lookups(card):
    assert card.kind("aten::mm", torch.float64) == "unsupported"
    assert card.kind("aten::mm", torch.bfloat16) == "native"
    assert card.kind("mm.out", "float32") == "native"               # overload -> its packet
    assert card.kind("aten::argsort", torch.int64) == "aicpu"
    assert card.kind("aten::argsort", torch.float32) == "native"
    assert card.kind("aten::linalg_cholesky_ex", torch.float32) == "cpu_fallback"
    assert card.kind("aten::_fused_adam_", torch.float32) == "cpu_fallback"
    assert card.kind("aten::view", torch.complex64) == "native"     # no kernel, any dtype
    assert card.kind("aten::no_such_op", torch.float32) == "unknown"
    assert card.synchronizes("aten::nonzero") and not card.synchronizes("aten::mm")
    assert card.hf32_family("aten::addmm") == "matmul"
    assert card.hf32_family("aten::convolution") == "conv"
    msg = card.unsupported_message("aten::mm", torch.float64)
    assert "NPU function error: call aclnnMm failed, error code is 161002" in msg
    assert "ERR00100 PTA call acl api failed." in msg
    assert "Tensor self not implemented for DT_DOUBLE, should be in dtype support list [" in msg
    assert "DT_FLOAT16" in msg and "DT_BFLOAT16" in msg and "DT_FLOAT," in msg
    assert card.message("cpu_fallback_warning", op="aten::mode") == (
        "CAUTION: The operator 'aten::mode' is not currently supported on the NPU backend and "
        "will fall back to run on the CPU. This may have performance implications.")
    with pytest.raises(ValueError, match="no card profile for target 'H100'.*910B"):
        card_support.load("H100")


def test_view_copy_of_float64_runs_on_ai_cpu(card):
    # torch_npu's general device copy, op-plugin's ViewCopy: never on AI Core for double.
    row = card.row("npu::npu_view_copy")
    assert row is not None and row["name"] == "npu_view_copy"
    assert row["dtype_kinds"] == {"float64": "aicpu"}
    assert {"op_plugin_view_copy", "torch_npu_copy_kernel"} <= set(row["sources"])
    assert card.sources["op_plugin_view_copy"]["path"].endswith("ViewcopyKernelNpu.cpp")
    assert card.kind("npu::npu_view_copy", torch.float64) == "aicpu"
    assert card.kind("npu_view_copy", "float32") == "unknown"  # depends on the layouts


def test_report_lists_view_copy_float64_as_ai_cpu():
    # SimNPU has no npu_view_copy op of its own (its copies are aten::copy_), so the run is
    # recorded by hand: what the recorder would file for two such calls and one float32 one.
    rec = op_report.OpRecorder()
    rec.typed[("npu::npu_view_copy", "float64")] = 2
    rec.typed[("npu::npu_view_copy", "float32")] = 1
    rec.counts["npu::npu_view_copy"] = 3
    rep = op_report.card_readiness(rec, "910B")
    rows = {(r["op"], r["dtype"]): r for r in rep["rows"]}
    r64 = rows[("npu::npu_view_copy", "float64")]
    assert (r64["kind"], r64["calls"], r64["data_row"]) == ("aicpu", 2, "npu_view_copy")
    assert rows[("npu::npu_view_copy", "float32")]["kind"] == "unknown"
    assert rep["counts"]["aicpu"] == 1
    assert rep["verdict"]["status"] == "caveats"
    assert "1 run on AI CPU" in rep["verdict"]["line"]
    text = op_report.format_readiness(rep)
    assert re.search(r"^npu::npu_view_copy\s+float64\s+2\s+aicpu\b", text, re.M), text


# --- the report on models ------------------------------------------------------------------------

def _record(step) -> op_report.OpRecorder:
    rec = op_report.OpRecorder()
    with rec:
        step()
    return rec


def _check_report(card, rec):
    rep = op_report.card_readiness(rec, "910B")
    rows = {(r["op"], r["dtype"]): r for r in rep["rows"]}
    # every (op, dtype) the run used is a row, with every call
    assert set(rows) == set(rec.typed)
    assert sum(r["calls"] for r in rep["rows"]) == sum(rec.counts.values())
    for (op, dtype), r in rows.items():
        assert r["kind"] == card.kind(op, dtype), (op, dtype)
        assert r["calls"] == rec.typed[(op, dtype)]
    counts = rep["counts"]
    assert sum(counts.values()) == len(rows)
    status = rep["verdict"]["status"]
    if counts["unsupported"]:
        assert status == "not_ready" and "NOT READY" in rep["verdict"]["line"]
    elif counts["cpu_fallback"] or counts["aicpu"] or counts["unknown"]:
        assert status == "caveats" and "READY WITH CAVEATS" in rep["verdict"]["line"]
    else:
        assert status == "ready"
    assert rep["verdict"]["line"].startswith("910B: ")
    return rep, rows


def test_report_on_gpt(card):
    rep, rows = _check_report(card, _record(lambda: models.train("gpt", "npu", "adamw", steps=1)))
    assert rows[("aten::mm", "float32")]["kind"] == "native"
    assert rows[("aten::mm", "float32")]["hf32"] == "matmul"
    assert rep["hf32"]["matmul"]["default"] is False
    assert ("aten::_local_scalar_dense", "float32") in rows         # loss.item()
    assert rep["host_sync"]["aten::_local_scalar_dense"] >= 1
    assert rep["verdict"]["status"] != "not_ready"


def test_report_on_cnn(card):
    rep, rows = _check_report(card, _record(lambda: models.train("cnn", "npu", "sgd", steps=1)))
    assert rows[("aten::convolution", "float32")]["hf32"] == "conv"
    assert rep["hf32"]["conv"]["current"] is True
    assert rows[("aten::native_batch_norm", "float32")]["kind"] == "native"


def test_report_on_hf_llama(card):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to("npu")
    ids = torch.randint(0, 64, (2, 8)).npu()

    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()

    rep, rows = _check_report(card, _record(step))
    assert rows[("aten::mm", "float32")]["kind"] == "native"
    assert ("aten::embedding", "float32") in rows
    assert rep["verdict"]["status"] in ("ready", "caveats")


# --- the command line -------------------------------------------------------------------------

def _cli(tmp_path, code, *flags):
    script = tmp_path / "s.py"
    script.write_text(code)
    return subprocess.run([sys.executable, "-m", "torch_npu.utils.op_report", *flags, "--",
                           str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_cli_float64_matmul_is_not_ready(tmp_path):
    code = ("import torch, torch_npu\n"
            "x = torch.ones(4, 4, dtype=torch.float64, device='npu')\n"
            "y = x @ x\n"
            "z = torch.ones(4, 4, device='npu') @ torch.ones(4, 4, device='npu')\n"
            "print('ran', y.sum().item())\n")
    r = _cli(tmp_path, code, "--target", "910B")
    assert r.returncode == 0, r.stderr
    assert "ran 64.0" in r.stdout
    assert re.search(r"^aten::mm\s+float64\s+1\s+unsupported\b", r.stdout, re.M), r.stdout
    assert re.search(r"^aten::mm\s+float32\s+1\s+native\b.*\[hf32:matmul\]", r.stdout, re.M)
    assert "call aclnnMm failed" in r.stdout and "DT_DOUBLE" in r.stdout
    verdict = r.stdout.strip().splitlines()[-1]
    assert verdict.startswith("910B: NOT READY: 1 (op, dtype) unsupported (aten::mm float64")

    j = _cli(tmp_path, code, "--target", "910B", "--json")
    assert j.returncode == 0, j.stderr
    rep = json.loads(j.stdout[j.stdout.index("{"):])
    assert rep["verdict"]["status"] == "not_ready"
    assert {(r["op"], r["dtype"], r["kind"]) for r in rep["rows"]} >= {
        ("aten::mm", "float64", "unsupported"), ("aten::mm", "float32", "native")}
    # every row of the JSON report is a line of the text report
    for row in rep["rows"]:
        assert re.search(rf"^{re.escape(row['op'])}\s+{row['dtype']}\s+{row['calls']}\s+"
                         rf"{row['kind']}\b", r.stdout, re.M), row


def test_cli_errors(tmp_path):
    r = _cli(tmp_path, "print(1)\n", "--target", "H100")
    assert r.returncode == 2 and "no card profile for target 'H100'" in r.stderr
    r = _cli(tmp_path, "print(1)\n", "--json")
    assert r.returncode == 2 and "--json needs --target" in r.stderr
    # without --target the report keeps its old form
    r = _cli(tmp_path, "import torch, torch_npu\ntorch.ones(2, device='npu') + 1\n")
    assert r.returncode == 0 and "how it ran" in r.stdout and "READY" not in r.stdout
