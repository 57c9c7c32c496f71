"""The stream sanitizer (TORCH_NPU_SANITIZER=1, torch_npu.npu._sanitizer): classic stream bugs are
reported naming both accesses (ops, streams, the script's lines), the same programs run silently
without it (why the tool is needed), the fixed programs give no report, and correct programs
(training with AMP, graph capture and replay) give none."""

import pytest

BANNER = "NPU sanitizer detected"

# Each bug: the racy program, what its report must name, and the fix.
BUGS = {
    "cross_stream_read_without_wait": dict(
        code="""
        import torch, torch_npu
        a = torch.ones(1 << 16, device="npu")
        side = torch.npu.Stream()
        b = a * 2                                    # the default stream writes b
        {fix}
        with torch.npu.stream(side):
            c = b + 1                                # the side stream reads it
        torch.npu.synchronize()
        print("sum", c.sum().item())
        """,
        fix="side.wait_stream(torch.npu.current_stream())",
        names=["aten::add.Tensor", "aten::mul.Tensor", "stream 0 on npu:0", "line 8", "line 5"]),
    "nonblocking_d2h_read_early": dict(
        code="""
        import torch, torch_npu
        x = torch.arange(1 << 16, dtype=torch.float32, device="npu") * 2
        host = torch.empty(1 << 16, pin_memory=True)
        host.copy_(x, non_blocking=True)
        {fix}
        print("sum", float(host.numpy().sum()))
        """,
        fix="torch.npu.current_stream().synchronize()",
        names=["Access by the host", "aten::_copy_from", "Tensor.numpy", "line 7", "line 5"]),
    "missing_record_stream_then_reuse": dict(  # the block is reused at once
        code="""
        import torch, torch_npu
        side = torch.npu.Stream()
        x = torch.ones(1 << 16, device="npu")
        side.wait_stream(torch.npu.current_stream())
        with torch.npu.stream(side):
            y = x * 3                                # the side stream reads x
        {fix}
        del x                                        # ... which the allocator may hand out now
        z = torch.zeros(1 << 16, device="npu")       # the default stream writes the same block
        torch.npu.synchronize()
        print("sum", y.sum().item())
        """,
        fix="x.record_stream(side)",
        names=["aten::zero_", "aten::mul.Tensor", "line 7", "line 10"]),
    "freed_on_its_stream_while_another_reads": dict(
        code="""
        import torch, torch_npu
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            x = torch.ones(1 << 16, device="npu")    # x is the side stream's allocation
        torch.npu.current_stream().wait_stream(side)
        y = x * 3                                    # the default stream reads it
        {fix}
        del x                                        # freed in the side stream's order
        with torch.npu.stream(side):
            z = torch.zeros(1 << 16, device="npu")   # which writes the same block at once
        torch.npu.synchronize()
        print("sum", y.sum().item())
        """,
        fix="x.record_stream(torch.npu.current_stream())",
        names=["aten::zero_", "aten::mul.Tensor", "stream 0 on npu:0", "line 7", "line 11"]),
    "graph_replay_output_read_on_another_stream": dict(  # an NPU graph's work, at its replay
        code="""
        import torch, torch_npu
        static = torch.ones(1 << 16, device="npu")
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g):
            out = static * 2                         # captured: runs at each replay
        side = torch.npu.Stream()
        g.replay()                                   # the default stream writes out
        {fix}
        with torch.npu.stream(side):
            z = out + 1                              # the side stream reads it
        torch.npu.synchronize()
        print("sum", z.sum().item())
        """,
        fix="side.wait_stream(torch.npu.current_stream())",
        names=["aten::add.Tensor", "aten::mul.Tensor", "captured into an NPU graph", "line 11",
               "line 6"]),
    "compiled_kernel_output_read_on_another_stream": dict(  # torch.compile's own kernels
        code="""
        import torch, torch_npu
        f = torch.compile(lambda x: x.sin() * 2 + 1)
        x = torch.ones(1 << 16, device="npu")
        f(x)                                         # compiles
        side = torch.npu.Stream()
        y = f(x)                                     # its kernel writes y on the default stream
        {fix}
        with torch.npu.stream(side):
            z = y * 3                                # the side stream reads it
        torch.npu.synchronize()
        print("sum", round(z.sum().item(), 1))
        """,
        fix="side.wait_stream(torch.npu.current_stream())",
        names=["compiled kernel", "(torch.compile, Inductor)", "writing to argument(s)",
               "aten::mul.Tensor", "line 10", "line 7"]),
    "uninitialised_read": dict(  # opt-in: NPU_SIM_SANITIZER_UNINIT=1
        code="""
        import torch, torch_npu
        x = torch.empty(1 << 10, device="npu")      # its bytes are whatever the block held
        {fix}
        y = x * 2
        print("sum", y.numel())
        """,
        fix="x.zero_()",
        env={"NPU_SIM_SANITIZER_UNINIT": "1"},
        titles=["read of uninitialised device memory", "Allocated by"],
        names=["aten::empty.memory_format", "aten::mul.Tensor", "line 3", "line 5"]),
}


def _run(python, spec, fix, sanitizer):
    env = {"TORCH_NPU_SANITIZER": "1" if sanitizer else "0", **spec.get("env", {})}
    return python(spec["code"].replace("{fix}", fix), env=env)


@pytest.mark.parametrize("bug", BUGS)
def test_a_classic_bug_is_reported_naming_both_accesses(python, bug):
    spec = BUGS[bug]
    r = _run(python, spec, "pass", sanitizer=True)
    assert r.returncode == 0, r.stderr
    assert BANNER in r.stderr, r.stderr
    report = r.stderr[r.stderr.index(BANNER):]
    for name in spec["names"]:
        assert name in report, (name, report)
    for title in spec.get("titles", ["possible data race", "Previous access"]):
        assert title in report, (title, report)
    assert "With stack trace" in report


@pytest.mark.parametrize("bug", BUGS)
def test_the_bug_runs_silently_without_the_sanitizer(python, bug):
    r = _run(python, BUGS[bug], "pass", sanitizer=False)
    assert r.returncode == 0, r.stderr
    assert BANNER not in r.stderr
    assert "sum" in r.stdout


@pytest.mark.parametrize("bug", BUGS)
def test_the_fixed_program_gives_no_report_and_the_right_numbers(python, bug):
    spec = BUGS[bug]
    fixed = _run(python, spec, spec["fix"], sanitizer=True)
    assert fixed.returncode == 0, fixed.stderr
    assert BANNER not in fixed.stderr, fixed.stderr
    plain = _run(python, spec, spec["fix"], sanitizer=False)
    assert fixed.stdout == plain.stdout


def test_training_with_amp_and_an_npu_graph_gives_no_report(python):
    r = python("""
        import torch, torch_npu
        from torch_npu.npu import _sanitizer
        assert _sanitizer.is_enabled()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                    torch.nn.LayerNorm(128), torch.nn.Linear(128, 10)).npu()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.npu.amp.GradScaler()
        x, y = torch.randn(32, 64).npu(), torch.randint(0, 10, (32,)).npu()
        for _ in range(3):
            with torch.autocast("npu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        # a prefetch on a side stream done right, and a graph replay
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            nxt = torch.randn(32, 64, pin_memory=True).to("npu", non_blocking=True)
        torch.npu.current_stream().wait_stream(side)
        nxt.record_stream(torch.npu.current_stream())
        static = torch.zeros(32, 64, device="npu")
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g):
            out = model(static) * 2
        static.copy_(nxt)
        g.replay()
        print(float(loss), out.sum().item(), len(_sanitizer.reports()))
        """, env={"TORCH_NPU_SANITIZER": "1"})
    assert r.returncode == 0, r.stderr
    assert BANNER not in r.stderr, r.stderr
    assert r.stdout.split()[-1] == "0"


def test_the_switch_and_the_module(python):
    r = python("""
        import torch, torch_npu
        from torch_npu.npu import _sanitizer
        print(_sanitizer.is_enabled())
        _sanitizer.enable_npu_sanitizer()
        print(_sanitizer.is_enabled())
        a = torch.ones(8, device="npu")
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            b = a + 1
        print(len(_sanitizer.reports()))
        _sanitizer.disable_npu_sanitizer()
        print(_sanitizer.is_enabled(), len(_sanitizer.reports()))
        """, env={"TORCH_NPU_SANITIZER": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "1", "False", "1"]
    bad = python("import torch_npu", env={"TORCH_NPU_SANITIZER": "yes"})
    assert bad.returncode != 0
    assert "TORCH_NPU_SANITIZER='yes' is not understood" in bad.stderr


COLLECTIVE = """
import torch, torch_npu
import torch.distributed as dist
dist.init_process_group("hccl")
rank = dist.get_rank()
torch.npu.set_device(rank)
t = torch.full((1 << 16,), float(rank + 1), device="npu")
work = dist.all_reduce(t, async_op=True)     # the communicator's stream writes t
{fix}
total = (t * 1).sum()                        # the default stream reads it
print(f"rank {rank} sum {total.item()}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("fixed", [False, True], ids=["async_op_without_wait", "with_wait"])
def test_a_collective_output_read_before_wait_is_reported_on_every_rank(tmp_path, fixed):
    from dist_launch import torchrun

    script = tmp_path / "allreduce_no_wait.py"
    script.write_text(COLLECTIVE.replace("{fix}", "work.wait()" if fixed else "pass"))
    r = torchrun(str(script), 2, env={"TORCH_NPU_SANITIZER": "1"}, timeout=180)
    assert r.returncode == 0, r.stdout[-4000:]
    expected = 2 * (1 << 16) * 3.0 if fixed else None
    for rank in (0, 1):
        assert f"rank {rank} sum" in r.stdout, r.stdout[-4000:]
    if fixed:
        assert BANNER not in r.stdout, r.stdout[-4000:]
        assert r.stdout.count(f"sum {expected / 2}") == 2, r.stdout[-4000:]
        return
    assert r.stdout.count(BANNER) >= 2, r.stdout[-4000:]  # one report per rank
    quiet = torchrun(str(script), 2, env={"TORCH_NPU_SANITIZER": "0"}, timeout=180)
    assert quiet.returncode == 0 and BANNER not in quiet.stdout, quiet.stdout[-4000:]
    assert all(f"rank {rank} sum" in quiet.stdout for rank in (0, 1)), quiet.stdout[-4000:]
    report = r.stdout[r.stdout.index(BANNER):]
    for name in ["c10d::ALLREDUCE", "on the communicator's stream", "aten::mul.Tensor",
                 "stream 0 on npu:", "line 10", "line 8"]:
        assert name in report, (name, report)


def test_the_readme_race_that_chaos_exposes_is_named(python):
    """README's worked example (NPU_SIM_SCHEDULE=chaos): mostly right in a normal run, named by
    the sanitizer in any run, with the lines of both accesses."""
    r = python("""
        import torch, torch_npu
        side = torch.npu.Stream()
        x = torch.zeros(4096, device="npu")
        wrong = 0
        for i in range(5):
            x.fill_(i + 1)                # default stream
            with torch.npu.stream(side):  # BUG: no side.wait_stream(...)
                y = x * 2                 # side stream
            side.synchronize()
            wrong += not bool((y.cpu() == 2 * (i + 1)).all())
        print("wrong", wrong)
        """, env={"TORCH_NPU_SANITIZER": "1"})
    assert r.returncode == 0, r.stderr
    report = r.stderr[r.stderr.index(BANNER):]
    for name in ["aten::mul.Tensor", "aten::fill_.Scalar", "line 9", "line 7",
                 "Previous access by stream 0 on npu:0"]:
        assert name in report, (name, report)
