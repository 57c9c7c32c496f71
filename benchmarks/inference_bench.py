"""Offline inference latency: the .om engine against onnxruntime's CPU provider on the same
ONNX file and thread count, and against eager PyTorch (CPU, and npu through torch_npu), in one
run. Issue 15's goals: engine / onnxruntime <= 1.5 (moonshot 1.0); engine faster than eager npu.

  mlp      4 Linear layers (512 wide), batch 64
  cnn      conv-BN-relu x3 with pooling, 3x64x64 images, batch 8 (BNs folded by atc)
  encoder  one transformer encoder layer (d=128, 4 heads), batch 4 x 64 tokens

Each variant's figure is the median of `--calls` timed calls after a warm-up, each call taking
and returning host arrays (InferSession.infer copies in and out; so does onnxruntime's run);
"engine exec" is aclmdlExecute alone. Ratios are per model: engine / onnxruntime and
engine / eager npu (lower is better).

    .venv/bin/python benchmarks/inference_bench.py [--calls N] [--threads N]
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
from onnx_models import Encoder  # noqa: E402


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

    row = {"engine": median_ms(lambda: session.infer([xn]), calls)}
    session.reset_summaryinfo()
    for _ in range(calls):
        session.infer([xn])
    row["engine exec"] = statistics.median(session.summary()["compute"])
    row["onnxruntime"] = median_ms(lambda: ort_session.run(None, {"x": xn}), calls)
    row["torch cpu eager"] = median_ms(eager_cpu, calls)
    row["torch_npu eager"] = median_ms(eager_npu, calls)
    session.free_resource()
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads: {args.threads} (onnxruntime intra-op, torch; the engine's kernel pool uses "
          f"{os.environ.get('NPU_KERNEL_THREADS', 'all')} cores); median of {args.calls} calls")
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
