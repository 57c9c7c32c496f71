"""Strict card mode (NPU_SIM_STRICT=1, torch_npu.npu.set_strict_mode): what the 910B refuses
fails as torch_npu fails there, and what torch_npu has no NPU kernel for runs by the CPU
fallback with torch_npu's warning; the permissive default runs both and warns once per op.

The per-row tests are generated from torch_npu/data/card_910B.toml: every row that strict mode
acts on (a dtype the card refuses, or kind cpu_fallback) is called in both modes, in a fresh
process per mode (tests/python/card_invocations.py), and judged against what the row says and
against the CPU's result."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_npu
from torch_npu.npu import strict
from torch_npu.utils import card_support

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import card_invocations  # noqa: E402  (the calls, tests/python/card_invocations.py)

CARD = card_support.load("910B")
ACTING_ROWS = [r["name"] for r in CARD.data["op"]
               if strict._acts(CARD, r, strict._all_dtypes())]

# Rows SimNPU reaches under another row's name (the call's refusal names that row): SimNPU's
# aten::_convolution decomposes into convolution_overrideable, the convolution row.
REACHED_AS = {"_convolution": "convolution"}

# Rows whose call fails in SimNPU for a reason of its own, after the card check did its part;
# the expected error (type, words) with the reason.
SIMNPU_OUTCOMES = {
    "_conv_depthwise2d": (
        "NotImplementedError", "_conv_depthwise2d",
        "PyTorch implements aten::_conv_depthwise2d for CUDA only and SimNPU has no kernel for "
        "it (F.conv2d with groups reaches convolution_overrideable instead); called directly, "
        "it has no kernel to run once the check lets it through"),
    "_scaled_dot_product_flash_attention": (
        "NotImplementedError", "'CPU' backend",
        "PyTorch has no CPU kernel for this op (CUDA only), so the CPU fallback itself fails, as "
        "torch_npu's would; F.scaled_dot_product_attention on npu takes the fused overrideable "
        "op instead"),
}


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_child(mode: str) -> tuple[dict, str]:
    # From the repository root, as the other tests' child processes: the torch_npu of this tree.
    code = (f"import sys; sys.path.insert(1, {HERE!r}); import card_invocations, json; "
            f"print(json.dumps(card_invocations.run({mode!r})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.splitlines()[-1]), r.stderr


@pytest.fixture(scope="module")
def strict_run():
    return run_child("strict")


@pytest.fixture(scope="module")
def permissive_run():
    return run_child("permissive")


def stderr_of(stderr: str, row: str) -> str:
    """The part of the child's stderr printed while `row` ran."""
    parts = re.split(r"^@@row (\S+)\n", stderr, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    return sections[row]


def refusal_pattern(row: str, dtype) -> str:
    """The data file's aclnn_dtype_unsupported template for `row` as a regex: the run-specific
    parts (file, line, time, pid, device, rank) as wildcards, everything else verbatim."""
    text = CARD.unsupported_message(row, dtype)
    pattern = re.escape(text)
    for field in ("file", "line", "timestamp_ms", "timestamp", "pid", "device", "rank"):
        pattern = pattern.replace(re.escape("{" + field + "}"), r"[^\s,)]+")
    return pattern


def expected_kind(row: str) -> str:
    dtype, _ = card_invocations.CALLS[row]
    return CARD.kind(row, dtype)


def fallback_warnings(section: str, row: str) -> list[str]:
    """torch_npu's CPU-fallback warnings for any overload of `row` (a structured op's functional
    form reaches the npu as its out= overload, as on the card)."""
    text = re.escape("Warning: " + CARD.message("cpu_fallback_warning", op="{op}"))
    pattern = text.replace(re.escape("{op}"), re.escape(f"aten::{row}") + r"(\.\w+)?")
    return [line for line in section.splitlines() if re.fullmatch(pattern, line)]


def card_warnings(rec: dict, section: str) -> list[str]:
    """The card check's warnings of one row: Python warnings, and the stderr lines of calls made
    through torch.ops (whose warnings PyTorch prints instead)."""
    return rec["card_warnings"] + [line for line in section.splitlines()
                                   if "strict card mode is off" in line]


def fallback_calls(rec: dict, row: str) -> int:
    return sum(n for op, n in rec["fallback_calls"].items()
               if op == f"aten::{row}" or op.startswith(f"aten::{row}."))


# ---- the rows ---------------------------------------------------------------------------------

def test_every_acting_row_has_a_call_or_a_reason():
    covered = set(card_invocations.CALLS) | set(card_invocations.NO_CALL)
    assert set(ACTING_ROWS) <= covered, sorted(set(ACTING_ROWS) - covered)
    assert set(card_invocations.CALLS) <= set(ACTING_ROWS), "a call for a row that does not act"
    # the minimum: float64 matmul and convolution are refused
    for row in ("mm", "addmm", "bmm", "convolution", "convolution_backward"):
        assert CARD.kind(row, torch.float64) == "unsupported"
        assert card_invocations.CALLS[row][0] == torch.float64


@pytest.mark.parametrize("row", ACTING_ROWS)
def test_strict_mode_row(row, strict_run):
    results, stderr = strict_run
    rec = results[row]
    kind = expected_kind(row)
    section = stderr_of(stderr, row)
    assert not card_warnings(rec, section), "strict mode acts, it does not warn"
    if kind == "unsupported":
        dtype = card_invocations.CALLS[row][0]
        assert rec["error_type"] == "RuntimeError", rec
        shown = REACHED_AS.get(row, row)
        assert re.fullmatch(refusal_pattern(shown, dtype), rec["error"]), rec["error"]
        acl = CARD.data["acl_dtypes"][card_support.dtype_name(dtype)]  # DT_DOUBLE
        assert rec["error"].startswith(f"{shown}:") and f"not implemented for {acl}," in rec["error"]
        return
    assert kind == "cpu_fallback"
    # torch_npu's warning, once although the op ran twice
    assert len(fallback_warnings(section, row)) == 1, section
    if row in SIMNPU_OUTCOMES:
        err_type, words, _ = SIMNPU_OUTCOMES[row]
        assert rec["error_type"] == err_type and words in rec["error"], rec
        return
    assert rec["error"] is None, rec
    assert fallback_calls(rec, row) == 2, rec["fallback_calls"]
    if row in card_invocations.RANDOM_ROWS:
        return  # compared with the permissive run below
    assert rec["cpu_shapes_match"] and rec["max_error"] < 1e-5, rec


@pytest.mark.parametrize("row", ACTING_ROWS)
def test_permissive_mode_row(row, permissive_run, strict_run):
    results, stderr = permissive_run
    rec = results[row]
    kind = expected_kind(row)
    section = stderr_of(stderr, row)
    # one warning, although the op ran twice, naming the op (and the dtype it refuses)
    warnings = card_warnings(rec, section)
    assert len(warnings) == 1, warnings
    warning = warnings[0]
    if kind == "unsupported":
        dtype = card_support.dtype_name(card_invocations.CALLS[row][0])
        assert f" on {dtype}: " in warning and "does not support it" in warning, warning
    else:
        assert "no NPU kernel" in warning and f"aten::{row}" in warning, warning
    assert "NPU_SIM_STRICT=1" in warning
    if row in SIMNPU_OUTCOMES:
        err_type, words, _ = SIMNPU_OUTCOMES[row]
        assert rec["error_type"] == err_type and words in rec["error"], rec
        return
    assert rec["error"] is None, rec
    if row in card_invocations.RANDOM_ROWS:
        # the same npu seed: the host kernel and the CPU fallback draw the same numbers
        assert rec["values"] == strict_run[0][row]["values"]
        assert all(v >= 0 for values in rec["values"] for v in values)
        return
    assert rec["cpu_shapes_match"] and rec["max_error"] < 1e-5, rec


# ---- the switch -------------------------------------------------------------------------------

@pytest.fixture
def fresh_rules():
    """Strict mode off and the once-per-op warnings re-armed (a fresh table), then restored."""
    before = torch_npu.npu.strict_mode()
    strict.install_card_rules()
    torch_npu.npu.set_strict_mode(False)
    yield
    torch_npu.npu.set_strict_mode(before)
    strict.install_card_rules()


def test_default_is_permissive_and_the_switch_works(fresh_rules):
    assert torch_npu.npu.strict_mode() is False
    torch_npu.npu.set_strict_mode(True)
    assert torch_npu.npu.strict_mode() is True
    with pytest.raises(TypeError, match="expects a bool"):
        torch_npu.npu.set_strict_mode("yes")


def test_float64_mm_message_has_torch_npus_shape(fresh_rules):
    a = torch.randn(3, 3, dtype=torch.float64)
    torch_npu.npu.set_strict_mode(True)
    with pytest.raises(RuntimeError) as e:
        torch.mm(a.npu(), a.npu())
    lines = str(e.value).splitlines()
    assert re.fullmatch(r"mm:adapter/ops/CardCheck\.cpp:\d+ NPU function error: call aclnnMm "
                        r"failed, error code is 161002", lines[0]), lines[0]
    assert re.fullmatch(r"\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:0, "
                        r"RankID:-1\) ERR00100 PTA call acl api failed\.", lines[1]), lines[1]
    assert re.fullmatch(r"\[PID: \d+\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} "
                        r"AclNN_Parameter_Error\(EZ1001\): Tensor self not implemented for "
                        r"DT_DOUBLE, should be in dtype support list "
                        r"\[DT_FLOAT16,DT_BFLOAT16,DT_FLOAT,\]\.", lines[2]), lines[2]
    # out= and matmul reach the same row; float32 runs, and equals the CPU
    with pytest.raises(RuntimeError, match="call aclnnMm failed"):
        torch.mm(a.npu(), a.npu(), out=torch.empty(3, 3, dtype=torch.float64, device="npu"))
    with pytest.raises(RuntimeError, match="call aclnnMm failed"):
        torch.matmul(a.npu(), a.npu())
    f = a.float()
    torch.testing.assert_close(torch.mm(f.npu(), f.npu()).cpu(), f @ f)


def test_integer_matmul_and_float64_conv_are_refused(fresh_rules):
    torch_npu.npu.set_strict_mode(True)
    i = torch.arange(4, dtype=torch.int32).view(2, 2).npu()
    with pytest.raises(RuntimeError, match=r"not implemented for DT_INT32"):
        torch.mm(i, i)
    with pytest.raises(RuntimeError, match=r"call aclnnAddmm failed"):
        torch.nn.functional.linear(torch.ones(2, 3, dtype=torch.float64, device="npu"),
                                   torch.ones(4, 3, dtype=torch.float64, device="npu"),
                                   torch.ones(4, dtype=torch.float64, device="npu"))
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"^convolution:.*call aclnnConvolution failed"):
        F.conv2d(x.npu(), w.npu())
    with pytest.raises(RuntimeError, match=r"not implemented for DT_DOUBLE"):
        torch.nn.Conv1d(2, 3, 3).double().npu()(torch.randn(1, 2, 8, dtype=torch.float64).npu())


def test_permissive_runs_float64_and_warns_once_per_op(fresh_rules):
    a = torch.randn(4, 4, dtype=torch.float64)
    with pytest.warns(UserWarning) as caught:
        got = torch.mm(a.npu(), a.npu()).cpu()
        torch.mm(a.npu(), a.npu())
        torch.mm(a.npu(), a.npu(), out=torch.empty(4, 4, dtype=torch.float64, device="npu"))
    torch.testing.assert_close(got, a @ a, rtol=1e-12, atol=1e-12)
    card = [str(w.message) for w in caught if "strict card mode" in str(w.message)]
    assert len(card) == 1, card
    assert card[0].startswith("aten::mm on float64: the 910B does not support it: aclnnMm does "
                              "not take float64"), card[0]


def test_switching_mid_run_takes_effect_at_the_next_op(fresh_rules):
    a = torch.randn(2, 2, dtype=torch.float64).npu()
    torch_npu.npu.set_strict_mode(True)
    with pytest.raises(RuntimeError):
        torch.bmm(a[None], a[None])
    torch_npu.npu.set_strict_mode(False)
    with pytest.warns(UserWarning, match="strict card mode is off"):
        out = torch.bmm(a[None], a[None])
    torch.testing.assert_close(out.cpu()[0], a.cpu() @ a.cpu())


def test_ops_the_card_runs_are_untouched_in_strict_mode(fresh_rules):
    torch_npu.npu.set_strict_mode(True)
    x = torch.randn(8, 8)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no card warning, no fallback
        y = (x.npu() + 1).relu().sum(0).cpu()
    torch.testing.assert_close(y, (x + 1).relu().sum(0))


def test_only_the_acting_ops_carry_a_rule():
    # The speed of the check: every other op is a null pointer test. The rules bind to the ops
    # of the acting rows and nothing else.
    sites = set(torch_npu._C._npu_cardCheckSites())
    assert {"mm", "mm.out", "addmm", "addmm_", "bmm", "convolution_overrideable",
            "convolution_backward_overrideable", "_fused_adam_"} <= sites
    ops = {op for rule in strict.card_rules(CARD) for op in rule[6]}
    assert {"mm", "mm.out", "addmm_", "convolution_overrideable", "mode", "linalg_inv_ex"} <= ops
    assert "add.Tensor" not in ops and "relu" not in ops


@pytest.mark.parametrize("value,ok", [("1", True), ("0", True), (" 1 ", True), ("yes", False),
                                      ("2", False), ("", False)])
def test_the_environment_variable(python, value, ok):
    r = python("import torch, torch_npu; print(torch_npu.npu.strict_mode())",
               env={"NPU_SIM_STRICT": value})
    if ok:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(value.strip() == "1")
    else:
        assert r.returncode != 0
        assert f"NPU_SIM_STRICT='{value}' is invalid: expected 0 or 1" in r.stderr, r.stderr[-2000:]


def test_the_test_models_train_unchanged_in_strict_mode(python):
    # Everything the MLP, CNN and GPT-style models run is native on the 910B: strict mode neither
    # refuses nor falls back, and their losses are those of the permissive mode, exactly.
    r = python("""
import json, warnings
import torch, torch_npu
from torch_npu.testing import models
warnings.simplefilter("error")
out = {k: models.train(k, "npu", "adamw", steps=3) for k in ("mlp", "cnn", "gpt")}
torch_npu.npu.set_strict_mode(False)
loose = {k: models.train(k, "npu", "adamw", steps=3) for k in ("mlp", "cnn", "gpt")}
print(json.dumps([out, loose, torch_npu._C._fallback_ops()]))
""", env={"NPU_SIM_STRICT": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    strict_losses, permissive_losses, fallback = json.loads(r.stdout.strip().splitlines()[-1])
    assert fallback == {}
    assert strict_losses == permissive_losses


def test_strict_fallback_honours_torch_npu_fallback_cpu_disable(python):
    r = python("""
import torch, torch_npu
try:
    torch.mode(torch.tensor([1.0, 2.0, 2.0]).npu())
    print("ran")
except NotImplementedError as e:
    print(str(e).splitlines()[0])
""", env={"NPU_SIM_STRICT": "1", "TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("The operator [aten::mode] is not supported on NPU and "
                                       "TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids"), r.stdout
    assert "CAUTION" not in r.stderr
