"""Two ranks under shadow execution: rank 0 computes EXTRA matmuls before an all_reduce of
64 MiB that both ranks then wait for. Each rank writes OUT_DIR/rank<R>.json with the simulated
time from before its compute to after the collective, the modeled time of one matmul, and the
cost model's figures, so the test can check that the clocks met (rank 1 waited for rank 0) and
that the collective took its modeled time on top."""
import json
import os
import sys

import torch
import torch.distributed as dist

import torch_npu

OUT_DIR, EXTRA = sys.argv[1], int(sys.argv[2])
RANK = int(os.environ["RANK"])
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("hccl")
a = torch.empty(2048, 2048, device="npu", dtype=torch.bfloat16)
grad = torch.empty(16 * 2**20, device="npu")  # 64 MiB of float32
dist.all_reduce(grad)                          # a first collective: both clocks meet here
torch.npu.synchronize()
start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
start.record()
for _ in range(EXTRA if RANK == 0 else 0):
    a = a @ a
work = dist.all_reduce(grad, async_op=True)
work.wait()
end.record()
end.synchronize()
meta = torch.empty(2048, 2048, device="meta", dtype=torch.bfloat16)
with open(os.path.join(OUT_DIR, f"rank{RANK}.json"), "w") as f:
    json.dump({"rank": RANK, "elapsed_ms": start.elapsed_time(end),
               "mm_ns": torch_npu._C._npu_modelOp("aten::mm", [meta, meta], [meta])[3],
               "model": torch_npu.npu.shadow.installed_profile()["model"]}, f)
dist.destroy_process_group()
