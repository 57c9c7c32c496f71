"""conv2d forward alone: the npu kernel (eager, synchronized) against torch's CPU conv2d and
onnxruntime (a one-node Conv + Relu model), for the layers of inference_bench.py's CNN at batch
1, 2, 4, 8. Float32, HF32 off (as in the offline engine). Reports the median ms per call and
GFLOP/s, so that a layer's ratio can be read next to the engine's per-op profile
(SIMNPU_ENGINE_PROFILE=1).

    NPU_KERNEL_THREADS=1 .venv/bin/python benchmarks/conv_forward_bench.py --threads 1
    .venv/bin/python benchmarks/conv_forward_bench.py [--batches 1,2,4,8] [--calls 200]

--threads sets torch's and onnxruntime's threads; the npu kernels' pool is sized by
NPU_KERNEL_THREADS (else OMP_NUM_THREADS, else the usable CPUs) when the process starts.
"""

import argparse
import io
import os

import numpy as np
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401
from inference_bench import median_ms  # same warm-up, then the median of the calls

LAYERS = [(3, 32, 64), (32, 64, 32), (64, 128, 16)]  # C_in, C_out, H = W; 3x3, padding 1




def ort_session(cin, cout, b, hw, threads):
    import onnxruntime as ort
    model = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.ReLU()).eval()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.randn(b, cin, hw, hw),), f, dynamo=False,
                      input_names=["x"], opset_version=17)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(f.getvalue(), opts, providers=["CPUExecutionProvider"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.npu.conv.allow_hf32 = False
    print(f"npu kernel threads: {os.environ.get('NPU_KERNEL_THREADS', 'default')}, "
          f"torch / onnxruntime threads: {args.threads}")
    print(f"{'layer':>22} {'npu ms':>8} {'cpu ms':>8} {'ort ms':>8} {'npu/ort':>8} "
          f"{'npu GFLOP/s':>12}")
    cases = [(int(b), *layer) for b in args.batches.split(",") for layer in LAYERS]
    # Each runner in its own pass, npu first: torch's OpenMP threads and onnxruntime's pool spin
    # for a while after a call, and would take the cores from the npu kernels' threads.
    npu_ms, cpu_ms, ort_ms = [], [], []
    for b, cin, cout, hw in cases:
        x, w, bias = (torch.randn(b, cin, hw, hw).npu(), torch.randn(cout, cin, 3, 3).npu(),
                      torch.randn(cout).npu())

        def npu():
            F.conv2d(x, w, bias, padding=1)
            torch.npu.synchronize()

        npu_ms.append(median_ms(npu, args.calls))
    for b, cin, cout, hw in cases:
        x, w, bias = torch.randn(b, cin, hw, hw), torch.randn(cout, cin, 3, 3), torch.randn(cout)
        cpu_ms.append(median_ms(lambda: F.conv2d(x, w, bias, padding=1), args.calls))
    for b, cin, cout, hw in cases:
        sess, xa = ort_session(cin, cout, b, hw, args.threads), np.random.randn(b, cin, hw, hw)
        xa = xa.astype(np.float32)
        ort_ms.append(median_ms(lambda: sess.run(None, {"x": xa}), args.calls))
    tot = {}
    for i, (b, cin, cout, hw) in enumerate(cases):
        t = (npu_ms[i], cpu_ms[i], ort_ms[i])
        tot[b] = [a + c for a, c in zip(tot.get(b, [0.0] * 3), t)]
        gflops = 2.0 * b * cout * cin * 9 * hw * hw / (t[0] * 1e6)
        print(f"{f'b={b} {cin}->{cout} {hw}x{hw}':>22} {t[0]:8.3f} {t[1]:8.3f} {t[2]:8.3f} "
              f"{t[0] / t[2]:8.2f} {gflops:12.0f}")
        if i + 1 == len(cases) or cases[i + 1][0] != b:
            n, c, o = tot[b]
            print(f"{f'b={b} all three':>22} {n:8.3f} {c:8.3f} {o:8.3f} {n / o:8.2f}")

if __name__ == "__main__":
    np.random.seed(0)
    main()
