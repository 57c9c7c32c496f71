"""An ``npu`` accelerator for Lightning (``lightning.pytorch``), which ships none.

``import torch_npu.contrib.lightning`` registers the accelerator "npu" and the strategy
"single_npu", as the community's accelerator plugins register theirs:

    trainer = Trainer(accelerator="npu", strategy="single_npu", devices=1)

(Lightning picks a device of its own only for its CUDA and MPS accelerators: for any other one
it would put a single-device run on the CPU, hence the strategy.) ``SingleNPUStrategy(device=
"npu:1")`` picks another device. Several devices: Lightning's DDP strategy with the hccl
backend, ``strategy=DDPStrategy(process_group_backend="hccl")`` (not tested here yet).
"""

from __future__ import annotations

from typing import Any

import torch

try:
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.accelerators.accelerator import Accelerator
    from lightning.pytorch.plugins.precision import MixedPrecision
    from lightning.pytorch.strategies import SingleDeviceStrategy, StrategyRegistry
except ImportError as error:  # Lightning is optional
    raise ImportError("torch_npu.contrib.lightning needs Lightning: pip install lightning") \
        from error

import torch_npu  # noqa: F401  (torch.npu)

__all__ = ["NPUAccelerator", "SingleNPUStrategy"]


def _device_ids(devices: Any) -> list[int]:
    """Lightning's `devices` argument as npu ids: an int n (the first n; -1 all), "auto", a
    string "0,1" or a list of ids."""
    count = torch.npu.device_count()
    if devices in ("auto", -1, "-1"):
        return list(range(count))
    if isinstance(devices, str):
        devices = [int(d) for d in devices.split(",") if d.strip()] if "," in devices \
            else int(devices)
    if isinstance(devices, int):
        if not 0 < devices <= count:
            raise ValueError(f"Trainer(accelerator='npu', devices={devices}): this process sees "
                             f"{count} npu device(s); ask for 1 to {count}, or -1 for all")
        return list(range(devices))
    ids = [int(d) for d in devices]
    bad = [d for d in ids if not 0 <= d < count]
    if bad:
        raise ValueError(f"Trainer(accelerator='npu', devices={ids}): no npu device {bad}; "
                         f"this process sees devices 0 to {count - 1}")
    return ids


class NPUAccelerator(Accelerator):
    """Lightning's accelerator for torch_npu's ``npu`` devices."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "npu":
            raise ValueError(f"NPUAccelerator: the device should be an npu device, got {device}")
        torch.npu.set_device(device)

    def teardown(self) -> None:
        torch.npu.empty_cache()

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return torch.npu.memory_stats(device)

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        return _device_ids(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("npu", i) for i in _device_ids(devices)]

    @staticmethod
    def auto_device_count() -> int:
        return torch.npu.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.npu.is_available()

    @staticmethod
    def name() -> str:
        return "npu"

    @classmethod
    def register_accelerators(cls, accelerator_registry) -> None:
        accelerator_registry.register(cls.name(), cls, description=cls.__name__)


class SingleNPUStrategy(SingleDeviceStrategy):
    """Lightning's single-device strategy on an npu device (npu:0 by default)."""

    strategy_name = "single_npu"

    def __init__(self, device: Any = "npu:0", accelerator: Accelerator | None = None,
                 checkpoint_io: Any = None, precision_plugin: Any = None):
        device = torch.device(device)
        if device.type != "npu":
            raise ValueError(f"SingleNPUStrategy: the device should be an npu device, got {device}")
        super().__init__(device=device, accelerator=accelerator or NPUAccelerator(),
                         checkpoint_io=checkpoint_io, precision_plugin=precision_plugin)

    def setup(self, trainer) -> None:
        # precision="bf16-mixed" / "16-mixed": Lightning makes its mixed-precision plugin for
        # "cuda" unless the accelerator is its CPU or MPS one; autocast (and the 16-bit loss
        # scaler) must be npu's.
        plugin = self.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.device != "npu":
            plugin.device = "npu"
            if plugin.scaler is not None:
                plugin.scaler = torch.amp.GradScaler("npu")
        super().setup(trainer)

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__)


if NPUAccelerator.name() not in AcceleratorRegistry:
    NPUAccelerator.register_accelerators(AcceleratorRegistry)
if SingleNPUStrategy.strategy_name not in StrategyRegistry:
    SingleNPUStrategy.register_strategies(StrategyRegistry)
