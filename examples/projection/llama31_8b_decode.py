"""I1 of docs/projection_measurements.md: Llama-3.1-8B-Instruct decode latency on one 910B
(vllm-ascend's benchmark_latency: batch 8, input 32, output 128, bf16, eager; published 4.945 s
per batch, about 38.6 ms per decode step).

Here as a user would write it: HF LlamaForCausalLM from the model's configuration in bf16, a
prefill of the prompt, then a greedy decode loop with the KV cache (a loop, not `generate`:
under shadow execution the sampled tokens are placeholders, and generate's stopping check would
end at once). The decode steps are timed with NPU events, which follow the simulated clock:

    python -m torch_npu.utils.projection -- examples/projection/llama31_8b_decode.py
"""

import argparse
import json

import torch
import torch_npu  # noqa: F401
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=32)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--prompt", type=int, default=32)
ap.add_argument("--new-tokens", type=int, default=128)
ap.add_argument("--timed", type=int, default=8, help="decode steps timed (after 2 warm-up)")
ap.add_argument("--out", default=None)
args = ap.parse_args()

cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                  max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=False)
with torch.device("npu"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()

ids = torch.zeros(args.batch, args.prompt, dtype=torch.long, device="npu")
steps = min(args.new_tokens - 1, 2 + args.timed)
with torch.no_grad():
    out = model(ids, use_cache=True)
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    events = []
    for i in range(steps):
        if i == 2:
            events.append(torch.npu.Event(enable_timing=True))
            events[-1].record()
        out = model(token, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        token.cpu()  # the host reads each token, as a sampler does
    events.append(torch.npu.Event(enable_timing=True))
    events[-1].record()
    torch.npu.synchronize()
step_ms = events[0].elapsed_time(events[1]) / (steps - 2)
result = {"decode_step_ms": step_ms, "batch": args.batch, "layers": args.layers,
          "projected_batch_latency_s": step_ms * args.new_tokens / 1e3,
          "peak_allocated_bytes": torch.npu.max_memory_allocated()}
print(json.dumps(result))
if args.out:
    with open(args.out, "w") as f:
        json.dump(result, f)
