"""`python -m ais_bench`: run an .om over input files (or zeros) and print ais_bench's
performance summary."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

OUTFMTS = ("NPY", "BIN", "TXT")


def _parser():
    p = argparse.ArgumentParser(prog="python -m ais_bench",
                                description="Run an offline model (.om) and time it.")
    p.add_argument("--model", required=True, help="the .om file")
    p.add_argument("--input", help="input files: one directory (or file) per model input, "
                   "comma-separated; .npy or raw .bin. Without it, inputs are zeros")
    p.add_argument("--output", help="directory for the outputs (not written without it)")
    p.add_argument("--outfmt", default="BIN", help="NPY, BIN or TXT")
    p.add_argument("--loop", type=int, default=1, help="runs per input")
    p.add_argument("--batchsize", type=int, default=None,
                   help="samples per run, for the throughput figure (default: dim 0)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--warmup_count", type=int, default=1)
    p.add_argument("--dymBatch", type=int, default=0,
                   help="the batch gear to run (a model converted with atc --dynamic_batch_size)")
    p.add_argument("--dymDims", default=None,
                   help='the dims gear to run, every input\'s shape: "x:1,32;y:1,32" (a model '
                   'converted with atc --dynamic_dims)')
    p.add_argument("--dymShape", default=None, help="not supported: use --dymDims")
    return p


def _gear_shapes(args, inputs) -> list[list[int]] | None:
    """The input shapes of the gear --dymBatch / --dymDims name (None: static)."""
    if args.dymBatch:
        return [[args.dymBatch] + t.shape[1:] for t in inputs]
    if args.dymDims:
        shapes = {}
        for item in args.dymDims.split(";"):
            name, _, dims = item.rpartition(":")
            shapes[name] = [int(d) for d in dims.split(",")]
        missing = [t.name for t in inputs if t.name not in shapes]
        if missing:
            raise ValueError(f"--dymDims {args.dymDims} does not give the inputs {missing}; "
                             "give every input as name:d0,d1,... separated by ;")
        return [shapes[t.name] for t in inputs]
    return None


def _files(spec: str) -> list[str]:
    if os.path.isdir(spec):
        return sorted(os.path.join(spec, f) for f in os.listdir(spec)
                      if f.endswith((".npy", ".bin")))
    return [spec]


def _load(path: str, t, shape) -> np.ndarray:
    if path.endswith(".npy"):
        return np.load(path)
    return np.fromfile(path, dtype=t.datatype).reshape(shape)


def _stats(name: str, ms: list[float]) -> str:
    a = np.asarray(ms)
    return (f"[INFO] {name} (ms): min = {a.min():.4f}, max = {a.max():.4f}, "
            f"mean = {a.mean():.4f}, median = {np.median(a):.4f}, "
            f"percentile(99%) = {np.percentile(a, 99):.4f}")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.outfmt not in OUTFMTS:
        print(f"[ERROR] --outfmt {args.outfmt} is invalid: use one of {', '.join(OUTFMTS)}",
              file=sys.stderr)
        return 1
    if args.loop < 1:
        print("[ERROR] --loop must be at least 1", file=sys.stderr)
        return 1
    from ais_bench._acl import AclError
    from ais_bench.infer.interface import InferSession
    try:
        session = InferSession(args.device, args.model)
    except AclError as e:
        print(f"[ERROR] {e}", file=sys.stderr)
        return 1
    inputs = session.get_inputs()
    if args.dymShape:
        print("[ERROR] --dymShape is not supported: this engine runs gears only; convert with "
              "atc --dynamic_dims and run with --dymDims", file=sys.stderr)
        return 1
    if args.dymBatch and args.dymDims:
        print("[ERROR] --dymBatch and --dymDims are mutually exclusive", file=sys.stderr)
        return 1
    mode = "dymbatch" if args.dymBatch else "dymdims" if args.dymDims else "static"
    try:
        shapes = _gear_shapes(args, inputs) or [t.shape for t in inputs]
    except ValueError as e:
        print(f"[ERROR] {e}", file=sys.stderr)
        return 1
    if args.input:
        specs = args.input.split(",")
        if len(specs) != len(inputs):
            print(f"[ERROR] --input gives {len(specs)} paths; the model has {len(inputs)} "
                  "inputs", file=sys.stderr)
            return 1
        per_input = [_files(s) for s in specs]
        if any(len(f) != len(per_input[0]) for f in per_input):
            print("[ERROR] every --input directory must hold the same number of files",
                  file=sys.stderr)
            return 1
        samples = [(os.path.splitext(os.path.basename(group[0]))[0],
                    [_load(f, t, shape) for f, t, shape in zip(group, inputs, shapes)])
                   for group in zip(*per_input)]
    else:
        samples = [("pure_infer_data", [np.zeros(shape, t.datatype)
                                        for t, shape in zip(inputs, shapes)])]
    for stem, feeds in samples[:1]:
        try:
            for _ in range(args.warmup_count):
                session.infer(feeds, mode=mode)
        except (AclError, ValueError) as e:
            print(f"[ERROR] {stem}: {e}", file=sys.stderr)
            return 1
    session.reset_summaryinfo()
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    for stem, feeds in samples:
        try:
            for _ in range(args.loop):
                outs = session.infer(feeds, mode=mode)
        except (AclError, ValueError) as e:
            print(f"[ERROR] {stem}: {e}", file=sys.stderr)
            return 1
        if args.output:
            for i, out in enumerate(outs):
                base = os.path.join(args.output, f"{stem}_{i}")
                if args.outfmt == "NPY":
                    np.save(base + ".npy", out)
                elif args.outfmt == "BIN":
                    out.tofile(base + ".bin")
                else:
                    np.savetxt(base + ".txt", out.reshape(out.shape[0] if out.ndim else 1, -1))
    s = session.summary()
    batch = args.batchsize or (shapes[0][0] if inputs and shapes[0] else 1)
    compute = float(np.mean(s["compute"]))
    print("[INFO] -----------------Performance Summary------------------")
    print(_stats("H2D_latency", s["h2d"]))
    print(_stats("NPU_compute_time", s["compute"]))
    print(_stats("D2H_latency", s["d2h"]))
    print(f"[INFO] throughput 1000*batchsize.mean({batch})/NPU_compute_time.mean"
          f"({compute:.4f}): {1000 * batch / compute:.2f}")
    print("[INFO] ------------------------------------------------------")
    session.free_resource()
    return 0
