"""LLM decoding: Hugging Face ``generate`` on a LLaMA-shaped model, npu against PyTorch's CPU.

The model (issue 30, item 2): LlamaConfig with hidden 512, 8 layers, 8 heads / 2 kv heads (GQA),
intermediate 1376, vocabulary 32000, float32, random weights from a fixed seed. Each case is a
greedy ``generate`` of 128 new tokens after a 16-token random prompt:

  cpu eager        the model on PyTorch's CPU device, default (dynamic) cache
  npu eager        the model on npu, default cache
  npu static       npu, ``cache_implementation="static"``, eager
  npu compiled     npu, static cache, ``model.forward = torch.compile(model.forward,
                   fullgraph=True)`` (Inductor's default mode)
  npu graphs       npu, static cache, ``torch.compile(..., mode="reduce-overhead",
                   fullgraph=True)``, as Hugging Face documents it

Figures are tokens/s (batch x new tokens / wall time of the whole generate, prefill included),
the median of ``--runs`` timed generates after ``--warmup`` untimed ones (the compile and the
graph captures fall in the warm-up). Cases run grouped per device, cpu first. Every case's
tokens are compared with cpu eager's; a mismatch is printed loudly (never hidden in a ratio).

The machine's floor (printed with every run): each decode step reads every weight matrix of the
model once (the embedding only one row). ``floor`` times exactly that work with nothing else,
``F.linear`` of a batch-row activation through every Linear of the model back to back, on the
CPU device with one thread and with all, and on npu, and keeps the fastest pass seen: the
ceiling in tokens/s of a float32 decode step on this host, whatever its overheads (this VM's
memory speed moves between runs by up to 2x, so compare a ceiling only with its own run).

    .venv/bin/python benchmarks/decode_bench.py [--batches 1,8] [--runs 3] [--cases ...]

On a loaded machine wall time swings by several times (PyTorch's OpenMP threads wait on a busy
core); ``--cpu-time`` reports tokens per second of process CPU time instead, on one thread each:

    NPU_KERNEL_THREADS=1 .venv/bin/python benchmarks/decode_bench.py --cpu-time --threads 1

(the floor lines stay wall time, on that one thread).
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch

import torch_npu  # noqa: F401
from torch_npu.testing.timing import timed

CASES = ("cpu eager", "npu eager", "npu static", "npu compiled", "npu graphs")


def make_model(vocab):
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=512, intermediate_size=1376,
                                      num_hidden_layers=8, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def generate_fn(model, ids, new_tokens, static):
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    if static:
        kwargs["cache_implementation"] = "static"

    def run():
        with torch.no_grad():
            return model.generate(ids, **kwargs)
    return run


def floor(cpu_model, batches, runs):
    """Tokens/s ceiling per batch: the fastest the machine was seen to do the step's weight
    reads and GEMMs alone, through PyTorch's CPU kernels (one thread and all) and ours."""
    weights = [m.weight for m in cpu_model.modules() if isinstance(m, torch.nn.Linear)]
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    npu_weights = [w.detach().to("npu") for w in weights]
    ceilings = {}
    with torch.no_grad():
        for batch in batches:
            best = float("inf")
            threads = torch.get_num_threads()
            for device, ws, n in [("cpu", weights, 1), ("cpu", weights, threads),
                                  ("npu", npu_weights, threads)]:
                xs = {w.shape[1]: torch.randn(batch, w.shape[1], device=device) for w in ws}

                def step():
                    for w in ws:
                        torch.nn.functional.linear(xs[w.shape[1]], w)
                    if device == "npu":
                        torch.npu.synchronize()
                torch.set_num_threads(n)
                try:
                    step()
                    for _ in range(max(runs, 5) * 4):
                        start = time.perf_counter()
                        step()
                        best = min(best, time.perf_counter() - start)
                finally:
                    torch.set_num_threads(threads)
            ceilings[batch] = (batch / best, nbytes / best / 1e9)
    return nbytes, ceilings


def bench_case(case, cpu_model, prompts, args):
    device = case.split()[0]
    threads = torch.get_num_threads()
    if device == "cpu" and args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    try:
        return bench_device_case(case, device, cpu_model, prompts, args)
    finally:
        torch.set_num_threads(threads)


def bench_device_case(case, device, cpu_model, prompts, args):
    model = copy.deepcopy(cpu_model).to(device)
    if case in ("npu compiled", "npu graphs"):
        torch._dynamo.reset()
        mode = "reduce-overhead" if case == "npu graphs" else None
        model.forward = torch.compile(model.forward, mode=mode, fullgraph=True)
    static = case not in ("cpu eager", "npu eager")
    results = {}
    for batch in args.batches:
        ids = prompts[batch].to(device)
        run = generate_fn(model, ids, args.new_tokens, static)
        start = time.perf_counter()
        tokens = None
        for _ in range(args.warmup):
            tokens = run()
        warm = time.perf_counter() - start
        times = []
        for _ in range(args.runs):
            holder = {}
            cpu_start = time.process_time()
            wall = timed(lambda: holder.setdefault("t", run()), device)
            times.append(time.process_time() - cpu_start if args.cpu_time else wall)
            tokens = holder["t"]
        results[batch] = (batch * args.new_tokens / statistics.median(times), tokens.cpu(),
                          warm, times)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="torch.set_num_threads for cpu eager (0: PyTorch's default)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="tokens per second of process CPU time instead of wall time: the "
                        "figure a loaded machine barely moves (run with NPU_KERNEL_THREADS=1 "
                        "--threads 1, so that no thread spins or waits on another's core)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads for every case (0: PyTorch's default)")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated subset of: " + ", ".join(CASES))
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = [c.strip() for c in args.cases.split(",")]
    if "cpu eager" not in cases:
        cases.insert(0, "cpu eager")  # the reference for tokens and ratios
    cpu_model = make_model(args.vocab)
    gen = torch.Generator().manual_seed(1)
    prompts = {b: torch.randint(0, args.vocab, (b, args.prompt), generator=gen)
               for b in args.batches}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads (cpu eager: {args.cpu_threads or 'default'}), {args.new_tokens} new tokens, prompt "
          f"{args.prompt}, median of {args.runs} after {args.warmup} warm-up, load average "
          f"{os.getloadavg()[0]:.1f}"
          + (", tokens per second of process CPU time" if args.cpu_time else ""))
    nbytes, ceilings = floor(cpu_model, args.batches, args.runs)
    table = {case: bench_case(case, cpu_model, prompts, args) for case in cases}
    mismatches = 0
    print(f"# finished {time.strftime('%H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| case | batch | tokens/s | / cpu eager | warm-up s | runs s | tokens |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        for batch in args.batches:
            tps, tokens, warm, times = table[case][batch]
            ref_tps, ref_tokens = table["cpu eager"][batch][:2]
            same = torch.equal(tokens, ref_tokens)
            mismatches += not same
            print(f"| {case} | {batch} | {tps:.1f} | {tps / ref_tps:.2f} | {warm:.1f} | "
                  + ", ".join(f"{t:.2f}" for t in times)
                  + f" | {'same' if same else '**MISMATCH**'} |")
    print(f"\nfloor: the step's {nbytes / 1e6:.0f} MB of Linear weights read once per token "
          "(F.linear through every Linear; fastest pass of cpu 1 thread, cpu all, npu):")
    for batch in args.batches:
        ceiling, bandwidth = ceilings[batch]
        ref_tps = table["cpu eager"][batch][0]
        print(f"  batch {batch}: at most {ceiling:.0f} tokens/s ({bandwidth:.1f} GB/s of weights)"
              f" = {ceiling / ref_tps:.2f}x cpu eager")
    if mismatches:
        print(f"!!! {mismatches} case(s) gave tokens different from cpu eager's !!!",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
