"""The `atc` command: CANN ATC's options and messages over atc.convert."""

from __future__ import annotations

import argparse
import json
import os
import sys

USAGE = "Try 'atc --help' for more information"
FRAMEWORKS = {"0": "Caffe", "1": "MindSpore (air)", "3": "TensorFlow", "5": "ONNX"}
SOC_VERSIONS = ("Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910A",
                "Ascend310P3", "Ascend310B1")


def _fail(message: str) -> int:
    print("ATC run failed, Please check the detail log, " + USAGE, file=sys.stderr)
    print(message, file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="atc", description="Convert an ONNX model into an offline "
                                "model (.om) for the SimNPU engine, or dump an .om as JSON.")
    p.add_argument("--mode", default="0", help="0: convert (default); 1: dump --om as --json")
    p.add_argument("--model", help="the ONNX model file")
    p.add_argument("--framework", help="5 (ONNX); the only framework this atc reads")
    p.add_argument("--output", help="output path; .om is appended when missing")
    p.add_argument("--input_shape", help='static input shapes, "x:1,3,224,224;y:1,10"')
    p.add_argument("--dynamic_batch_size", help='batch gears, "1,2,4,8", for the -1 batch '
                   'dimension of --input_shape')
    p.add_argument("--dynamic_dims", help='dims gears, "16;32;64" (one value per -1 of '
                   '--input_shape in each gear, gears separated by ;)')
    p.add_argument("--input_shape_range", help="not supported: use --dynamic_dims")
    p.add_argument("--input_format", default="NCHW", help="NCHW or ND (recorded only)")
    p.add_argument("--soc_version", help="the target chip, e.g. Ascend910B2")
    p.add_argument("--precision_mode", default="force_fp32",
                   help="force_fp32 (default; also cube_fp16in_fp32out, must_keep_origin_dtype) "
                        "or allow_fp32_to_fp16 / allow_fp32_to_bf16 (matrix ops in 16 bits)")
    p.add_argument("--log", default="null", help="debug, info, warning, error or null")
    p.add_argument("--om", help="--mode=1: the .om to dump")
    p.add_argument("--json", help="--mode=1: the JSON file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print("ATC start working now, please wait for a moment.")
    if args.mode == "1":
        return _dump(args)
    if args.mode != "0":
        return _fail(f"E10001: Value [{args.mode}] for parameter [--mode] is invalid. Reason: "
                     "the value must be 0 (convert) or 1 (om to json).")
    for opt in ("model", "framework", "output", "soc_version"):
        if getattr(args, opt) is None:
            return _fail(f"E10004: Parameter [--{opt}] is required in mode 0.")
    if args.framework != "5":
        known = FRAMEWORKS.get(args.framework)
        reason = (f"{known} models are not supported by this atc" if known
                  else "the value must be 0 (Caffe), 1 (MindSpore), 3 (TensorFlow) or 5 (ONNX)")
        return _fail(f"E10001: Value [{args.framework}] for parameter [--framework] is invalid. "
                     f"Reason: {reason}; convert from ONNX with --framework=5.")
    if args.soc_version not in SOC_VERSIONS:
        return _fail(f"E10001: Value [{args.soc_version}] for parameter [--soc_version] is "
                     f"invalid. Reason: the value must be one of {', '.join(SOC_VERSIONS)}.")
    if args.input_shape_range:
        return _fail(f"E10001: Value [{args.input_shape_range}] for parameter "
                     "[--input_shape_range] is invalid. Reason: shape ranges (dynamic shapes "
                     "planned at run time) are not supported by this engine, which plans its "
                     "memory once per shape: use --dynamic_dims (or --dynamic_batch_size) "
                     "with -1 in --input_shape to list the shapes as gears.")
    from atc.convert import PRECISION_MODES, ConvertError, convert
    if args.precision_mode not in PRECISION_MODES:
        known = args.precision_mode in ("force_fp16", "force_lowerprecision",
                                        "allow_mix_precision", "allow_mix_precision_fp16",
                                        "allow_mix_precision_bf16")
        reason = ("this engine runs vector ops in float32 only, so modes that lower them are "
                  "not supported" if known else "unknown precision mode")
        return _fail(f"E10001: Value [{args.precision_mode}] for parameter [--precision_mode] "
                     f"is invalid. Reason: {reason}; use one of "
                     f"{', '.join(PRECISION_MODES)}.")
    try:
        data, stats = convert(args.model, args.input_shape, args.soc_version,
                              args.precision_mode, args.dynamic_batch_size, args.dynamic_dims)
    except (ConvertError, NotImplementedError) as e:
        return _fail(str(e))
    except Exception as e:  # a bug in atc: still an ATC-style failure, with what broke
        import traceback
        traceback.print_exc()
        return _fail(f"E19999: internal error while converting {args.model}: "
                     f"{type(e).__name__}: {e}. This is a bug in atc; please report it.")
    out = args.output if args.output.endswith(".om") else args.output + ".om"
    with open(out, "wb") as f:
        f.write(data)
    if args.log in ("debug", "info"):
        print(f"[INFO] {stats['onnx_nodes']} ONNX nodes -> {stats['nodes']} engine nodes; "
              f"arena {stats['arena_bytes']} bytes (unshared {stats['unshared_bytes']}); "
              f"weights {stats['weight_bytes']} bytes"
              + (f"; {stats['gears']} gears" if stats.get("gears") else ""))
    print("ATC run success, welcome to the next use.")
    return 0


def _dump(args) -> int:
    if not args.om or not args.json:
        return _fail("E10004: --mode=1 needs --om (the model) and --json (the file to write).")
    from atc import om
    try:
        with open(args.om, "rb") as f:
            model = om.parse(f.read(), args.om)
    except (OSError, om.OmFormatError) as e:
        return _fail(f"E10003: {e}")
    with open(args.json, "w") as f:
        json.dump(om.to_json(model), f, indent=2, default=float)
        f.write("\n")
    print("ATC run success, welcome to the next use.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
