"""TRL, unmodified, on npu: an SFTTrainer run (a tiny LLaMA, a word-level tokenizer built in
memory, a dataset of text made in memory: no downloads) gives the CPU run's losses, in float32
exactly and in bf16 within bf16 tolerance."""
import pytest
import torch

import torch_npu  # noqa: F401

trl = pytest.importorskip("trl")  # installed by set-up (scripts/requirements-dev.txt)
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = [f"w{i}" for i in range(60)]


def tokenizer():
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                                eos_token="<eos>", unk_token="<unk>")


def texts():
    g = torch.Generator().manual_seed(3)
    return datasets.Dataset.from_dict({"text": [
        " ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (8,), generator=g).tolist())
        for _ in range(16)]})


def sft_losses(tmp_path, use_cpu, bf16):
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64,
                                      pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    args = trl.SFTConfig(output_dir=str(tmp_path / f"{use_cpu}-{bf16}"), use_cpu=use_cpu,
                         bf16=bf16, max_steps=5, per_device_train_batch_size=4,
                         learning_rate=1e-2, logging_steps=1, report_to=[], seed=0,
                         save_strategy="no", disable_tqdm=True)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=texts(),
                             processing_class=tokenizer())
    trainer.train()
    device = next(trainer.model.parameters()).device
    return torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h]), device


@pytest.mark.parametrize("bf16", [False, True])
def test_sft_trainer_on_npu_matches_the_cpu(tmp_path, bf16):
    cpu, cpu_device = sft_losses(tmp_path, use_cpu=True, bf16=bf16)
    npu, npu_device = sft_losses(tmp_path, use_cpu=False, bf16=bf16)
    assert cpu_device.type == "cpu" and npu_device.type == "npu"
    assert len(npu) == 5 and npu[-1] < npu[0]
    tol = 2e-2 if bf16 else 1e-4
    torch.testing.assert_close(npu, cpu, rtol=tol, atol=tol)
