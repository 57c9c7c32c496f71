"""DeepSpeed, unmodified, on npu: its npu accelerator is chosen when torch_npu imports and its
calls work; ZeRO stages 1, 2 and 3 on 2 ranks over hccl (under torchrun) train a tiny LLaMA to
the single-process CPU run's parameters; the `deepspeed` launcher starts the ranks on the cards
it is given; its npu op builders take the paths they take on a card; the Hugging Face Trainer
with a DeepSpeed config (ZeRO-2) trains as it does without DeepSpeed.

As on a card, DeepSpeed's npu op builders need CANN's environment (they read ASCEND_HOME_PATH
as soon as one is created, and `deepspeed.init_distributed` creates one): every DeepSpeed
process here runs with the variables of the toolkit's set_env.sh, as a user's would after
`source .venv/Ascend/ascend-toolkit/set_env.sh`."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from dist_launch import finish, free_port, job_env, start, torchrun, worker

pytest.importorskip("deepspeed")  # installed by set-up (scripts/requirements-dev.txt)
sys.path.insert(0, os.path.dirname(worker("deepspeed_zero.py")))
import deepspeed_trainer
import deepspeed_zero

SET_ENV = os.path.join(sys.prefix, "Ascend", "ascend-toolkit", "set_env.sh")


@pytest.fixture(scope="module")
def cann_env() -> dict:
    """The variables `source set_env.sh` exports (make setup writes the toolkit under the venv),
    read from a shell that sourced it."""
    assert os.path.exists(SET_ENV), f"{SET_ENV} is missing: run make setup"
    out = subprocess.run(["bash", "-c", f"source '{SET_ENV}' && env -0"], capture_output=True,
                         check=True).stdout.decode()
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    keys = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "LD_LIBRARY_PATH", "PATH")
    return {k: env[k] for k in keys}


ACCELERATOR = """
import json, torch, torch_npu
from deepspeed.accelerator import get_accelerator
acc = get_accelerator()
dev = acc.device(1)
before = acc.memory_allocated(1)
x = torch.ones(1024, 256, device=dev)             # 1 MiB
allocated = acc.memory_allocated(1) - before
s = acc.Stream(device=dev)
s.wait_stream(acc.current_stream(dev))           # x is written on npu:1's default stream
with acc.stream(s):
    y = x * 2
e = acc.Event()
e.record(s)
e.synchronize()
acc.manual_seed(5)
r1 = torch.randn(4, device=acc.current_device_name())
acc.manual_seed(5)
r2 = torch.randn(4, device=acc.current_device_name())
print(json.dumps({
    "class": type(acc).__name__, "name": acc._name, "device_name": acc.device_name(),
    "device_name_1": acc.device_name(1), "device": str(dev),
    "device_count": acc.device_count(), "npu_count": torch.npu.device_count(),
    "available": acc.is_available(), "backend": acc.communication_backend_name(),
    "allocated": allocated, "stats": acc.memory_stats(1)["allocated_bytes.all.current"],
    "reserved": acc.memory_reserved(1), "total": acc.total_memory(1),
    "npu_total": torch.npu.get_device_properties(1).total_memory,
    "on_accelerator": acc.on_accelerator(y), "cpu_on_accelerator": acc.on_accelerator(x.cpu()),
    "stream_result": y.sum().item(), "same_seed_same_numbers": torch.equal(r1, r2),
    "bf16": acc.is_bf16_supported(), "float_tensor": str(acc.FloatTensor([1.0]).device),
    "visible_env": acc.visible_devices_envs(),
}))
"""


def test_accelerator_is_npu_when_torch_npu_imports():
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    # A fresh interpreter without DS_ACCELERATOR: DeepSpeed's own detection picks the device.
    r = subprocess.run([sys.executable, "-c", ACCELERATOR], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["class"] == "NPU_Accelerator" and got["name"] == "npu"
    assert got["device_name"] == "npu" and got["device_name_1"] == "npu:1"
    assert got["device"] == "npu:1"
    assert got["device_count"] == got["npu_count"] >= 2 and got["available"]
    assert got["backend"] == "hccl"
    assert got["allocated"] == 1 << 20 and got["stats"] >= 1 << 20
    assert got["reserved"] >= got["stats"]
    assert got["total"] == got["npu_total"] > 0
    assert got["on_accelerator"] and not got["cpu_on_accelerator"]
    assert got["stream_result"] == 2 * 1024 * 256
    assert got["same_seed_same_numbers"] and got["bf16"]
    assert got["float_tensor"].startswith("npu")
    assert got["visible_env"] == ["ASCEND_RT_VISIBLE_DEVICES"]


def zero_reports(out: str) -> dict[tuple[int, int], str]:
    """The ranks' reports "rank R zero stage=S key=value ... done", by (rank, stage); matched
    field by field, since the ranks share one pipe."""
    found = re.findall(r"rank (\d) zero stage=(\d) ((?:\S+=\S* )+)done", out)
    return {(int(rank), int(stage)): fields.strip() for rank, stage, fields in found}


def assert_equals_reference(saved: dict, ref_params: dict, ref_losses: list[float]) -> None:
    # float32 throughout; the only difference from the reference is the order in which the
    # ranks' gradients are summed (~1e-7 relative), which SGD passes on linearly: 1e-5 is two
    # orders of magnitude above it and four below how far the parameters moved (~0.2).
    assert set(saved["params"]) == set(ref_params)
    for name, want in ref_params.items():
        torch.testing.assert_close(saved["params"][name], want, rtol=0, atol=1e-5, msg=name)
    torch.testing.assert_close(torch.tensor(saved["losses"]), torch.tensor(ref_losses),
                               rtol=1e-5, atol=0)


@pytest.fixture(scope="module")
def reference():
    params, losses = deepspeed_zero.reference()
    initial = dict(deepspeed_zero.tiny_llama().named_parameters())
    moved = max((params[n] - initial[n].detach()).abs().max().item() for n in params)
    assert moved > 0.1  # the run trains: a tolerance of 1e-5 then means something
    return params, losses


def test_zero_stages_1_2_3_under_torchrun_equal_single_process(tmp_path, cann_env, reference):
    r = torchrun(worker("deepspeed_zero.py"), 2, str(tmp_path), env=cann_env, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:]
    reports = zero_reports(r.stdout)
    total = sum(p.numel() for p in reference[0].values())
    for stage in (1, 2, 3):
        for rank in (0, 1):
            fields = reports.get((rank, stage), "")
            # ZeRO partitions: each rank's optimizer holds half the parameters (at stage 3 the
            # parameters themselves too).
            assert f"world=2 backend=hccl shard={total // 2}/{total} accelerator=npu " \
                   f"device=npu:{rank} " in fields + " ", r.stdout[-6000:]
        assert_equals_reference(torch.load(tmp_path / f"stage{stage}.pt"), *reference)


def test_deepspeed_launcher_runs_zero3_on_the_cards_it_is_given(tmp_path, cann_env, reference):
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    # Cards 2 and 3: the launcher sets ASCEND_RT_VISIBLE_DEVICES=2,3 for its ranks (the npu
    # accelerator's visible-devices variable), which then see them as npu:0 and npu:1.
    cmd = [launcher, "--include", "localhost:2,3", "--master_port", str(free_port()),
           worker("deepspeed_zero.py"), str(tmp_path), "--stages", "3"]
    r = finish(start(cmd, job_env(cann_env)), timeout=300)
    assert r.returncode == 0, r.stdout[-6000:]
    reports = zero_reports(r.stdout)
    for rank in (0, 1):
        fields = reports.get((rank, 3), "")
        assert f"device=npu:{rank} visible=2,3 local_rank_arg={rank}" in fields, r.stdout[-6000:]
    assert_equals_reference(torch.load(tmp_path / "stage3.pt"), *reference)


def test_trainer_with_a_zero2_config_equals_the_trainer_without_deepspeed(tmp_path, cann_env):
    out = tmp_path / "trainer.pt"
    r = torchrun(worker("deepspeed_trainer.py"), 2, str(out), env=cann_env, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:]
    for rank in (0, 1):
        assert (f"rank {rank} trainer engine=DeepSpeedEngine zero_stage=2 backend=hccl "
                f"device=npu:{rank} steps={deepspeed_trainer.EPOCHS} done") in r.stdout, \
            r.stdout[-6000:]
    trainer, losses = deepspeed_trainer.run_trainer(None, str(tmp_path / "cpu"), use_cpu=True)
    assert next(trainer.model.parameters()).device.type == "cpu"
    assert losses[-1] < losses[0]
    assert_equals_reference(torch.load(out),
                            {n: p.detach() for n, p in trainer.model.named_parameters()}, losses)


OP_BUILDERS = """
import json, torch, torch_npu
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.lamb import FusedLamb
from deepspeed.ops.lion import FusedLion
acc = get_accelerator()
found = {}
for name in ("FusedAdamBuilder", "FusedLambBuilder", "FusedLionBuilder", "TransformerBuilder"):
    b = acc.create_op_builder(name)
    found[name] = [type(b).__module__.rsplit(".", 2)[-2], type(b).__name__, b.is_compatible(False),
                   b.sources()]
try:
    acc.create_op_builder("TransformerBuilder").load()
    found["not_implemented_load"] = "loaded"
except ValueError as e:
    found["not_implemented_load"] = str(e)

def train(cls, device, **kw):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(10, 4).to(device))
    start = p.detach().cpu().clone()
    opt = cls([p], **kw)
    for i in range(3):
        p.grad = torch.randn(10, 4, generator=torch.Generator().manual_seed(i)).to(device)
        opt.step()
    return p.detach().cpu(), start

for cls in (FusedLion, FusedLamb):
    npu, start = train(cls, "npu", lr=1e-2, weight_decay=0.1)
    cpu, _ = train(cls, "cpu", lr=1e-2, weight_decay=0.1)
    found[cls.__name__] = [(npu - cpu).abs().max().item(), (npu - start).abs().max().item()]
print(json.dumps(found))
"""


def test_npu_op_builders_load_without_compiling_or_say_not_implemented(cann_env):
    r = subprocess.run([sys.executable, "-c", OP_BUILDERS], capture_output=True, text=True,
                       env=job_env(cann_env), timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # The npu builders of DeepSpeed's fused optimizers have no sources: load() hands back
    # Python on torch ops (torch._fused_adam(w)_ for Adam), which run on our kernels.
    for name in ("FusedAdamBuilder", "FusedLambBuilder", "FusedLionBuilder"):
        assert got[name] == ["npu", name, True, []], got[name]
    # An op with no npu implementation gets DeepSpeed's NotImplementedBuilder, as on a card.
    assert got["TransformerBuilder"][:3] == ["npu", "NotImplementedBuilder", True]
    assert got["not_implemented_load"] == "This op had not been implemented on NPU backend."
    # FusedLion and FusedLamb on npu give the CPU's numbers for the same steps.
    for name in ("FusedLion", "FusedLamb"):
        diff, moved = got[name]
        assert diff <= 1e-6 and moved > 1e-3, (name, diff, moved)


FUSED_ADAM = """
import torch, torch_npu
from deepspeed.ops.adam import FusedAdam
torch.manual_seed(0)
start = torch.randn(10, 4)
p = torch.nn.Parameter(start.clone().npu())
ref = torch.nn.Parameter(start.clone())
opt = FusedAdam([p], lr=1e-2, weight_decay=0.1, adam_w_mode=True)
ref_opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.1)
for i in range(3):
    g = torch.randn(10, 4, generator=torch.Generator().manual_seed(i))
    p.grad, ref.grad = g.npu(), g.clone()
    opt.step()
    ref_opt.step()
torch.testing.assert_close(p.detach().cpu(), ref.detach(), rtol=0, atol=1e-6)
print("fused adam ok")
"""


def test_fused_adam_on_npu_equals_adamw_on_the_cpu(cann_env):
    r = subprocess.run([sys.executable, "-c", FUSED_ADAM], capture_output=True, text=True,
                       env=job_env(cann_env), timeout=120, check=False)
    assert r.returncode == 0 and "fused adam ok" in r.stdout, r.stderr[-4000:]
