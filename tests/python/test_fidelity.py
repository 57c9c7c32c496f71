"""Behaviours that must match PyTorch's CPU device (and so CUDA and torch_npu), each found
differing once (issue 16); the CPU result is the reference."""

import pytest
import torch

import torch_npu


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool])
def test_deterministic_mode_fills_new_memory(deterministic, dtype):
    for make in (lambda d: torch.empty(5, dtype=dtype, device=d),
                 lambda d: torch.empty_strided((2, 3), (3, 1), dtype=dtype, device=d)):
        cpu, npu = make("cpu"), make("npu")
        torch.testing.assert_close(npu.cpu(), cpu, equal_nan=True)
    # resize_ fills only the bytes it adds, as on the CPU
    cpu = torch.ones(2, dtype=dtype)
    npu = cpu.npu()
    cpu.resize_(6)
    npu.resize_(6)
    torch.testing.assert_close(npu.cpu(), cpu, equal_nan=True)


def test_uninitialized_memory_is_not_filled_by_default():
    assert not torch.are_deterministic_algorithms_enabled()
    a = torch.empty(1 << 16, device="npu")
    a.fill_(3.0)
    del a
    b = torch.empty(1 << 16, device="npu")  # the cached block, unfilled: no NaN written
    assert not torch.isnan(b).all().item()


@pytest.mark.parametrize("k", [0, 1])
def test_topk_of_a_0_dim_tensor(k):
    x = torch.tensor(42.5)
    ref = torch.topk(x, k)
    got = torch.topk(x.npu(), k)
    assert got.values.shape == ref.values.shape
    torch.testing.assert_close(got.values.cpu(), ref.values)
    torch.testing.assert_close(got.indices.cpu(), ref.indices)


# ---- torch_npu's run-time switches (torch_npu/npu/npu_config.py) -----------------------------

@pytest.fixture
def restore_npu_options():
    from torch_npu.npu import npu_config

    saved = dict(npu_config._options), npu_config._mm_bmm_format_nd
    yield
    npu_config._options.clear()
    npu_config._options.update(saved[0])
    npu_config._mm_bmm_format_nd = saved[1]
    npu_config._sync_hf32()  # the adapter's copy of the HF32 flags follows


def test_compile_mode_defaults_to_binary_ops_and_switches(restore_npu_options):
    # torch_npu on Atlas A2 (910B): jit_compile is off unless set.
    assert torch.npu.is_jit_compile_false() is True
    torch.npu.set_compile_mode(jit_compile=True)
    assert torch.npu.is_jit_compile_false() is False
    torch.npu.set_compile_mode(jit_compile=False)
    assert torch.npu.is_jit_compile_false() is True
    with pytest.raises(TypeError, match="expects a bool"):
        torch.npu.set_compile_mode(jit_compile="no")
    # ops compute the same whichever mode (our kernels are all precompiled)
    x = torch.randn(8, 8)
    torch.npu.set_compile_mode(jit_compile=True)
    torch.testing.assert_close((x.npu() @ x.npu()).cpu(), x @ x)


def test_set_option_checks_values_as_torch_npu(restore_npu_options):
    torch.npu.set_option({"ACL_PRECISION_MODE": "must_keep_origin_dtype", "ACL_AICORE_NUM": 8,
                          "MM_BMM_ND_ENABLE": "disable"})
    assert torch.npu.npu_config.get_option("ACL_AICORE_NUM") == "8"
    assert torch.npu.get_mm_bmm_format_nd() is False
    with pytest.raises(ValueError, match="ACL_PRECISION_MODE should be in"):
        torch.npu.set_option({"ACL_PRECISION_MODE": "fp64"})
    with pytest.raises(ValueError, match="ACL_AICORE_NUM"):
        torch.npu.set_option({"ACL_AICORE_NUM": "0"})
    with pytest.raises(TypeError, match="must be a dict"):
        torch.npu.set_option("ACL_PRECISION_MODE=must_keep_origin_dtype")


def test_hf32_flags_have_torch_npus_defaults(restore_npu_options):
    assert torch.npu.matmul.allow_hf32 is False and torch.npu.conv.allow_hf32 is True
    torch.npu.matmul.allow_hf32 = True
    assert torch.npu.matmul.allow_hf32 is True
    with pytest.raises(AttributeError, match="allow_hf32"):
        torch.npu.matmul.allow_tf32 = True


# ---- SDPA backend toggles (torch_npu/npu/_backends.py) ---------------------------------------

def _sdpa_ran_fused(q, k, v) -> bool:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.npu.synchronize()
    names = {e.name for e in prof.events()}
    return out, "aten::_scaled_dot_product_fused_attention_overrideable" in names


def test_flash_sdp_toggle_chooses_the_kernel_and_restores():
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    qn, kn, vn = q.npu(), k.npu(), v.npu()
    assert torch.npu.flash_sdp_enabled()
    out, fused = _sdpa_ran_fused(qn, kn, vn)
    assert fused
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-4)
    with torch.npu.sdp_kernel(enable_flash=False):
        assert not torch.npu.flash_sdp_enabled()
        out, fused = _sdpa_ran_fused(qn, kn, vn)
        assert not fused  # the math backend ran
        torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-4)
    assert torch.npu.flash_sdp_enabled() and torch.npu.math_sdp_enabled()
    try:
        torch.npu.enable_flash_sdp(False)
        assert not _sdpa_ran_fused(qn, kn, vn)[1]
    finally:
        torch.npu.enable_flash_sdp(True)
    assert _sdpa_ran_fused(qn, kn, vn)[1]
    with pytest.raises(TypeError, match="expects a bool"):
        torch.npu.enable_math_sdp("yes")


# ---- legacy typed classes (torch_npu/npu/_legacy_types.py) -----------------------------------

@pytest.mark.parametrize("name,dtype", [
    ("FloatTensor", torch.float32), ("HalfTensor", torch.float16),
    ("BFloat16Tensor", torch.bfloat16), ("LongTensor", torch.int64), ("BoolTensor", torch.bool),
    ("ByteTensor", torch.uint8)])
def test_legacy_tensor_classes(name, dtype):
    cls = getattr(torch.npu, name)
    t = cls(2, 3)
    assert t.shape == (2, 3) and t.dtype == dtype and t.device.type == "npu"
    data = cls([1, 0, 1])
    torch.testing.assert_close(data.cpu(), torch.tensor([1, 0, 1], dtype=dtype))
    assert cls().shape == (0,)
    assert isinstance(t, cls) and not isinstance(t.cpu(), cls)
    other = torch.npu.FloatTensor if dtype != torch.float32 else torch.npu.DoubleTensor
    assert not isinstance(t, other)
    with pytest.raises(ValueError, match="non-negative"):
        cls(-1)
    with pytest.raises(TypeError, match="convert it with"):
        cls(torch.zeros(2, dtype=torch.float64))
    # Tensor.type() names the class, and takes it (or its name) to convert, as with CUDA's
    assert t.type() == f"torch.npu.{name}" and repr(cls) == f"<class 'torch.npu.{name}'>"
    for target in (cls, f"torch.npu.{name}"):
        moved = torch.arange(3).type(target)
        assert moved.device.type == "npu" and moved.dtype == dtype


def test_legacy_storage_classes():
    s = torch.npu.FloatStorage(4)
    assert s.device.type == "npu" and s.dtype == torch.float32 and s.size() == 4
    assert isinstance(s, torch.npu.FloatStorage) and not isinstance(s, torch.npu.HalfStorage)
    assert torch.is_storage(s)
    b = torch.npu.BoolStorage([True, False])
    assert b.tolist() == [True, False] and b.device.type == "npu"


def test_empty_strided_npu_allocates_on_the_current_device():
    t = torch_npu._C._empty_strided_npu((2, 3), (1, 2), torch.float16)
    assert t.device == torch.device("npu", torch.npu.current_device())
    assert t.shape == (2, 3) and t.stride() == (1, 2) and t.dtype == torch.float16
    with pytest.raises(TypeError, match="must be a torch.dtype"):
        torch_npu._C._empty_strided_npu((2,), (1,), "float16")
    with pytest.raises(ValueError, match="size has 2 dimensions but stride has 1"):
        torch_npu._C._empty_strided_npu((2, 3), (1,), torch.float32)


# ---- device_count before initialisation (torch.cuda's and torch_npu's rule) ------------------

def test_device_count_follows_the_environment_until_init(python):
    r = python("""
        import os, torch, torch_npu
        print(torch.npu.device_count())
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "1,2,3"
        print(torch.npu.device_count(), torch.npu.is_initialized())
        torch.npu.init()
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0"
        print(torch.npu.device_count())
        x = torch.ones(1, device="npu:2")
        print(x.device)
    """, env={"NPU_SIM_DEVICE_COUNT": "4"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["4", "3", "False", "3", "npu:2"]


def test_device_count_before_init_warns_on_a_bad_visible_list(python):
    r = python("""
        import os, torch, torch_npu
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "2,1"
        print(torch.npu.device_count(), torch.npu.is_available())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False"]
    assert "ASCEND_RT_VISIBLE_DEVICES='2,1' is invalid" in r.stderr


def test_wrong_device_type_message_is_torch_npus():
    with pytest.raises(ValueError, match=r"^Expected a npu device, but got: cpu$"):
        torch.npu.synchronize("cpu")


# ---- torch_npu.npu.utils ---------------------------------------------------------------------

def test_npu_utils_answers_and_refusals():
    from torch_npu.npu import utils

    assert utils.synchronize is torch.npu.synchronize and utils.stream is torch.npu.stream
    count = torch.npu.device_count()
    assert torch.npu.can_device_access_peer(0, count - 1) is True
    with pytest.raises(AssertionError, match="Invalid peer device id"):
        torch.npu.can_device_access_peer(0, count)
    assert torch.npu.get_allocator_backend() == "native"
    assert torch.npu.get_sync_debug_mode() == 0
    torch.npu.set_sync_debug_mode("default")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.npu.set_sync_debug_mode(7)
    torch.npu.ipc_collect()
    with pytest.raises(NotImplementedError, match="overflow status register"):
        torch.npu.get_npu_overflow_flag()


# ---- CANN's logging: ASCEND_GLOBAL_LOG_LEVEL, ASCEND_SLOG_PRINT_TO_STDOUT, ... ----------------

_LOG_LINE = (r"^\[(DEBUG|INFO|WARNING|ERROR)\] ([A-Z]+)\((\d+),[^)]+\):\d{4}-\d{2}-\d{2}-"
             r"\d{2}:\d{2}:\d{2}\.\d{3}\.\d{3} \[[\w.]+:\d+\]\d+ \w+: ")


def _log_lines(text: str):
    import re

    return [(m.group(1), m.group(2), line) for line in text.splitlines()
            if (m := re.match(_LOG_LINE, line))]


def test_cann_log_to_stdout_covers_runtime_allocator_and_launches(python):
    r = python("""
        import torch, torch_npu
        x = torch.ones(1000, device="npu")
        y = (x * 2).sum()
        print("result", y.item())
    """, env={"ASCEND_GLOBAL_LOG_LEVEL": "0", "ASCEND_SLOG_PRINT_TO_STDOUT": "1"})
    assert r.returncode == 0, r.stderr
    lines = _log_lines(r.stdout)
    modules = {(level, module) for level, module, _ in lines}
    assert ("INFO", "RUNTIME") in modules and ("INFO", "ALLOCATOR") in modules
    launches = [line for level, _, line in lines if level == "DEBUG" and "launch " in line]
    assert launches, r.stdout[-2000:]
    assert "result 2000.0" in r.stdout


def test_cann_log_default_is_errors_only_into_the_process_log_path(python, tmp_path):
    r = python("""
        import torch, torch_npu
        x = torch.ones(4, device="npu")
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="npu")  # 1 TiB: out of memory
        except torch.OutOfMemoryError:
            pass
        import os; print(os.getpid())
    """, env={"ASCEND_PROCESS_LOG_PATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    pid = r.stdout.split()[-1]
    files = list((tmp_path / "debug" / "plog").glob(f"plog-{pid}_*.log"))
    assert len(files) == 1, list(tmp_path.rglob("*"))
    lines = _log_lines(files[0].read_text())
    assert lines and all(level == "ERROR" for level, _, _ in lines), files[0].read_text()
    assert any(module == "ALLOCATOR" and "NPU out of memory" in line for _, module, line in lines)
    assert not _log_lines(r.stdout)


def test_cann_log_level_4_writes_nothing(python, tmp_path):
    r = python("""
        import torch, torch_npu
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="npu")
        except torch.OutOfMemoryError:
            pass
    """, env={"ASCEND_PROCESS_LOG_PATH": str(tmp_path), "ASCEND_GLOBAL_LOG_LEVEL": "4"})
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.rglob("*.log"))


def test_device_capability_follows_torch_npu_device_capability(monkeypatch):
    monkeypatch.delenv("TORCH_NPU_DEVICE_CAPABILITY", raising=False)
    with pytest.warns(UserWarning, match="TORCH_NPU_DEVICE_CAPABILITY"):
        assert torch.npu.get_device_capability() is None
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.0")
    with pytest.warns(UserWarning, match="only for compatibility"):
        assert torch.npu.get_device_capability(0) == (8, 0)
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "eight")
    with pytest.warns(UserWarning, match="can't parse TORCH_NPU_DEVICE_CAPABILITY"):
        assert torch.npu.get_device_capability() is None


# ---- out= on the host-kernel paths: resized as ATen resizes an out= tensor ----------------------

def resize_warnings(call):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, sum("was resized" in str(w.message) for w in caught)


@pytest.mark.parametrize("out_shape", [(0,), (4, 4), (2,), (40,)])
def test_synchronizing_out_is_resized_with_atens_warning(out_shape):
    # masked_select / nonzero size their result from the data (the synchronizing path): an out=
    # of another size, larger or smaller, takes the result's shape and values, as on the CPU.
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    m = x > 0
    cases = [
        (lambda o, d: torch.masked_select(x.to(d), m.to(d), out=o), torch.float32),
        (lambda o, d: torch.nonzero(x.to(d) > 0.5, out=o), torch.int64),
    ]
    for call, dtype in cases:
        cpu_out = torch.ones(out_shape, dtype=dtype)
        npu_out = torch.ones(out_shape, dtype=dtype, device="npu")
        want, cpu_warned = resize_warnings(lambda: call(cpu_out, "cpu"))
        got, npu_warned = resize_warnings(lambda: call(npu_out, "npu"))
        assert got is npu_out and npu_out.shape == cpu_out.shape
        assert torch.equal(npu_out.cpu(), cpu_out)
        assert npu_warned == cpu_warned == (1 if cpu_out.shape != out_shape and
                                            0 not in out_shape else 0)


def test_synchronizing_out_of_an_empty_result():
    x = torch.full((3, 3), -1.0)
    out = torch.ones(4, device="npu")
    torch.masked_select(x.npu(), x.npu() > 0, out=out)
    assert out.shape == (0,)


def test_async_out_is_resized_with_one_warning():
    # all(dim) runs its CPU kernel on the stream: the out= takes the meta kernel's shape, and
    # ATen's warning is given once, as on the CPU.
    u8 = torch.randint(0, 2, (3, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    cpu_out = torch.zeros(7, dtype=torch.uint8)
    npu_out = torch.zeros(7, dtype=torch.uint8, device="npu")
    _, cpu_warned = resize_warnings(lambda: torch.all(u8, 0, out=cpu_out))
    _, npu_warned = resize_warnings(lambda: torch.all(u8.npu(), 0, out=npu_out))
    assert npu_out.shape == (5,) and torch.equal(npu_out.cpu(), cpu_out)
    assert npu_warned == cpu_warned == 1


# ---- Python scalars in float16 / bfloat16 ops are read as ATen's CPU kernels read them -----------

COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
SCALARS = [76.8909856, 0.1234567, 3.3333333, 1.0006, -2.5, 7, 100, 2.0 ** 24 + 1]


def scalar_operand_inputs(dtype):
    g = torch.Generator().manual_seed(2)
    if dtype.is_floating_point:
        return (torch.randn(4096, generator=g) * 100).to(dtype)
    return torch.randint(0, 200, (4096,), generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32,
                                   torch.int64, torch.uint8])
def test_comparison_with_a_python_scalar_matches_cpu(dtype):
    # The scalar is cast to the common dtype first: float16 76.875 >= 76.8909856 (which is
    # 76.875 in float16); an int tensor against 3.5 compares in float32, not against 3.
    assert torch.ge(torch.tensor([76.875], dtype=torch.float16).npu(), 76.8909856).item()
    x = scalar_operand_inputs(dtype)
    for name in COMPARISONS:
        for s in SCALARS + [3.5, 4.0]:
            want = getattr(torch, name)(x, s)
            assert torch.equal(getattr(torch, name)(x.npu(), s).cpu(), want), (name, s)
            out = torch.empty(0, dtype=torch.bool, device="npu")
            getattr(torch, name)(x.npu(), s, out=out)
            assert torch.equal(out.cpu(), want), (name, s, "out=")
            if dtype.is_floating_point:
                y = x.npu()
                getattr(y, name + "_")(s)
                want_in_place = getattr(x.clone(), name + "_")(s)
                assert torch.equal(y.cpu(), want_in_place), (name, s, "in place")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_arithmetic_with_a_python_scalar_matches_cpu_bit_for_bit(dtype):
    # add / sub / remainder / fmod / pow round the scalar to the tensor's dtype; mul and the
    # three divisions read it unrounded (the CPU's reduced-float scalar kernels): both as the
    # CPU, bit for bit.
    x = scalar_operand_inputs(dtype)
    for s in SCALARS[:-1]:
        for name, call in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                           ("div", torch.div), ("remainder", torch.remainder),
                           ("fmod", torch.fmod), ("pow", torch.pow),
                           ("trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
                           ("floor", lambda a, b: torch.div(a, b, rounding_mode="floor"))]:
            torch.testing.assert_close(call(x.npu(), s).cpu(), call(x, s), rtol=0, atol=0,
                                       equal_nan=True, msg=f"{name} {s}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_op_with_a_device_operand_of_another_dtype_matches_cpu(dtype):
    # A float32 0-dim tensor or an int32 tensor with a float16 tensor: ATen casts them to float16
    # before computing; so do we (through ATen's kernel where ours would read them in float).
    x = scalar_operand_inputs(dtype)
    others = [torch.tensor(0.1234567), torch.tensor(76.8909856, dtype=torch.float64),
              torch.randint(-3000, 3000, (4096,), dtype=torch.int32,
                            generator=torch.Generator().manual_seed(3))]
    for other in others:
        for name in ["add", "sub", "mul", "div", "ge", "eq", "maximum", "atan2"]:
            f = getattr(torch, name)
            assert torch.equal(f(x.npu(), other.npu()).cpu(), f(x, other)), (name, other.dtype)
            assert torch.equal(f(other.npu(), x.npu()).cpu(), f(other, x)), (name, other.dtype)


# ---- index_put_ checks the values' shape at the call ---------------------------------------------

def test_index_put_shape_mismatch_raises_at_the_call_with_cpus_message():
    cases = [
        ((torch.tensor([0, 1]),), torch.ones(2, 5)),
        ((torch.tensor([[0], [1]]), torch.tensor([0, 2])), torch.ones(3, 2)),
        ((torch.tensor([True, False, True, True]),), torch.ones(2, 3)),   # a mask: 3 rows
        ((slice(None), torch.tensor([0, 2])), torch.ones(3, 2)),
    ]
    for indices, values in cases:
        with pytest.raises(RuntimeError) as cpu_error:
            torch.zeros(4, 3)[indices] = values
        npu_index = tuple(i if isinstance(i, slice) else i.npu() for i in indices)
        with pytest.raises(RuntimeError) as npu_error:
            torch.zeros(4, 3, device="npu")[npu_index] = values.npu()
        assert str(npu_error.value) == str(cpu_error.value)
        assert "shape mismatch" in str(npu_error.value)
    torch.npu.synchronize()   # nothing was queued that fails later


def test_index_put_accepts_what_cpu_accepts():
    g = torch.Generator().manual_seed(4)
    base = torch.randn(4, 3, generator=g)
    mask = base > 0
    cases = [
        ((torch.tensor([0, 2]),), torch.randn(2, 3, generator=g), False),
        ((torch.tensor([0, 2]),), torch.randn(3, generator=g), True),        # broadcast
        ((mask,), torch.randn(int(mask.sum()), generator=g), False),
        ((mask,), torch.tensor(5.0), False),
        ((torch.tensor([1, 1, 3]), torch.tensor([0, 0, 2])), torch.ones(3), True),
    ]
    for indices, values, accumulate in cases:
        want = base.clone().index_put_(indices, values, accumulate)
        got = base.npu().index_put_(tuple(i.npu() for i in indices), values.npu(), accumulate)
        assert torch.equal(got.cpu(), want)
        got = base.npu().index_put(tuple(i.npu() for i in indices), values.npu(), accumulate)
        assert torch.equal(got.cpu(), want)


# ---- torch.npu.set_sync_debug_mode ---------------------------------------------------------------

@pytest.fixture
def sync_debug_mode():
    yield torch.npu.set_sync_debug_mode
    torch.npu.set_sync_debug_mode(0)


SYNCHRONIZING = {
    "item": lambda x: x.sum().item(),
    "cpu": lambda x: x.cpu(),
    "to_npu": lambda x: torch.ones(3).npu(),
    "nonzero": lambda x: torch.nonzero(x),
    "masked_select": lambda x: torch.masked_select(x, x > 0),
    "stream.synchronize": lambda x: torch.npu.current_stream().synchronize(),
}
ASYNCHRONOUS = {
    "add": lambda x: x + 1,
    "sum": lambda x: x.sum(),
    "erfcx (ATen's kernel on the stream)": lambda x: torch.special.erfcx(x),
    "pinned non_blocking to_npu": lambda x: torch.ones(3).pin_memory().to("npu", non_blocking=True),
    "torch.npu.synchronize": lambda x: torch.npu.synchronize(),
}


def test_sync_debug_mode_warns_on_each_synchronizing_call(sync_debug_mode):
    import warnings

    x = torch.randn(8).npu()
    torch.npu.synchronize()
    sync_debug_mode("warn")
    assert torch.npu.get_sync_debug_mode() == 1
    for name, call in {**SYNCHRONIZING, **ASYNCHRONOUS}.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(x)
        warned = [w for w in caught if "called a synchronizing NPU operation" in str(w.message)]
        assert bool(warned) == (name in SYNCHRONIZING), name


def test_sync_debug_mode_error_raises_before_waiting(sync_debug_mode):
    x = torch.randn(8).npu()
    torch.npu.synchronize()
    sync_debug_mode(2)
    assert torch.npu.get_sync_debug_mode() == 2
    for name, call in SYNCHRONIZING.items():
        with pytest.raises(RuntimeError, match="called a synchronizing NPU operation"):
            call(x)
    for name, call in ASYNCHRONOUS.items():
        call(x)
    sync_debug_mode("default")
    assert torch.equal(x.cpu(), x.cpu()) and torch.npu.get_sync_debug_mode() == 0


def test_sync_debug_mode_error_queues_no_copy_into_a_host_buffer_it_frees(python):
    # item() and x.cpu() raised after queueing their device-to-host copy: the CPU tensor died
    # with the exception while the copy still wrote it (glibc then aborted, "corrupted
    # double-linked list", or the process crashed later). Many rounds make a corruption show.
    r = python("""
import torch, torch_npu
reference = torch.randn(1 << 12)
x = reference.npu()
torch.npu.synchronize()
torch.npu.set_sync_debug_mode(2)
for _ in range(200):
    for call in (lambda: x.sum().item(), lambda: x.cpu(), lambda: torch.ones(64).npu()):
        try:
            call()
        except RuntimeError:
            pass
    junk = [torch.empty(n) for n in range(1, 64)]
torch.npu.set_sync_debug_mode(0)
torch.npu.synchronize()
print(torch.equal(x.cpu(), reference))
""")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True"]


# ---- one device per op: npu and cpu tensors mixed are refused as on CUDA ------------------------

# The generated wrappers' wording as torch_npu prints it ("..., but found at least two devices,
# npu:0 and cpu! (when checking argument for argument index in method ...)") and TensorIterator's
# ("..., but found at least two devices, npu:0 and cpu!").
SAME_DEVICE = "Expected all tensors to be on the same device, but"


def test_isin_embedding_and_index_put_refuse_cpu_operands():
    npu = torch.tensor([1, 2, 3], device="npu")
    cpu = torch.tensor([1, 3])
    calls = {
        "isin(npu, cpu)": lambda: torch.isin(npu, cpu),
        "isin(cpu, npu)": lambda: torch.isin(cpu, npu),
        "embedding(cpu indices)": lambda: torch.nn.functional.embedding(
            torch.tensor([0, 1]), torch.randn(3, 2, device="npu")),
        "embedding(cpu weight)": lambda: torch.nn.functional.embedding(
            torch.tensor([0, 1], device="npu"), torch.randn(3, 2)),
        "index_put_(cpu values)": lambda: torch.zeros(4, device="npu").index_put_(
            (torch.tensor([0, 1], device="npu"),), torch.ones(2)),
        "x[i] = cpu values": lambda: torch.zeros(4, device="npu").__setitem__(
            torch.tensor([0, 1]), torch.ones(2)),
        "index_put(cpu values)": lambda: torch.zeros(4, device="npu").index_put(
            (torch.tensor([0, 1], device="npu"),), torch.ones(2), accumulate=True),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match=SAME_DEVICE):
            call()
            torch.npu.synchronize()
            pytest.fail(f"{name} was accepted")
    torch.npu.synchronize()


def test_indices_on_the_cpu_and_0_dim_cpu_values_are_still_accepted_as_on_cuda():
    x = torch.zeros(4, device="npu")
    x[torch.tensor([0, 2])] = torch.tensor([1.0, 2.0], device="npu")  # cpu indices
    x.index_put_((torch.tensor([1]),), torch.tensor(5.0))             # 0-dim cpu value
    assert x.cpu().tolist() == [1.0, 5.0, 2.0, 0.0]
    assert x[torch.tensor([2, 1])].cpu().tolist() == [2.0, 5.0]


# ---- cat into an out= whose elements overlap --------------------------------------------------

def test_cat_into_an_expanded_out_refuses_as_the_cpu_does():
    parts = [torch.ones(2, 2), torch.full((2, 2), 2.0)]
    cases = [(lambda d: torch.zeros(2, 1, device=d).expand(2, 4), 1),
             (lambda d: torch.zeros(1, device=d).expand(4, 2), 0)]
    for make_out, dim in cases:
        with pytest.raises(RuntimeError) as cpu_error:
            torch.cat(parts, dim=dim, out=make_out("cpu"))
        with pytest.raises(RuntimeError) as npu_error:
            torch.cat([p.npu() for p in parts], dim=dim, out=make_out("npu"))
        assert str(npu_error.value) == str(cpu_error.value)
        assert "more than one element of the written-to tensor" in str(npu_error.value)
    # An out= of another size is resized first (a fresh layout, no overlap), as on the CPU.
    cpu_out, npu_out = torch.zeros(1).expand(8), torch.zeros(1, device="npu").expand(8)
    with pytest.warns(UserWarning, match="was resized"):
        torch.cat([torch.ones(2), torch.ones(2)], out=cpu_out)
    with pytest.warns(UserWarning, match="was resized"):
        torch.cat([torch.ones(2, device="npu"), torch.ones(2, device="npu")], out=npu_out)
    assert torch.equal(npu_out.cpu(), cpu_out)


def test_cat_sizes_and_refusals_are_the_cpus():
    """cat's size is found without the meta kernel when the inputs plainly fit together; the
    other calls still go to the meta kernel, which refuses what the CPU refuses (a size mismatch
    in its own words: "Expected 2 in dimension 0 but got 3", the CPU's "Expected size 2 but got
    size 3")."""
    ids = torch.arange(12).view(2, 6)
    fits = [([ids, ids[:, :1]], -1), ([torch.ones(2, 3), torch.empty(0), torch.ones(1, 3)], 0),
            ([ids, ids.double()], 1), ([torch.ones(3).bool()], 0)]
    for parts, dim in fits:
        want = torch.cat(parts, dim)
        got = torch.cat([p.npu() for p in parts], dim)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    refused = [([torch.ones(2, 3), torch.ones(3, 3)], 1), ([torch.ones(2), torch.tensor(1.0)], 0),
               ([torch.ones(2, 3)], 2), ([torch.ones(2, 3), torch.ones(2)], 0)]
    for parts, dim in refused:
        with pytest.raises((RuntimeError, IndexError)) as cpu_error:
            torch.cat(parts, dim)
        with pytest.raises(type(cpu_error.value)):
            torch.cat([p.npu() for p in parts], dim)


# ---- torch_npu.empty_with_format(base_addr_aligned_kb=) -----------------------------------------

@pytest.mark.parametrize("kb", [4, 2048])
def test_empty_with_format_aligns_the_base_address(kb):
    for make in (torch_npu.empty_with_format, torch.ops.npu.empty_with_format):
        for _ in range(3):  # several, so a lucky allocator address is not what passes
            t = make([3, 5], dtype=torch.float16, device="npu", base_addr_aligned_kb=kb)
            assert t.data_ptr() % (kb * 1024) == 0
            assert t.shape == (3, 5) and t.dtype == torch.float16 and t.is_contiguous()
            t.fill_(2.0)
            assert t.cpu().eq(2.0).all()
    # Another format too (a format cast that copied into a new block lost the alignment); small
    # blocks held first, so that a new block is not aligned by chance.
    pads = [torch.empty(1, device="npu") for _ in range(3)]  # noqa: F841
    t = torch_npu.empty_with_format([2, 3], dtype=torch.float32, device="npu", acl_format=29,
                                    base_addr_aligned_kb=16)
    assert t.data_ptr() % 16384 == 0 and torch_npu.get_npu_format(t) == 29
    with pytest.raises(ValueError, match="base_addr_aligned_kb must be a non-negative integer"):
        torch_npu.empty_with_format([2], device="npu", base_addr_aligned_kb=-1)


def test_npu_combine_tensors_repoints_each_tensor_at_its_slice():
    from torch_npu.utils import get_part_combined_tensor, is_combined_tensor_valid, \
        npu_combine_tensors
    x = torch.randn(2, 2, 2, 2, device="npu")
    y = torch.randn(4, 4, device="npu")
    z = torch.randn(3, 3, 3, device="npu")
    clones = [t.clone() for t in (x, y, z)]
    combined = npu_combine_tensors([x, y, z])
    assert combined.shape == (16 + 16 + 27,)
    assert is_combined_tensor_valid(combined, [x, y, z])
    for t, c in zip((x, y, z), clones):
        assert torch.equal(t.cpu(), c.cpu())  # the values moved with the tensors
    # Each tensor is now its slice: writes through either side are seen by the other.
    combined.zero_()
    assert x.abs().sum().item() == 0 and z.abs().sum().item() == 0
    y.fill_(3.0)
    assert torch.equal(get_part_combined_tensor(combined, 16, 16).cpu(), torch.full((16,), 3.0))
    assert torch.count_nonzero(combined).item() == 16
    assert not is_combined_tensor_valid(combined, [torch.zeros(4, device="npu")])
    fresh = [torch.ones(5, device="npu"), torch.ones(2, 3, device="npu")]
    assert torch.count_nonzero(npu_combine_tensors(fresh, require_copy_value=False)).item() == 0
    assert fresh[0].sum().item() == 0


@pytest.mark.parametrize("bad, message", [
    (lambda: [torch.ones(3)], "list_of_tensor\\[0\\] is not an NPU tensor"),
    (lambda: [torch.ones(2, device="npu"), torch.ones(2, device="npu", dtype=torch.half)],
     "list_of_tensor\\[1\\] is torch.float16"),
    (lambda: [torch.ones(3, 4, device="npu").t()], "not contiguous"),
    (lambda: [], "non-empty list"),
])
def test_npu_combine_tensors_refuses_what_it_cannot_combine(bad, message):
    from torch_npu.utils import npu_combine_tensors
    with pytest.raises(ValueError, match=message):
        npu_combine_tensors(bad())


def test_empty_with_swapped_memory_is_an_npu_tensor_on_host_pages():
    """torch_npu's example: fill_ the swapped tensor, multiply it into a normal one; its pages
    are outside the device allocator, so device statistics do not move."""
    torch.npu.synchronize()
    allocated, reserved = torch.npu.memory_allocated(), torch.npu.memory_reserved()
    swapped = torch_npu.empty_with_swapped_memory([512, 512], dtype=torch.float32,
                                                  device=torch.device("npu:0"))
    assert swapped.device == torch.device("npu:0") and swapped.shape == (512, 512)
    assert torch.npu.memory_allocated() == allocated
    assert torch.npu.memory_reserved() == reserved
    tmp = swapped.fill_(3.14)
    out = torch.empty_like(tmp).fill_(1).mul_(tmp)
    assert torch.equal(out.cpu(), torch.full((512, 512), 3.14))
    swapped.zero_()
    assert swapped.abs().sum().item() == 0
    via_op = torch.ops.npu.empty_with_swapped_memory([3], dtype=torch.float16)
    assert via_op.dtype == torch.float16 and via_op.device.type == "npu"
    with pytest.raises(ValueError, match="device must be an npu device"):
        torch_npu.empty_with_swapped_memory([2], device="cpu")
