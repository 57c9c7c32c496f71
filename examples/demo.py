"""The main demonstration: the article's verification program, then a short training loop on
the simulated NPU, checked against the same loop on the CPU."""

import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def section(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def train(device: str, steps: int = 20) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=gen)
    target = torch.randint(0, 4, (64,), generator=gen)
    x, target = x.to(device), target.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    section("The article's verification program (examples/verify_install.py)")
    subprocess.run([sys.executable, os.path.join(HERE, "verify_install.py")], check=True)

    import torch_npu  # noqa: F401

    section("Devices")
    print(f"{torch.npu.device_count()} devices; device 0: {torch.npu.get_device_properties(0)}")

    section("A short training loop: MLP, SGD with momentum, 20 steps")
    before = torch_npu._C._npu_pathTotals()
    t0 = time.perf_counter()
    npu_losses = train("npu")
    t_npu = time.perf_counter() - t0
    after = torch_npu._C._npu_pathTotals()
    cpu_losses = train("cpu")
    for step in (0, 9, 19):
        print(f"step {step:2d}: loss npu {npu_losses[step]:.6f}   cpu {cpu_losses[step]:.6f}")
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(npu_losses, cpu_losses))
    print(f"largest relative difference npu vs cpu: {worst:.2e} ({t_npu:.2f} s on npu)")
    print(f"memory allocated on npu:0 after training: {torch.npu.memory_allocated(0)} bytes, "
          f"reserved {torch.npu.memory_reserved(0)} bytes")
    host, sync, fallback = (a - b for a, b in zip(after, before))
    print(f"ops that left the kernel library: {host} ATen host kernels, {sync} synchronizing, "
          f"{fallback} CPU fallbacks (python -m torch_npu.utils.op_report lists them per op)")
    if worst > 1e-4:
        sys.exit("demo: npu and cpu losses disagree")


if __name__ == "__main__":
    main()
