"""The Hugging Face Trainer, unmodified, with a DeepSpeed config dict (ZeRO stage 2) on npu over
hccl, started by torchrun: the tiny LLaMA of deepspeed_zero.py fine-tuned with SGD on a data set
of one global batch (so every step sees the same samples whichever rank draws them). Rank 0
saves the trained parameters and the logged losses to argv[1] for the test to compare with the
Trainer's single-process CPU run without DeepSpeed (run_trainer(None, ...) below)."""
import os
import sys

import torch
import transformers

import torch_npu  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from deepspeed_zero import GLOBAL_BATCH, SEQ, VOCAB, tiny_llama

EPOCHS, LR = 3, 0.5
ZERO2 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",  # the Trainer's max_grad_norm
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,  # the Trainer's SGD
}


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.ids = torch.randint(1, VOCAB, (GLOBAL_BATCH, SEQ),
                                 generator=torch.Generator().manual_seed(11))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def run_trainer(deepspeed_config, output_dir, world=1, use_cpu=False):
    """Trains with the Trainer; returns (model, logged losses)."""
    args = transformers.TrainingArguments(
        output_dir=output_dir, use_cpu=use_cpu, deepspeed=deepspeed_config,
        per_device_train_batch_size=GLOBAL_BATCH // world, num_train_epochs=EPOCHS,
        learning_rate=LR, lr_scheduler_type="constant", optim="sgd",
        # No clipping: SGD's step then scales with the gradient, so a reduction that summed
        # instead of averaging the ranks' gradients could not hide behind the clip.
        max_grad_norm=0.0, logging_steps=1, report_to=[], seed=0, save_strategy="no",
        disable_tqdm=True)
    trainer = transformers.Trainer(model=tiny_llama(), args=args, train_dataset=Tokens())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, losses


def main(out_path: str) -> None:
    import torch.distributed as dist

    world = int(os.environ["WORLD_SIZE"])
    trainer, losses = run_trainer(ZERO2, os.path.dirname(out_path), world=world)
    engine = trainer.model_wrapped
    param = next(trainer.model.parameters())
    print(f"rank {dist.get_rank()} trainer engine={type(engine).__name__} "
          f"zero_stage={engine.zero_optimization_stage()} backend={dist.get_backend()} "
          f"device={param.device} steps={trainer.state.global_step} done", flush=True)
    if dist.get_rank() == 0:
        params = {n: p.detach().cpu() for n, p in trainer.model.named_parameters()}
        torch.save({"params": params, "losses": losses}, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
