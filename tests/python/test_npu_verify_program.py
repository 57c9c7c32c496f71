"""The article's verification program, run verbatim."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_article_program_prints_its_three_lines():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "verify_install.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == ["True", "torch.Size([100, 100])", "Ascend910B2"], r.stdout
