"""The ops of the LLaMA-style d=128 training step at 4x its batch (train_bench.py's slowest
row), npu against the CPU device at the same shapes: process CPU time per call, devices
alternating in rounds within one process, medians. Run it with one kernel thread so that the
CPU time is steady on a loaded machine (the CPU device is set to one thread here):

    NPU_KERNEL_THREADS=1 .venv/bin/python benchmarks/train_ops_bench.py [NAME-SUBSTRING ...]

Prints one line an op: cpu us, npu us, npu/cpu."""
import statistics
import sys
import time

import torch

import torch_npu  # noqa: F401
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)


def R(*shape):
    return torch.randn(*shape, generator=g)


def mm(m, k, n, layout):
    """A [m, k] @ [k, n] product; layout "tn" etc.: which operand is a transposed view."""
    def make(d):
        a = R(k, m).to(d).t() if layout[0] == "t" else R(m, k).to(d)
        b = R(n, k).to(d).t() if layout[1] == "t" else R(k, n).to(d)
        return torch.mm, a, b
    return make


def op(fn, *shapes, index=None):
    """fn over random float32 tensors of `shapes` (and an index tensor made by `index`)."""
    def make(d):
        args = [R(*s).to(d) for s in shapes]
        if index is not None:
            args.append(index().to(d))
        return (fn, *args)
    return make


def rotate_half_parts(x):
    return torch.cat((-x.chunk(2, -1)[1], x.chunk(2, -1)[0]), -1)


MASK = torch.ones(64, 64, dtype=torch.bool).triu(1)
CASES = {
    "mm 4096x352@352x128 (B^T)": mm(4096, 352, 128, "nt"),
    "mm 4096x128@128x352 (B^T)": mm(4096, 128, 352, "nt"),
    "mm 4096x128@128x128 (B^T)": mm(4096, 128, 128, "nt"),
    "mm 4096x128@128x128": mm(4096, 128, 128, "nn"),
    "mm 4096x352@352x128": mm(4096, 352, 128, "nn"),
    "mm (A^T) 128x4096@4096x128": mm(128, 4096, 128, "tn"),
    "mm (A^T) 352x4096@4096x128": mm(352, 4096, 128, "tn"),
    "mm (A^T) 128x4096@4096x256": mm(128, 4096, 256, "tn"),
    "mm 4096x128@128x256 (B^T)": mm(4096, 128, 256, "nt"),
    "mm 4096x256@256x128": mm(4096, 256, 128, "nn"),
    "bmm 256x64x64@64x32": op(torch.bmm, (256, 64, 64), (256, 64, 32)),
    "bmm 256x64x32@32x64": op(torch.bmm, (256, 64, 32), (256, 32, 64)),
    "bmm q@kT (strided views)": op(lambda q, k: q.transpose(1, 2) @ k.transpose(1, 2).mT,
                                  (64, 64, 4, 32), (64, 64, 4, 32)),
    "index_select 256x128 [4096]": op(lambda w, i: w.index_select(0, i), (256, 128),
                                      index=lambda: torch.randint(0, 256, (4096,), generator=g)),
    "pow [64,64,128]^2": op(lambda x: x.pow(2), (64, 64, 128)),
    "mean(-1,keepdim) [64,64,128]": op(lambda x: x.mean(-1, keepdim=True), (64, 64, 128)),
    "sum(-1,keepdim) [64,64,128]": op(lambda x: x.sum(-1, keepdim=True), (64, 64, 128)),
    "sum(0,1) [64,64,128]*[64,64,128]": op(lambda a, b: (a * b).sum((0, 1)), (64, 64, 128),
                                          (64, 64, 128)),
    "mul [64,64,128]*[128]": op(torch.mul, (64, 64, 128), (128,)),
    "mul [64,64,128]*[64,64,1]": op(torch.mul, (64, 64, 128), (64, 64, 1)),
    "mul q*cos [64,4,64,32]*[64,32]": op(torch.mul, (64, 4, 64, 32), (64, 32)),
    "add [64,64,128]+[64,64,128]": op(torch.add, (64, 64, 128), (64, 64, 128)),
    "rotate_half (neg, cat) [64,4,64,32]": op(rotate_half_parts, (64, 4, 64, 32)),
    "masked_fill [64,4,64,64]": op(lambda a, m: a.masked_fill(m, float("-inf")),
                                   (64, 4, 64, 64), index=lambda: MASK),
    "div [64,4,64,64]/s": op(lambda a: a / 5.65, (64, 4, 64, 64)),
    "softmax [64,4,64,64]": op(lambda a: torch.softmax(a, -1), (64, 4, 64, 64)),
    "transpose copy [64,4,64,32]": op(lambda x: x.transpose(1, 2).contiguous(), (64, 4, 64, 32)),
    "embedding_dense_backward": op(
        lambda gr, i: torch.ops.aten.embedding_dense_backward(gr, i, 256, -1, False),
        (64, 64, 128), index=lambda: torch.randint(0, 256, (64, 64), generator=g)),
}


def main(only, rounds=7, calls=20):
    for name, make in CASES.items():
        if only and not any(o in name for o in only):
            continue
        fns = {dev: make(dev) for dev in ("cpu", "npu")}
        times = {"cpu": [], "npu": []}
        for r in range(rounds + 1):  # round 0 warms up
            for dev, (f, *args) in fns.items():
                c = time.process_time()
                for _ in range(calls):
                    f(*args)
                if dev == "npu":
                    torch.npu.synchronize()
                if r:
                    times[dev].append((time.process_time() - c) / calls * 1e6)
        c, n = statistics.median(times["cpu"]), statistics.median(times["npu"])
        print(f"{name:<40} cpu {c:9.1f} us  npu {n:9.1f} us  {n / c:5.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
