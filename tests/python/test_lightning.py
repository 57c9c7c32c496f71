"""Lightning, unmodified, on npu through torch_npu's plugin (torch_npu/contrib/lightning.py):
Trainer(accelerator="npu", strategy="single_npu") trains a LightningModule on the npu to the
CPU run's weights, in float32 and under precision="bf16-mixed" (npu autocast)."""
import pytest
import torch

import torch_npu

L = pytest.importorskip("lightning")  # installed by set-up (scripts/requirements-dev.txt)
import torch_npu.contrib.lightning  # noqa: F401  (registers "npu" and "single_npu")


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))
        self.seen = set()  # where the steps ran, and in which dtype the layers computed

    def training_step(self, batch, index):
        x, y = batch
        out = self.net(x)
        self.seen.add((out.device.type, out.dtype))
        return torch.nn.functional.mse_loss(out.float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(accelerator, precision):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                       batch_size=16)
    model = Regression()
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_epochs=2, precision=precision,
                        strategy="single_npu" if accelerator == "npu" else "auto", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, data)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, model.seen


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_lightning_module_trains_on_npu_as_on_the_cpu(precision):
    cpu, cpu_seen = fit("cpu", precision)
    npu, npu_seen = fit("npu", precision)
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
    assert cpu_seen == {("cpu", dtype)} and npu_seen == {("npu", dtype)}, (cpu_seen, npu_seen)
    tol = 1e-2 if precision == "bf16-mixed" else 1e-5
    for k in cpu:
        torch.testing.assert_close(npu[k], cpu[k], rtol=tol, atol=tol, msg=k)


def test_the_accelerator_reads_devices_like_lightnings_own():
    from torch_npu.contrib.lightning import NPUAccelerator, SingleNPUStrategy

    assert L.pytorch.accelerators.AcceleratorRegistry["npu"]["accelerator"] is NPUAccelerator
    assert NPUAccelerator.get_parallel_devices(2) == [torch.device("npu", 0),
                                                      torch.device("npu", 1)]
    assert NPUAccelerator.parse_devices("1,3") == [1, 3]
    assert NPUAccelerator.parse_devices(-1) == list(range(torch.npu.device_count()))
    with pytest.raises(ValueError, match=f"sees {torch.npu.device_count()} npu device"):
        NPUAccelerator.parse_devices(99)
    with pytest.raises(ValueError, match="should be an npu device"):
        SingleNPUStrategy(device="cpu")
