"""python -m torch_npu.utils.op_report on a user script."""

import re
import subprocess
import sys

SCRIPT = """
import torch, torch_npu
x = torch.ones(4, 4, device='npu')
for _ in range(3):
    y = x @ x
x.fill_(2.0)
torch.sinc(x)                                          # ATen's CPU kernel on the stream
x[x > 1]                                               # data-dependent: synchronizes
torch.ops.aten.batch_norm_update_stats(x, None, None, 0.1)   # no meta kernel: CPU fallback
(x.to(torch.complex64) * 2)                            # a dtype the library lacks
print('script ran ok')
"""


def row(out: str, op: str):
    m = re.search(rf"^{re.escape(op)}\s+(\d+)\s+(.+)$", out, re.M)
    return (int(m.group(1)), m.group(2).strip()) if m else None


def test_report_lists_ops_counts_and_how_they_ran(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "torch_npu.utils.op_report", str(script)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "script ran ok" in r.stdout
    assert row(r.stdout, "aten::mm") == (3, "npu kernel")
    assert row(r.stdout, "aten::fill_.Scalar")[1] == "npu kernel"
    assert row(r.stdout, "aten::sinc") == (1, "aten host kernel")
    assert row(r.stdout, "aten::index.Tensor") == (1, "aten host (sync)")
    assert row(r.stdout, "aten::batch_norm_update_stats") == (1, "cpu fallback")
    assert row(r.stdout, "aten::mul.Tensor") == (1, "aten host kernel")
    m = re.search(r"(\d+) ops, (\d+) calls: (\d+) npu kernel, (\d+) composite, (\d+) aten host "
                  r"kernel, (\d+) aten host \(sync\), (\d+) cpu fallback", r.stdout)
    assert m, r.stdout
    assert int(m.group(2)) == sum(int(m.group(i)) for i in range(3, 8))


def test_missing_script_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "torch_npu.utils.op_report", "nope.py"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert "script not found: nope.py" in r.stderr
