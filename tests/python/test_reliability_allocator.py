"""expandable_segments:True gives back free pages anywhere in its ranges (the issue's case:
510 MiB free but cached behind one live tensor, and a 60 MiB allocation failed even after
empty_cache)."""

import pytest

CODE = """
import torch, torch_npu
MiB = 1 << 20
small = [torch.empty(MiB, dtype=torch.uint8, device='npu') for _ in range(510)]
last = small.pop()
last.fill_(7)
del small                                   # 509 MiB free but cached, behind `last`
if EMPTY_CACHE:
    torch.npu.empty_cache()
big = torch.ones(60 * MiB, dtype=torch.uint8, device='npu')
reserved = torch.npu.memory_reserved() // MiB
print(int(big.sum().item()), int(last.sum().item()), reserved,
      torch.npu.memory_stats()['num_ooms'])
"""


@pytest.mark.parametrize("empty_cache", [True, False])
def test_cached_free_pages_serve_a_large_allocation(python, empty_cache):
    r = python(CODE.replace("EMPTY_CACHE", str(empty_cache)),
               env={"NPU_SIM_HBM_GB": "0.5", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert r.returncode == 0, r.stderr
    total, last, reserved, ooms = (int(v) for v in r.stdout.split())
    assert total == 60 << 20
    assert last == 7 << 20          # the live tensor kept its data
    assert reserved == 62, r.stdout  # its page + the 60 MiB
    assert ooms == 0
