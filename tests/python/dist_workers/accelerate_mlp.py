"""An Accelerator() training loop started by the real `accelerate launch --num_processes 2`: a
small MLP trained with SGD on a fixed dataset, each rank taking its own batches from the prepared
DataLoader (so one step's global batch is WORLD x PER_RANK samples, DDP averaging the gradients).
Each rank reports the device and backend it ran on; rank 0 saves the trained parameters to
argv[1] for the test to compare with a single-process CPU run on the same global batches."""
import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator

import torch_npu  # noqa: F401

PER_RANK, SAMPLES, STEPS_LR = 4, 32, 0.1


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 6, generator=g)
    y = torch.randn(SAMPLES, 3, generator=g)
    return model, x, y


def main(out_path: str) -> None:
    acc = Accelerator()
    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=STEPS_LR)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=PER_RANK)
    model, opt, dl = acc.prepare(model, opt, dl)
    steps = 0
    for xb, yb in dl:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        steps += 1
    param = next(acc.unwrap_model(model).parameters())
    print(f"rank {acc.process_index} local={acc.local_process_index} device={acc.device} "
          f"param_device={param.device} backend={dist.get_backend()} world={acc.num_processes} "
          f"distributed_type={acc.distributed_type.value} steps={steps}", flush=True)
    acc.wait_for_everyone()
    if acc.is_main_process:
        state = {k: v.detach().cpu() for k, v in acc.unwrap_model(model).state_dict().items()}
        torch.save(state, out_path)
    acc.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
