"""Runs torch_npu's own test files (Ascend/op-plugin test/, fetched outside this repo) against
SimNPU and reports per-file results and the pass rate.

How it works:
- `select_files` walks the given test/ folder, keeps the folders a simulator can fairly run
  (INCLUDE) and drops the files of EXCLUDE, each with its one-line reason (the docs list them).
- Each file runs in its own process (`_driver.py`: the file as __main__, every test's outcome
  written to a JSON-lines file as it ends) under `nice -n 19`, with a timeout, at most
  `--jobs` (2) at a time. Their helpers (torch_npu.testing.testcase, common_utils, decorator,
  common_distributed) are SimNPU's own modules of those names, written from their documented
  behaviour.
- The pass rate is passed / (passed + failed + errors); skipped tests are left out. A file that
  cannot be imported counts as one error, as does a file killed by its timeout (besides the
  tests it finished).

Usage:
  python tests/third_party_runner/run.py /work/tpr-src/op-plugin/test [--sample 50] [--jobs 2]
      [--timeout 600] [--out results.json] [-k substring]
  python tests/third_party_runner/run.py --write-docs results.json [--before before.json]

Never part of `make test`: the sources are fetched from the network, and a run takes an hour.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import fnmatch
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DOCS = REPO / "docs" / "third_party_tests.md"
DOCS_MARKER = "<!-- Everything below is written by tests/third_party_runner/run.py --write-docs -->"

# Folders of op-plugin's test/ whose files a simulator can fairly run: the aten operator tests,
# and the operator tests of the torch release SimNPU pins (2.13: test_v2r13_ops).
INCLUDE = ["test_base_ops/test_*.py", "test_v2r13_ops/test_*.py"]

# Files and folders left out, with the reason (shown in docs/third_party_tests.md).
EXCLUDE = [
    ("test_custom_ops/*", "torch_npu's npu_* custom operators (fused kernels of CANN's "
     "operator library), not aten behaviour; measured separately, not in the pass rate"),
    ("test_v1r11_ops/*", "tests for torch 1.11; SimNPU pins torch 2.13"),
    ("test_v2r[0-9]_ops/*", "tests for torch 2.0-2.9; SimNPU pins torch 2.13"),
    ("test_v2r1[0-24-9]_ops/*", "tests for other torch 2.1x releases; SimNPU pins torch 2.13"),
    ("core_tests/*", "checks of op-plugin's generated schema file and fake-tensor registrations "
     "of its build, not device behaviour"),
    ("test_v2r13_ops/test_npu_prefetch.py", "npu_prefetch moves weights into the real card's "
     "L2 cache; nothing to observe on a simulator"),
]

OUTCOMES = ("passed", "failed", "error", "skipped")

# Kinds of cause, first match wins: (label, where the fix belongs, regex on the cause).
KINDS = [
    ("torch_npu operator or name SimNPU lacks", "adapter schemas + kernels or composites",
     r"has no attribute|No module named 'torch_npu"),
    ("refused by design (hardware not simulated, undocumented update rule)", "none",
     r"needs hardware SimNPU does not simulate|is not implemented in SimNPU"),
    ("op with no kernel for npu: ATen has only a CUDA kernel, or a sparse/quantized npu layout",
     "adapter/ops (C++)",
     r"Could not run 'aten::|Quantizednpu|Sparsenpu|Copying from quantized"),
    ("ATen's CPU kernel, run as the npu kernel, lacks a dtype torch_npu supports (float16, int32 "
     "indices, ...)", "kernels/ + adapter/ops (C++)",
     r"not implemented for '|expected scalar type|Expected a long tensor|same dtype|"
     r"LongTensor|INTERNAL ASSERT FAILED.*BinaryOps|Mismatched Tensor types|Low precision"),
    ("numerics: float16 results further from the float32 reference than torch_npu's tolerance "
     "(intermediate rounding in float16), and a few float32 gaps", "kernels/ (C++)",
     r"result error|max abs diff"),
    ("argument check raised late (on the stream), with another message, or another exception "
     "type (IndexError vs RuntimeError)", "adapter/ops checks (C++)",
     r"not raised|does not match|AcceleratorError|IndexError|Expected all tensors|"
     r"expectValue|Expected a value of type|non-positive-norm|too many CPU scalars|"
     r"Attempting to broadcast"),
    ("memory: the test needs more than the runner's cap on a shared machine", "none (runner cap)",
     r"MemoryError|can't allocate memory|killed by signal 9|Resource temporarily unavailable"),
]


def kind_of(cause: str) -> str:
    for label, _, pattern in KINDS:
        if re.search(pattern, cause):
            return label
    return "other"


def select_files(test_dir: Path, sample: int | None = None, pattern: str | None = None,
                 seed: int = 25) -> list[str]:
    """The fair files under test_dir (paths relative to it), sorted; a seeded sample if asked."""
    chosen = set()
    for glob in INCLUDE:
        for path in test_dir.glob(glob):
            rel = path.relative_to(test_dir).as_posix()
            if not any(fnmatch.fnmatch(rel, pat) for pat, _ in EXCLUDE):
                chosen.add(rel)
    files = sorted(chosen)
    if pattern:
        files = [f for f in files if any(p in f.rsplit("/", 1)[-1] for p in pattern.split(","))]
    if sample is not None and sample < len(files):
        files = sorted(random.Random(seed).sample(files, sample))
    return files


def _limit_memory(gib: float):
    """A preexec hook capping the child's writable private memory (RLIMIT_DATA): a test that
    needs more fails with an out-of-memory error instead of waking the kernel's OOM killer on
    a shared machine. Reserved, inaccessible address space (the allocator's PROT_NONE
    reservations) does not count against it."""
    import resource

    def apply():
        limit = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return apply


def run_one(test_dir: Path, rel: str, timeout: float, python: str, mem_gib: float = 8) -> dict:
    """Runs one file in a subprocess; returns its per-test rows and totals."""
    fd, jsonl = tempfile.mkstemp(prefix="tpr-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    start = time.monotonic()
    status = "ran"
    try:
        proc = subprocess.run(["nice", "-n", "19", python, str(HERE / "_driver.py"),
                               str(test_dir / rel), jsonl], env=env, timeout=timeout,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=_limit_memory(mem_gib))
        tail = proc.stderr[-2000:]
        if proc.returncode < 0:
            status = f"killed by signal {-proc.returncode}"
    except subprocess.TimeoutExpired as e:
        status = f"timeout after {timeout:.0f}s"
        tail = (e.stderr or b"")[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
    rows = []
    with open(jsonl) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # the last line of a killed process
    os.unlink(jsonl)
    if status != "ran":
        rows.append({"test": "<file>", "outcome": "error", "cause": status.split(" after")[0]
                     if "timeout" in status else status, "where": ""})
    elif not rows and proc.returncode != 0:
        rows.append({"test": "<file>", "outcome": "error",
                     "cause": f"exit {proc.returncode}, no test ran: "
                     + (tail.strip().splitlines() or ["?"])[-1][:200], "where": ""})
    elif not rows:
        status = "no tests"  # e.g. a class-level SupportedDevices, which hides the class
    counts = collections.Counter(r["outcome"] for r in rows)
    return {"file": rel, "status": status, "seconds": round(time.monotonic() - start, 1),
            **{o: counts.get(o, 0) for o in OUTCOMES}, "rows": rows}


def totals(results: list[dict]) -> dict:
    t = {o: sum(r[o] for r in results) for o in OUTCOMES}
    counted = t["passed"] + t["failed"] + t["error"]
    t["files"] = len(results)
    t["pass_rate"] = t["passed"] / counted if counted else 0.0
    return t


def normalise(cause: str) -> str:
    """A cause with its numbers, shapes and quoted values blurred, so alike failures group."""
    cause = re.sub(r"0x[0-9a-f]+", "0x?", cause)
    cause = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", cause)
    return cause


def causes(results: list[dict]) -> list[tuple[str, int, list[str]]]:
    """(cause, tests affected, files) for every failure and error, most tests first."""
    groups: dict[str, list] = collections.defaultdict(lambda: [0, set()])
    for r in results:
        for row in r["rows"]:
            if row["outcome"] in ("failed", "error"):
                key = normalise(row.get("cause", "?"))
                groups[key][0] += 1
                groups[key][1].add(r["file"].rsplit("/", 1)[-1])
    return sorted(((k, v[0], sorted(v[1])) for k, v in groups.items()), key=lambda x: -x[1])


def print_report(results: list[dict]) -> None:
    for r in sorted(results, key=lambda r: r["file"]):
        flag = "" if r["failed"] + r["error"] == 0 else "  <--"
        print(f"{r['file']:60s} pass {r['passed']:3d} fail {r['failed']:3d} err {r['error']:3d} "
              f"skip {r['skipped']:3d} {r['seconds']:6.1f}s {r['status'] if r['status'] != 'ran' else ''}{flag}")
    t = totals(results)
    print(f"\n{t['files']} files: {t['passed']} passed, {t['failed']} failed, {t['error']} errors, "
          f"{t['skipped']} skipped; pass rate {100 * t['pass_rate']:.1f}%")
    print("\ncauses (tests affected):")
    for cause, n, files in causes(results)[:40]:
        print(f"{n:5d}  {cause[:150]}  [{', '.join(files[:4])}{' ...' if len(files) > 4 else ''}]")


def write_docs(after: dict, before: dict | None) -> None:
    ra, tb = after["results"], totals(before["results"]) if before else None
    ta = totals(ra)
    by_file_before = {r["file"]: r for r in before["results"]} if before else {}
    out = [DOCS_MARKER, ""]
    out.append(f"Source: {after.get('source', '?')}; run {after.get('date', '?')}.")
    out.append("")
    if tb:
        out.append("| | files | passed | failed | errors | skipped | pass rate |")
        out.append("|---|---|---|---|---|---|---|")
        for name, t in (("before", tb), ("after", ta)):
            out.append(f"| {name} | {t['files']} | {t['passed']} | {t['failed']} | {t['error']} | "
                       f"{t['skipped']} | **{100 * t['pass_rate']:.1f}%** |")
    else:
        out.append(f"{ta['files']} files: {ta['passed']} passed, {ta['failed']} failed, "
                   f"{ta['error']} errors, {ta['skipped']} skipped; pass rate "
                   f"**{100 * ta['pass_rate']:.1f}%**.")
    kinds = collections.Counter()
    for r in ra:
        for row in r["rows"]:
            if row["outcome"] in ("failed", "error"):
                kinds[kind_of(row.get("cause", ""))] += 1
    where = {label: fix for label, fix, _ in KINDS}
    out += ["", "### Kinds of cause left", "", "| tests | kind | where the fix belongs |",
            "|---|---|---|"]
    for label, n in kinds.most_common():
        out.append(f"| {n} | {label} | {where.get(label, '?')} |")
    out += ["", "### Causes left", "", "| tests | cause | files |", "|---|---|---|"]
    for cause, n, files in causes(ra):
        shown = ", ".join(files[:6]) + (f" (+{len(files) - 6})" if len(files) > 6 else "")
        out.append(f"| {n} | `{cause[:160].replace('|', '/')}` | {shown} |")
    out += ["", "### Excluded", "", "| files | reason |", "|---|---|"]
    for pat, reason in EXCLUDE:
        out.append(f"| `{pat}` | {reason} |")
    out += ["", "### Per file", "",
            "| file | passed | failed | errors | skipped |" + (" before (p/f/e/s) |" if tb else ""),
            "|---|---|---|---|---|" + ("---|" if tb else "")]
    for r in sorted(ra, key=lambda r: r["file"]):
        line = f"| {r['file']} | {r['passed']} | {r['failed']} | {r['error']} | {r['skipped']} |"
        if tb:
            b = by_file_before.get(r["file"])
            line += (f" {b['passed']}/{b['failed']}/{b['error']}/{b['skipped']} |" if b else " - |")
        out.append(line)
    head = DOCS.read_text().split(DOCS_MARKER)[0] if DOCS.exists() else "# torch_npu's own tests\n\n"
    DOCS.write_text(head + "\n".join(out) + "\n")
    print(f"wrote {DOCS}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("test_dir", nargs="?", help="op-plugin's test/ folder (fetched)")
    ap.add_argument("--sample", type=int, help="run a seeded random sample of N files")
    ap.add_argument("-k", dest="pattern", help="only files whose name contains one of these "
                    "(comma-separated)")
    ap.add_argument("--jobs", type=int, default=2, help="files at a time (at most 2 here)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per file")
    ap.add_argument("--out", help="write the results (JSON) here")
    ap.add_argument("--mem-gib", type=float, default=8,
                    help="cap on each file's writable memory in GiB (RLIMIT_DATA)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with SimNPU")
    ap.add_argument("--write-docs", metavar="RESULTS", help="render RESULTS into the docs page")
    ap.add_argument("--before", help="with --write-docs: the results before the fixes")
    ap.add_argument("--rerun-failed", metavar="RESULTS",
                    help="run only the files with failures or errors in RESULTS and write "
                    "RESULTS updated with them to --out (files that passed keep their rows)")
    ap.add_argument("--list", action="store_true", help="print the selected files and stop")
    args = ap.parse_args()

    if args.write_docs:
        before = json.loads(Path(args.before).read_text()) if args.before else None
        write_docs(json.loads(Path(args.write_docs).read_text()), before)
        return 0
    if not args.test_dir:
        ap.error("give the path of op-plugin's test/ folder (or --write-docs RESULTS)")
    test_dir = Path(args.test_dir).resolve()
    if not (test_dir / "test_base_ops").is_dir():
        ap.error(f"{test_dir} has no test_base_ops/: give op-plugin's test/ folder")
    if args.jobs < 1 or args.jobs > 2:
        ap.error("--jobs must be 1 or 2 (the machine is shared)")
    files = select_files(test_dir, args.sample, args.pattern)
    kept = []
    if args.rerun_failed:
        previous = json.loads(Path(args.rerun_failed).read_text())["results"]
        redo = {r["file"] for r in previous if r["failed"] + r["error"]}
        files = [f for f in files if f in redo]
        kept = [r for r in previous if r["file"] not in set(files)]
    if args.list:
        print("\n".join(files))
        return 0
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_one, test_dir, f, args.timeout, args.python,
                               args.mem_gib): f for f in files}
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            results.append(r)
            print(f"[{len(results)}/{len(files)}] {r['file']}: {r['passed']} passed, "
                  f"{r['failed']} failed, {r['error']} errors, {r['skipped']} skipped "
                  f"({r['seconds']}s) {r['status'] if r['status'] != 'ran' else ''}", flush=True)
    results += kept
    print_report(results)
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"source": str(test_dir), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "results": sorted(results, key=lambda r: r["file"])}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
