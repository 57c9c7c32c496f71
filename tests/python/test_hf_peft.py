"""PEFT, unmodified, on npu: LoRA fine-tuning of a tiny LLaMA under the Hugging Face Trainer in
bf16 (autocast) gives the CPU run's losses within bf16 tolerance, only the adapter trains, and the
saved adapter loads back onto npu with the same outputs."""
import pytest
import torch

import torch_npu  # noqa: F401

peft = pytest.importorskip("peft")  # installed by set-up (scripts/requirements-dev.txt)
transformers = pytest.importorskip("transformers")

VOCAB = 64


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def lora(model):
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                             target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    torch.manual_seed(1)
    return peft.get_peft_model(model, config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=16):
        self.ids = torch.randint(1, VOCAB, (n, 10), generator=torch.Generator().manual_seed(7))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def fine_tune(tmp_path, use_cpu):
    model = lora(tiny_llama())
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("cpu" if use_cpu else "npu")), use_cpu=use_cpu, bf16=True,
        max_steps=6, per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
        report_to=[], seed=0, save_strategy="no", disable_tqdm=True, optim="adamw_torch")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer.model, losses, frozen


def test_lora_under_the_trainer_in_bf16_matches_the_cpu_and_its_adapter_loads_back(tmp_path):
    cpu_model, cpu_losses, _ = fine_tune(tmp_path, use_cpu=True)
    npu_model, npu_losses, frozen = fine_tune(tmp_path, use_cpu=False)
    assert next(npu_model.parameters()).device.type == "npu"
    assert len(npu_losses) == 6
    torch.testing.assert_close(torch.tensor(npu_losses), torch.tensor(cpu_losses), rtol=2e-2,
                               atol=2e-2)
    # Only the LoRA matrices trained (lora_B starts at zero and moved, as on the CPU); the base
    # weights are as they were.
    trainable = [n for n, p in npu_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable), trainable
    cpu_params = dict(cpu_model.named_parameters())
    for n in trainable:
        p = dict(npu_model.named_parameters())[n].detach().cpu()
        if "lora_B" in n:
            assert p.abs().sum() > 0, n
        # bf16 gradients differ in the last bits between devices, and Adam's normalised step
        # (lr 1e-2) turns a tiny gradient's difference into up to a step: two steps allowed.
        torch.testing.assert_close(p, cpu_params[n].detach(), rtol=0, atol=2e-2, msg=n)
    for n, p in npu_model.named_parameters():
        if n in frozen:
            assert torch.equal(p.detach().cpu(), frozen[n]), n
    # The adapter saved from npu loads back onto a fresh base model on npu.
    npu_model.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(tiny_llama().to("npu"), tmp_path / "adapter").eval()
    ids = Tokens().ids[:2].npu()
    # The trained model's forward stays wrapped in accelerate's bf16 autocast after training;
    # the reloaded one runs under the same autocast.
    with torch.no_grad():
        want = npu_model.eval()(input_ids=ids).logits
        with torch.autocast("npu", dtype=torch.bfloat16):
            got = reloaded(input_ids=ids).logits.float()
    assert got.device.type == "npu"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
