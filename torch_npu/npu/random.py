"""Random number state of the npu devices (torch.cuda.random's twin).

Each device has a default torch.Generator owned by the adapter. Seeding before the runtime
starts is deferred to initialisation, as in torch.cuda, so `torch.manual_seed` at the top of a
script costs nothing and still applies.
"""

from __future__ import annotations

from typing import Iterable, Union

import torch

import torch_npu._C as _C

from ._device import (
    _check_index,
    _get_device_index,
    _lazy_call,
    _lazy_init,
    current_device,
    device_count,
)


def _get_generator(device: torch.device) -> torch.Generator:
    idx = device.index if device.index is not None else current_device()
    return default_generators[idx]


class _DefaultGenerators:
    """torch.npu.default_generators: one torch.Generator per device, made on first use."""

    def __getitem__(self, idx: int) -> torch.Generator:
        _lazy_init()
        return _C._npu_getDefaultGenerator(_check_index(idx))

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def _gen(device=None) -> torch.Generator:
    return default_generators[_check_index(_get_device_index(device))]


def get_rng_state(device: Union[int, str, torch.device] = "npu") -> torch.Tensor:
    """The RNG state of `device` as a uint8 CPU tensor."""
    return _gen(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: Union[int, str, torch.device] = "npu") -> None:
    """Restores a state returned by get_rng_state."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("set_rng_state expects a torch.ByteTensor returned by get_rng_state")
    _gen(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    seed = int(seed)
    _lazy_call(lambda: _gen(current_device()).manual_seed(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds the generator of every device."""
    seed = int(seed)

    def cb():
        for i in range(device_count()):
            _gen(i).manual_seed(seed)

    _lazy_call(cb)


def seed() -> None:
    """Seeds the current device's generator with a random number."""
    _lazy_call(lambda: _gen(current_device()).seed())


def seed_all() -> None:
    """Seeds every device with one random number."""
    def cb():
        s = _gen(0).seed()
        for i in range(1, device_count()):
            _gen(i).manual_seed(s)

    _lazy_call(cb)


def initial_seed() -> int:
    """The seed the current device's generator started from."""
    return _gen(current_device()).initial_seed()
