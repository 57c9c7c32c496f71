"""PyTorch's OpInfo database on npu: every op's float32 sample inputs run on npu and on the CPU
and the results are compared. Writes docs/opinfo.md (pass rates and every failure with its
reason) when run as a script:

    .venv/bin/python tests/python/opinfo_sweep.py [--samples N] [--write docs/opinfo.md]

An op passes when all its samples agree with the CPU (random ops: same shapes and dtypes),
with torch.npu.conv.allow_hf32 off (float32 is the reference).
"No fallback" counts the passing ops none of whose samples used the copying CPU fallback
(our kernels and ATen host kernels on the stream are not fallbacks).
"""

import argparse
import json
import os
import sys
import warnings

import torch
from torch.utils._pytree import tree_map

import torch_npu

RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential",
                "cauchy", "geometric", "log_normal", "poisson", "randn", "randint", "randperm",
                "empty", "new_empty", "alpha_dropout", "rrelu", "fractional")


# Ops where the npu differs from the CPU kernel on purpose, because torch_npu on a card does.
ON_PURPOSE = {
    name: "in eval mode save_mean / save_invstd hold C elements (zeros), as torch_npu, CUDA and "
          "the meta kernel size them; ATen's CPU kernel returns them empty"
    for name in ("native_batch_norm", "_native_batch_norm_legit")
}


def is_random(op):
    name = op.name + "." + op.variant_test_name
    return any(w in name for w in RANDOM_WORDS)


def to_npu(x):
    if isinstance(x, torch.Tensor) and x.device.type == "cpu":
        return x.detach().to("npu").requires_grad_(x.requires_grad)
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("npu")
    if isinstance(x, str) and x == "cpu":
        return "npu"
    return x


def to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def compare(got, want, random):
    gl, wl = torch.utils._pytree.tree_flatten(got)[0], torch.utils._pytree.tree_flatten(want)[0]
    if len(gl) != len(wl):
        raise AssertionError(f"{len(gl)} results, the CPU gave {len(wl)}")
    for g, w in zip(gl, wl):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                raise AssertionError(f"got {type(g).__name__}, the CPU gave a tensor")
            if g.device.type not in ("npu", "cpu"):
                raise AssertionError(f"result on {g.device}")
            g = g.detach().cpu()
            if g.shape != w.shape or g.dtype != w.dtype:
                raise AssertionError(f"shape/dtype {tuple(g.shape)} {g.dtype} vs CPU "
                                     f"{tuple(w.shape)} {w.dtype}")
            if not random:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, equal_nan=True,
                                           check_device=False, check_layout=False)
        elif not random and isinstance(w, (int, float, bool)) and g != w:
            if not (isinstance(w, float) and abs(g - w) <= 1e-5 + 1e-4 * abs(w)):
                raise AssertionError(f"{g} vs CPU {w}")


def run_op(op, samples):
    """(status, reason, used_fallback); status in pass / fail / cpu-error."""
    random = is_random(op)
    used_fallback = False
    try:
        inputs = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:samples]
    except Exception as e:  # noqa: BLE001
        return "skip", f"no float32 samples: {type(e).__name__}", False
    if not inputs:
        return "skip", "no float32 samples", False
    checked = 0
    for s in inputs:
        # Attention with dropout (or training=True) draws its mask from the device's generator:
        # compare shapes and dtypes only.
        sample_random = random or any(
            (k.startswith("dropout") or k == "training") and v is True or
            (k.startswith("dropout") and isinstance(v, float) and v > 0)
            for k, v in s.kwargs.items())
        try:
            torch.manual_seed(0)
            want = tree_map(to_cpu, op(s.input, *s.args, **s.kwargs))
        except Exception:  # noqa: BLE001
            continue  # the CPU itself refuses this sample
        before = torch_npu._C._npu_pathTotals()[2]
        try:
            n_input, n_args, n_kwargs = tree_map(to_npu, (s.input, s.args, s.kwargs))
            torch.manual_seed(0)
            got = op(n_input, *n_args, **n_kwargs)
            got = tree_map(to_cpu, got)   # synchronizes: asynchronous errors surface here
            torch.npu.synchronize()
        except Exception as e:  # noqa: BLE001
            try:
                torch.npu.synchronize()
            except Exception:  # noqa: BLE001
                pass
            return "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}", used_fallback
        used_fallback |= torch_npu._C._npu_pathTotals()[2] > before
        try:
            compare(got, want, sample_random)
        except Exception as e:  # noqa: BLE001
            return "fail", f"mismatch: {str(e).splitlines()[0][:160]}", used_fallback
        checked += 1
    if checked == 0:
        return "skip", "the CPU rejects every sample", False
    return "pass", "", used_fallback


def sweep(samples):
    from torch.testing._internal.common_methods_invocations import op_db
    results = {}
    for op in op_db:
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if os.environ.get("OPINFO_TRACE"):
            print("op", name, file=sys.stderr, flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status, reason, fb = run_op(op, samples)
        results[name] = {"status": status, "reason": reason, "fallback": fb}
    return results


def summary(results):
    tested = {k: v for k, v in results.items() if v["status"] != "skip"}
    passed = [k for k, v in tested.items() if v["status"] == "pass"]
    no_fb = [k for k in passed if not tested[k]["fallback"]]
    return {"tested": len(tested), "passed": len(passed), "no_fallback": len(no_fb),
            "pass_rate": len(passed) / max(1, len(tested)),
            "no_fallback_rate": len(no_fb) / max(1, len(tested))}


def write_markdown(results, path, samples):
    s = summary(results)
    lines = [
        "# OpInfo on npu (float32)",
        "",
        "Generated by `tests/python/opinfo_sweep.py --write docs/opinfo.md` (checked by",
        "`tests/python/test_opinfo.py`): each op of PyTorch's OpInfo database with float32 CPU",
        f"support runs its first {samples} sample inputs on npu and on the CPU; results must agree",
        "(rtol 1e-4, atol 1e-5; random ops: shapes and dtypes only).",
        "",
        f"- ops tested: {s['tested']}",
        f"- agree with the CPU: {s['passed']} ({s['pass_rate']:.1%}; goal 95%)",
        f"- agree with no CPU fallback at all: {s['no_fallback']} ({s['no_fallback_rate']:.1%}; "
        "goal 60%)",
        "",
        "## Failures",
        "",
        "| op | reason |",
        "|---|---|",
    ]
    for name, v in sorted(results.items()):
        if v["status"] == "fail":
            reason = v["reason"].replace("|", "\\|")
            if name in ON_PURPOSE:
                reason += f" (on purpose: {ON_PURPOSE[name]})"
            lines.append(f"| `{name}` | {reason} |")
    lines += ["", "## Passing through the CPU fallback", ""]
    fb = sorted(k for k, v in results.items() if v["status"] == "pass" and v["fallback"])
    lines.append(", ".join(f"`{k}`" for k in fb) if fb else "(none)")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--write", default=None, help="write the markdown report here")
    ap.add_argument("--json", default=None, help="write the raw results here")
    ns = ap.parse_args()
    # The comparison is with float32 on the CPU: convolutions in full float32, not in HF32 (the
    # card's default, which test_hf32.py checks), as PyTorch's own suite turns TF32 off for its
    # CUDA comparisons.
    torch.npu.conv.allow_hf32 = False
    results = sweep(ns.samples)
    if ns.write:
        write_markdown(results, ns.write, ns.samples)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(results, f)
    print(json.dumps(summary(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
