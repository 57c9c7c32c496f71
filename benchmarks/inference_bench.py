"""Offline inference latency: the .om engine against onnxruntime's CPU provider on the same
ONNX file and thread count, and against eager PyTorch (CPU, and npu through torch_npu), in one
run. Issue 15's goals: engine / onnxruntime <= 1.5 (moonshot 1.0); engine faster than eager npu.

  mlp      4 Linear layers (512 wide), batch 64
  cnn      conv-BN-relu x3 with pooling, 3x64x64 images, batch 8 (BNs folded by atc)
  encoder  one transformer encoder layer (d=128, 4 heads), batch 4 x 64 tokens
  cnn b=N  the same CNN (first convolution on 3 input channels) at batch 1, 2, 4, 8: one .om
           with batch gears (atc --dynamic_batch_size=1,2,4,8, infer mode "dymbatch") against
           onnxruntime on the ONNX file with a dynamic batch axis
  decoder  a GPT-2-shaped decoder with a static KV cache (tests/python/onnx_models.py's
           KVCacheDecoder: d=256, 4 heads, 4 layers, vocab 2048, cache 128): the prefill gear
           (32 tokens) and the decode gear (1 token) of one .om (atc --dynamic_dims), each call
           feeding and returning both caches (2 x 512 KiB), against onnxruntime the same way

Each variant's figure is the median of `--calls` timed calls after a warm-up, each call taking
and returning host arrays (InferSession.infer copies in and out; so does onnxruntime's run);
"engine exec" is aclmdlExecute alone. Ratios are per model: engine / onnxruntime and
engine / eager npu (lower is better).

    .venv/bin/python benchmarks/inference_bench.py [--calls N] [--threads N]

On a loaded machine wall times say little (other processes take the cores, onnxruntime's
threads worst); --cpu-time reports each variant's process CPU time per call instead, which the
load barely moves. It is meaningful with one thread each:

    NPU_KERNEL_THREADS=1 .venv/bin/python benchmarks/inference_bench.py --cpu-time --threads 1
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import torch_npu  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from onnx_models import (Encoder, KV_INPUTS, KVCacheDecoder, export_kv_decoder,  # noqa: E402
                         kv_decoder_input_shape)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                 nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for out in (32, 64, 128):
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(),
                       nn.MaxPool2d(2)]
            c = out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


MODELS = {"mlp": (MLP, (64, 256)), "cnn": (CNN, (8, 3, 64, 64)),
          "encoder": (lambda: Encoder(128, 4), (4, 64, 128))}


def median_ms(fn, calls, warmup_s=0.3):
    # Every variant warms up for the same time first: the first tens of calls run up to 2x slower
    # here (fresh pages, parked thread pools, the CPU's clock).
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def cpu_ms(fn, calls, warmup_s=0.3):
    """Process CPU time per call (every thread of the process), after the same warm-up."""
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        fn()
    t = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t) / calls * 1000


_TIMER = [median_ms]  # main() sets cpu_ms for --cpu-time


def measure(fn, calls):
    return _TIMER[0](fn, calls)


def bench(name, calls, threads, directory):
    import onnxruntime as ort
    from ais_bench.infer.interface import InferSession

    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().eval()
    x = torch.randn(*shape)
    onnx_path = os.path.join(directory, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), onnx_path, dynamo=False, input_names=["x"],
                          opset_version=17, do_constant_folding=False)
    subprocess.run([sys.executable, "-m", "atc", f"--model={onnx_path}", "--framework=5",
                    f"--output={os.path.join(directory, name)}", "--soc_version=Ascend910B2"],
                   check=True, capture_output=True)
    session = InferSession(0, os.path.join(directory, f"{name}.om"))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    ort_session = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    xn = x.numpy()
    (ref,) = ort_session.run(None, {"x": xn})
    (got,) = session.infer([xn])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)  # the same computation
    model_npu, x_npu = cls().eval(), x.npu()
    model_npu.load_state_dict(model.state_dict())
    model_npu = model_npu.npu()

    def eager_npu():
        with torch.no_grad():
            return model_npu(x_npu).cpu()

    def eager_cpu():
        with torch.no_grad():
            return model(x)

    row = {"engine": measure(lambda: session.infer([xn]), calls)}
    session.reset_summaryinfo()
    for _ in range(calls):
        session.infer([xn])
    row["engine exec"] = statistics.median(session.summary()["compute"])
    row["onnxruntime"] = measure(lambda: ort_session.run(None, {"x": xn}), calls)
    row["torch cpu eager"] = measure(eager_cpu, calls)
    row["torch_npu eager"] = measure(eager_npu, calls)
    session.free_resource()
    return row


def _ort(onnx_path, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])


def _atc(onnx_path, out, *extra):
    subprocess.run([sys.executable, "-m", "atc", f"--model={onnx_path}", "--framework=5",
                    f"--output={out}", "--soc_version=Ascend910B2", *extra],
                   check=True, capture_output=True)
    return out + ".om"


def bench_cnn_batches(calls, threads, directory):
    """{"cnn b=N": (engine ms, onnxruntime ms)} for the gears of one dynamic-batch .om."""
    from ais_bench.infer.interface import InferSession
    torch.manual_seed(0)
    model = CNN().eval()
    onnx_path = os.path.join(directory, "cnn_dyn.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(2, 3, 64, 64),), onnx_path, dynamo=False,
                          input_names=["x"], opset_version=17, do_constant_folding=False,
                          dynamic_axes={"x": {0: "N"}})
    om = _atc(onnx_path, os.path.join(directory, "cnn_dyn"), "--input_shape=x:-1,3,64,64",
              "--dynamic_batch_size=1,2,4,8")
    session, ort_session = InferSession(0, om), _ort(onnx_path, threads)
    out = {}
    for b in (1, 2, 4, 8):
        xn = torch.randn(b, 3, 64, 64).numpy()
        (ref,) = ort_session.run(None, {"x": xn})
        (got,) = session.infer([xn], mode="dymbatch")
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        out[f"cnn b={b}"] = (measure(lambda: session.infer([xn], mode="dymbatch"), calls),
                             measure(lambda: ort_session.run(None, {"x": xn}), calls))
    session.free_resource()
    return out


def bench_decoder(calls, threads, directory):
    """{"decoder prefill" / "decoder decode": (engine ms, onnxruntime ms)}."""
    from ais_bench.infer.interface import InferSession
    torch.manual_seed(0)
    model = KVCacheDecoder(vocab=2048, d=256, heads=4, layers=4, context=128).eval()
    onnx_path = export_kv_decoder(model, os.path.join(directory, "kv.onnx"), prompt=32)
    om = _atc(onnx_path, os.path.join(directory, "kv"),
              f"--input_shape={kv_decoder_input_shape(model)}",
              "--dynamic_dims=32,32,32,32;1,1,1,1")
    session, ort_session = InferSession(0, om), _ort(onnx_path, threads)
    ck, cv = (c.numpy() for c in model.empty_cache())
    out = {}
    for label, ids, start in (("decoder prefill", torch.randint(0, 2048, (1, 32)), 0),
                              ("decoder decode", torch.randint(0, 2048, (1, 1)), 40)):
        feeds = [ids.numpy()] + [t.numpy() for t in model.step_inputs(ids, start)] + [ck, cv]
        got = session.infer(feeds, mode="dymdims")
        ref = ort_session.run(None, dict(zip(KV_INPUTS, feeds)))
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
        out[label] = (measure(lambda: session.infer(feeds, mode="dymdims"), calls),
                      measure(lambda: ort_session.run(None, dict(zip(KV_INPUTS, feeds))),
                                calls))
    session.free_resource()
    return out


def gears_main(args):
    """The CNN's batch gears and the decoder's gears: engine / onnxruntime, per run and the
    median over --runs runs (each run a median of --calls calls)."""
    runs: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.runs):
            rows = {}
            if args.only in ("all", "cnn"):
                rows.update(bench_cnn_batches(args.calls, args.threads, d))
            if args.only in ("all", "decoder"):
                rows.update(bench_decoder(args.calls, args.threads, d))
            for k, v in rows.items():
                runs.setdefault(k, []).append(v)
    print(f"{'case':<17}{'engine ms':>11}{'ort ms':>10}{'median':>8}  engine/ort per run")
    for k, v in runs.items():
        ratios = [e / o for e, o in v]
        print(f"{k:<17}{statistics.median(e for e, _ in v):>11.3f}"
              f"{statistics.median(o for _, o in v):>10.3f}{statistics.median(ratios):>8.2f}  "
              + ", ".join(f"{x:.2f}" for x in ratios))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--runs", type=int, default=3, help="runs of the gear cases (median taken)")
    p.add_argument("--only", default="all", choices=("all", "static", "cnn", "decoder"),
                   help="static: the three models of issue 15; cnn / decoder: the gear cases")
    p.add_argument("--cpu-time", action="store_true",
                   help="process CPU time per call instead of the median wall time (use with "
                        "--threads 1 and NPU_KERNEL_THREADS=1)")
    args = p.parse_args()
    if args.cpu_time:
        _TIMER[0] = cpu_ms
    torch.set_num_threads(args.threads)
    what = "process CPU ms per call over" if args.cpu_time else "median of"
    print(f"threads: {args.threads} (onnxruntime intra-op, torch; the engine's kernel pool uses "
          f"{os.environ.get('NPU_KERNEL_THREADS', 'all')} cores); {what} {args.calls} calls; "
          f"load average {os.getloadavg()[0]:.2f} (a shared machine: compare ratios of one run)")
    if args.only != "static":
        gears_main(args)
    if args.only not in ("all", "static"):
        return
    cols = ["engine", "engine exec", "onnxruntime", "torch cpu eager", "torch_npu eager"]
    print(f"{'model':<9}" + "".join(f"{c + ' ms':>19}" for c in cols)
          + f"{'engine/ort':>12}{'engine/npu':>12}")
    with tempfile.TemporaryDirectory() as d:
        for name in MODELS:
            row = bench(name, args.calls, args.threads, d)
            print(f"{name:<9}" + "".join(f"{row[c]:>19.3f}" for c in cols)
                  + f"{row['engine'] / row['onnxruntime']:>12.2f}"
                  + f"{row['engine'] / row['torch_npu eager']:>12.2f}")


if __name__ == "__main__":
    main()
