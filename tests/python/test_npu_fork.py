"""Fork safety: a child forked after the parent used npu gets PyTorch's bad-fork error."""


def test_forked_child_cannot_use_npu(python):
    code = """
import os, torch, torch_npu
x = torch.ones(3, device='npu')
pid = os.fork()
if pid == 0:
    try:
        torch.ones(3, device='npu')
        os._exit(3)
    except RuntimeError as e:
        ok = "Cannot re-initialize NPU in forked subprocess" in str(e) and "'spawn'" in str(e)
        os._exit(0 if ok else 4)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]


def test_fork_before_use_is_fine(python):
    code = """
import os, torch, torch_npu
pid = os.fork()
if pid == 0:
    x = torch.ones(3, device='npu')
    os._exit(0 if x.cpu().sum().item() == 3 else 5)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]
