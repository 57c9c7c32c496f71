"""torch_npu.contrib.transfer_to_npu and TORCH_TRANSFER_TO_NPU=1: CUDA-style code runs on npu.

Every test runs in a fresh interpreter: the module patches torch for the whole process.
"""

import os
import subprocess
import sys
import textwrap

import torch_npu

# `python script.py` puts the script's folder first on sys.path, not the checkout: name it.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(torch_npu.__file__)))

# A CUDA training script as users bring it: no torch_npu, no npu anywhere. It prints what a
# CUDA user would print, which tells where its tensors were.
CUDA_TRAIN_SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.cuda.manual_seed_all(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
loader = DataLoader(data, batch_size=16, shuffle=True, pin_memory=True,
                    generator=torch.Generator().manual_seed(0))
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
losses = []
for epoch in range(3):
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.to("cuda:0", non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
end.record()
torch.cuda.synchronize()
noise = torch.randn(4, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
print("cuda available:", torch.cuda.is_available(), torch.cuda.device_count())
print("loss device:", loss.device, loss.is_cuda, loss.dtype)
print("param device:", next(model.parameters()).device, "noise device:", noise.device)
print("loss went down:", sum(losses[-4:]) < sum(losses[:4]))
print("timed:", start.elapsed_time(end) >= 0, "allocated:", torch.cuda.memory_allocated() > 0)
"""


def run(code: str, env=None, cwd=None, args=None, timeout=180) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = CHECKOUT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    argv = [sys.executable, *(args or ["-c", textwrap.dedent(code)])]
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=cwd,
                          timeout=timeout)


def test_unmodified_cuda_training_script_runs_on_npu_with_the_env_var(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CUDA_TRAIN_SCRIPT)
    r = run("", env={"TORCH_TRANSFER_TO_NPU": "1"}, cwd=tmp_path, args=[str(script)])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "cuda available: True 8" in out
    assert "loss device: npu:0 True torch.float32" in out  # float32: see the autocast test
    assert "param device: npu:0 noise device: npu:0" in out
    assert "loss went down: True" in out
    assert "timed: True allocated: True" in out
    assert r.stderr.count("[transfer_to_npu] CUDA calls now run on npu") == 1


def test_script_run_after_the_import_keeps_its_tensors_on_npu(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CUDA_TRAIN_SCRIPT)
    r = run(f"""
        import runpy
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        g = runpy.run_path({str(script)!r})
        tensors = [p for p in g["model"].parameters()] + [g["x"], g["y"], g["loss"], g["noise"]]
        tensors += [t for group in g["opt"].state.values() for t in group.values()
                    if isinstance(t, torch.Tensor)]
        print("devices:", sorted({{str(t.device) for t in tensors}}))
        print("scaler:", g["scaler"]._device, g["scaler"].get_scale() > 0)
        print("generator is a torch.Generator:", isinstance(g["loader"].generator, torch.Generator),
              isinstance(torch.default_generator, torch.Generator))
    """)
    assert r.returncode == 0, r.stderr
    assert "devices: ['npu:0']" in r.stdout
    assert "scaler: npu True" in r.stdout
    assert "generator is a torch.Generator: True True" in r.stdout


def test_device_arguments_are_rewritten_and_nothing_else(tmp_path):
    r = run("""
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        d1 = torch.device("cuda", 1)
        print(torch.zeros(2, device=d1).device, torch.ones(2, device="cuda").device,
              torch.tensor([1.0], device="cuda:1").device, torch.empty_like(torch.ones(1),
              device="cuda").device, torch.arange(3, device=d1).device)
        x = torch.ones(2)
        print(x.to("cuda:1").device, x.to(device=d1).device, x.cuda(1).device, x.cuda().device,
              x.cuda().new_zeros(2, device="cuda:1").device, x.to("cpu").device)
        m = torch.nn.Linear(2, 2).to("cuda:1")
        print(next(m.parameters()).device, next(torch.nn.Linear(2, 2).cuda().parameters()).device)
        torch.cuda.set_device("cuda:1")
        print(torch.cuda.current_device(), torch.cuda.Stream(device="cuda:1").device_index)
        with torch.cuda.device("cuda:0"):
            print(torch.cuda.current_device(), torch.cuda.get_device_name(torch.device("cuda:0")))
        print(x.is_cuda, x.npu().is_cuda, torch.cuda.is_available() == torch.npu.is_available())
        print(torch.cuda.CUDAGraph is torch.npu.NPUGraph, torch.cuda.Event is torch.npu.Event)
        # Strings that merely contain "cuda" are left alone.
        torch.save(x, "cuda")
        print(torch.load("cuda").device)
    """, cwd=tmp_path)  # the file named "cuda" lands in tmp_path, not in the checkout
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["npu:1", "npu:0", "npu:1", "npu:0", "npu:1"]
    assert lines[1].split() == ["npu:1", "npu:1", "npu:1", "npu:0", "npu:1", "cpu"]
    assert lines[2].split() == ["npu:1", "npu:0"]
    assert lines[3].split() == ["1", "1"]
    assert lines[4].split() == ["0", "Ascend910B2"]
    assert lines[5].split() == ["False", "True", "True"]
    assert lines[6].split() == ["True", "True"]
    assert lines[7] == "cpu"


SAVE_AS_IF_ON_A_GPU = """
    import torch
    # Tag every CPU storage "cuda:0", as torch.save on a GPU machine would.
    torch.serialization.register_package(0, lambda s: "cuda:0" if s.device.type == "cpu" else None,
                                         lambda s, loc: None)
    torch.save({"w": torch.arange(4.0)}, "gpu_ckpt.pt")
"""


def test_checkpoint_saved_on_a_gpu_loads_on_npu(tmp_path):
    r = run(SAVE_AS_IF_ON_A_GPU, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    load = """
        import torch, torch_npu
        {}
        print(torch.load("gpu_ckpt.pt")["w"].device)
        print(torch.load("gpu_ckpt.pt", map_location={{"cuda:0": "cuda:1"}})["w"].device)
        print(torch.load("gpu_ckpt.pt", map_location="cuda:1")["w"].device)
        print(torch.load("gpu_ckpt.pt", map_location=lambda s, loc: None)["w"].device)
        print(torch.load("gpu_ckpt.pt", map_location="cpu")["w"].tolist())
    """
    without = run(load.format(""), cwd=tmp_path)
    assert without.returncode != 0  # the test is meaningful: plain torch cannot load it
    assert "CUDA" in without.stderr
    r = run(load.format("from torch_npu.contrib import transfer_to_npu"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["npu:0", "npu:1", "npu:1", "npu:0", "[0.0, 1.0, 2.0, 3.0]"]


def test_autocast_cuda_runs_as_npu_autocast():
    r = run("""
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        m = torch.nn.Linear(4, 4).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(torch.ones(2, 4, device="cuda"))
            s = torch.softmax(y, -1)
        with torch.cuda.amp.autocast():
            z = m(torch.ones(2, 4, device="cuda"))
        print(y.device, y.dtype, s.dtype, z.dtype)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # other devices are left alone
            print(torch.nn.Linear(4, 4)(torch.ones(2, 4)).dtype)
    """)
    assert r.returncode == 0, r.stderr
    # linear runs in the autocast dtype, softmax in float32, torch.cuda.amp's default is float16
    assert r.stdout.splitlines() == ["npu:0 torch.bfloat16 torch.float32 torch.float16",
                                     "torch.bfloat16"]


def test_nccl_becomes_hccl():
    r = run("""
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        import torch.distributed as dist
        print(dist.is_nccl_available())
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        x = torch.ones(3).cuda()
        dist.all_reduce(x)
        print(dist.get_backend(), x.device, x.cpu().tolist())
        dist.destroy_process_group()
        dist.init_process_group("cuda:nccl,cpu:gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
        print(dist.get_backend_config())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["True", "hccl npu:0 [1.0, 1.0, 1.0]", "npu:hccl,cpu:gloo"]


def test_notice_once_per_process_and_only_on_rank_0():
    code = """
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        import importlib; importlib.reload(transfer_to_npu)  # patches are not applied twice
        x = torch.ones(1).cuda().cuda()
        print(x.device, torch.Tensor.cuda.__name__)
    """
    r = run(code, env={"TORCH_TRANSFER_TO_NPU": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["npu:0", "_tensor_cuda"]
    assert r.stderr.count("[transfer_to_npu]") == 1
    r = run(code, env={"RANK": "1"})
    assert r.returncode == 0, r.stderr
    assert "[transfer_to_npu]" not in r.stderr


def test_bad_env_value_is_named_and_ignored():
    r = run("import torch, torch_npu; print(torch.ones(1).cuda().device)",
            env={"TORCH_TRANSFER_TO_NPU": "yes"})
    assert r.returncode != 0  # not applied: .cuda() is CUDA's, and there is no CUDA
    assert "TORCH_TRANSFER_TO_NPU='yes' is ignored: set it to 1" in r.stderr
    assert "[transfer_to_npu]" not in r.stderr
