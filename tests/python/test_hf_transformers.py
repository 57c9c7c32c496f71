"""Hugging Face transformers and accelerate, unmodified, on npu: tiny models built from configs
(no downloads) must compute what the CPU computes. transformers detects torch_npu by itself and
takes its npu paths (torch.npu.*, torch_npu.npu_fusion_attention for flash attention)."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

import torch_npu  # noqa: F401

transformers = pytest.importorskip("transformers")  # installed by set-up; absent only by hand
from transformers import (  # noqa: E402
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    Trainer,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
)
from transformers.utils import is_torch_npu_available  # noqa: E402

VOCAB = 64


def _llama(tied: bool, attn: str = "eager"):
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=tied)
    config._attn_implementation = attn
    return LlamaForCausalLM(config)


def _gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64))


def _bert():
    return BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64,
                                      max_position_embeddings=64))


def _t5():
    return T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
                                               num_layers=2, num_heads=4,
                                               decoder_start_token_id=0))


def _vit():
    return ViTForImageClassification(ViTConfig(image_size=16, patch_size=4, num_channels=3,
                                               hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64,
                                               num_labels=5))


def _batch(kind: str) -> dict:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (2, 12), generator=g)
    if kind == "vit":
        return {"pixel_values": torch.randn(2, 3, 16, 16, generator=g),
                "labels": torch.tensor([1, 4])}
    if kind == "t5":
        return {"input_ids": ids, "labels": torch.randint(1, VOCAB, (2, 6), generator=g)}
    return {"input_ids": ids, "labels": ids.clone()}


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _forward_backward(model, batch):
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach().cpu(), out.logits.detach().cpu(), grads


def test_transformers_detects_the_npu():
    assert is_torch_npu_available()
    args = TrainingArguments(output_dir="unused", report_to=[])
    assert args.device.type == "npu"


MODELS = {
    "llama-tied": lambda: _llama(tied=True),
    "llama-untied": lambda: _llama(tied=False),
    "llama-sdpa": lambda: _llama(tied=True, attn="sdpa"),
    "llama-flash": lambda: _llama(tied=True, attn="flash_attention_2"),
    "gpt2": _gpt2,
    "bert": _bert,
    "t5": _t5,
    "vit": _vit,
}


@pytest.fixture
def fp32_conv():
    """Convolutions in full fp32, as the CPU computes them. torch_npu's default
    (torch.npu.conv.allow_hf32 = True) rounds their inputs to HF32, as a 910B does, which moves
    ViT's patch-embedding gradient by about 1e-3 (test_hf32.py checks that path)."""
    before = torch.npu.conv.allow_hf32
    torch.npu.conv.allow_hf32 = False
    yield
    torch.npu.conv.allow_hf32 = before


@pytest.mark.parametrize("name", MODELS)
def test_forward_and_backward_equal_the_cpu(name, fp32_conv):
    torch.manual_seed(0)
    cpu_model = MODELS[name]().eval()  # eval: no dropout, so both devices compute the same thing
    npu_model = copy.deepcopy(cpu_model)
    if name == "llama-flash":
        # flash_attention_2 is npu-only (torch_npu.npu_fusion_attention): the CPU runs eager
        cpu_model = _llama(tied=True, attn="eager").eval()
        cpu_model.load_state_dict(npu_model.state_dict())
    params_before = list(npu_model.parameters())
    npu_model.to("npu")
    assert list(npu_model.parameters())[0] is params_before[0]
    if name == "llama-tied" or name == "gpt2" or name == "t5":
        emb = npu_model.get_input_embeddings().weight
        assert npu_model.get_output_embeddings().weight is emb
    kind = name.split("-")[0]
    batch = _batch(kind)
    loss_c, logits_c, grads_c = _forward_backward(cpu_model, batch)
    loss_n, logits_n, grads_n = _forward_backward(npu_model, _to(batch, "npu"))
    torch.testing.assert_close(loss_n, loss_c, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits_n, logits_c, rtol=1e-4, atol=1e-4)
    assert grads_n.keys() == grads_c.keys()
    for k in grads_c:
        torch.testing.assert_close(grads_n[k], grads_c[k], rtol=1e-3, atol=1e-5, msg=k)


@pytest.mark.parametrize("attn", ["sdpa", "flash_attention_2"])
def test_padded_batch_equals_cpu_eager(attn):
    # A right-padded batch: flash_attention_2 unpads it into torch_npu's varlen (TND) layout.
    torch.manual_seed(0)
    cpu_model = _llama(tied=True, attn="eager").eval()
    npu_model = _llama(tied=True, attn=attn).eval()
    npu_model.load_state_dict(cpu_model.state_dict())
    npu_model.to("npu")
    ids = torch.randint(1, VOCAB, (3, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    ref = cpu_model(input_ids=ids, attention_mask=mask).logits
    out = npu_model(input_ids=ids.npu(), attention_mask=mask.npu()).logits.cpu()
    keep = mask.bool()
    torch.testing.assert_close(out[keep], ref[keep], rtol=1e-4, atol=1e-4)


def test_generate_equals_the_cpu():
    torch.manual_seed(0)
    model = _llama(tied=True).eval()
    prompt = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(5))
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    cpu_out = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    model.to("npu")
    npu_out = model.generate(prompt.npu(), attention_mask=torch.ones_like(prompt).npu(), **kwargs)
    assert npu_out.device.type == "npu"
    assert torch.equal(npu_out.cpu(), cpu_out)


def test_save_pretrained_and_from_pretrained_onto_the_npu(tmp_path):
    torch.manual_seed(0)
    model = _llama(tied=True).eval()
    batch = _batch("llama")
    ref = model(input_ids=batch["input_ids"]).logits
    model.to("npu").save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path, device_map="npu").eval()
    assert loaded.device.type == "npu"
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    out = loaded(input_ids=batch["input_ids"].npu()).logits
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)


class _TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n=16):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(1, VOCAB, (n, 10), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _trainer_losses(tmp_path, use_cpu: bool, **kwargs):
    torch.manual_seed(0)
    model = _llama(tied=True)
    args = TrainingArguments(output_dir=str(tmp_path / ("cpu" if use_cpu else "npu")),
                             use_cpu=use_cpu, max_steps=6, per_device_train_batch_size=4,
                             learning_rate=1e-2, logging_steps=1, report_to=[], seed=0,
                             save_strategy="no", disable_tqdm=True,
                             **({"optim": "adamw_torch"} | kwargs))
    trainer = Trainer(model=model, args=args, train_dataset=_TokenDataset())
    trainer.train()
    device = next(trainer.model.parameters()).device
    return [h["loss"] for h in trainer.state.log_history if "loss" in h], device


def test_trainer_picks_the_npu_and_matches_a_cpu_run(tmp_path):
    cpu_losses, cpu_device = _trainer_losses(tmp_path, use_cpu=True)
    npu_losses, npu_device = _trainer_losses(tmp_path, use_cpu=False)
    assert cpu_device.type == "cpu" and npu_device.type == "npu"
    assert len(npu_losses) == 6 and npu_losses[-1] < npu_losses[0]
    torch.testing.assert_close(torch.tensor(npu_losses), torch.tensor(cpu_losses), rtol=1e-3,
                               atol=1e-4)


def test_trainer_bf16_matches_a_cpu_bf16_run(tmp_path):
    # bf16=True: the Trainer runs forward and loss under torch.autocast(<device>, bfloat16)
    cpu_losses, _ = _trainer_losses(tmp_path, use_cpu=True, bf16=True)
    npu_losses, _ = _trainer_losses(tmp_path, use_cpu=False, bf16=True)
    assert npu_losses[-1] < npu_losses[0]
    torch.testing.assert_close(torch.tensor(npu_losses), torch.tensor(cpu_losses), rtol=2e-2,
                               atol=2e-2)


def test_trainer_fp16_and_npu_fused_adamw_match_a_cpu_run(tmp_path):
    # fp16=True: autocast(float16) + torch.amp.GradScaler on npu; the CPU reference runs the
    # same autocast dtype with a CPU GradScaler. optim="adamw_torch_npu_fused" takes
    # torch_npu.optim.NpuFusedAdamW, compared with the CPU's plain AdamW.
    cpu_losses, _ = _trainer_losses(tmp_path, use_cpu=True, fp16=True)
    npu_losses, _ = _trainer_losses(tmp_path, use_cpu=False, fp16=True)
    torch.testing.assert_close(torch.tensor(npu_losses), torch.tensor(cpu_losses), rtol=2e-2,
                               atol=2e-2)
    cpu_losses, _ = _trainer_losses(tmp_path, use_cpu=True)
    fused_losses, _ = _trainer_losses(tmp_path / "fused", use_cpu=False,
                                      optim="adamw_torch_npu_fused")
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(cpu_losses), rtol=1e-3,
                               atol=1e-4)


ACCELERATE_LOOP = """
import torch, torch.nn.functional as F
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

def run(use_accelerate):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # one batch of 4 sequences, seen 6 times: the loss must fall
    ids = torch.randint(1, 64, (4, 10), generator=torch.Generator().manual_seed(7)).repeat(6, 1)
    dl = torch.utils.data.DataLoader(ids, batch_size=4)
    if use_accelerate:
        acc = Accelerator()
        model, opt, dl = acc.prepare(model, opt, dl)
        assert acc.device.type == "npu", acc.device
    losses = []
    for x in dl:
        opt.zero_grad()
        loss = model(input_ids=x, labels=x).loss
        (acc.backward(loss) if use_accelerate else loss.backward())
        opt.step()
        losses.append(loss.item())
    assert next(model.parameters()).device.type == ("npu" if use_accelerate else "cpu")
    return losses

ref = run(False)
got = run(True)
print("cpu", ref)
print("npu", got)
assert got[-1] < got[0], got
torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-3, atol=1e-4)
print("OK")
"""


def test_accelerate_loop_trains_on_the_npu(python):
    # Accelerator's state is a process-wide singleton: a fresh interpreter keeps it to this test.
    result = python(ACCELERATE_LOOP, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


ACCELERATE_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_NPU
num_machines: 1
machine_rank: 0
num_processes: 2
gpu_ids: all
mixed_precision: 'no'
rdzv_backend: static
same_network: true
use_cpu: false
main_training_function: main
"""


def test_accelerate_launch_two_processes_equals_single_process_cpu(tmp_path):
    # The real launcher (.venv/bin/accelerate, torch.distributed.run underneath) with a config
    # file of our own, so no user config or network is consulted; two ranks, hccl.
    import re
    import sys

    from dist_launch import finish, free_port, job_env, start, worker

    sys.path.insert(0, os.path.dirname(worker("accelerate_mlp.py")))
    import accelerate_mlp

    config = tmp_path / "accelerate.yaml"
    config.write_text(ACCELERATE_CONFIG)
    out = tmp_path / "params.pt"
    launcher = os.path.join(os.path.dirname(sys.executable), "accelerate")
    env = job_env({"HF_HUB_OFFLINE": "1", "ACCELERATE_LOG_LEVEL": "warning"})
    proc = start([launcher, "launch", "--config_file", str(config), "--num_processes", "2",
                  "--main_process_port", str(free_port()), worker("accelerate_mlp.py"), str(out)],
                 env)
    r = finish(proc, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:]
    reports = dict(re.findall(r"rank (\d) (local=\d device=\S+ param_device=\S+ backend=\S+ "
                              r"world=\d distributed_type=\S+ steps=\d+)", r.stdout))
    steps = accelerate_mlp.SAMPLES // (2 * accelerate_mlp.PER_RANK)
    assert reports == {
        str(rank): f"local={rank} device=npu:{rank} param_device=npu:{rank} backend=hccl "
                   f"world=2 distributed_type=MULTI_NPU steps={steps}" for rank in (0, 1)
    }, r.stdout[-4000:]

    # The reference: one CPU process, global batches of 2 x PER_RANK consecutive samples (rank r
    # takes the r-th batch of each pair, and DDP averages the two equal-size means).
    model, x, y = accelerate_mlp.model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=accelerate_mlp.STEPS_LR)
    glob = 2 * accelerate_mlp.PER_RANK
    for s in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x[s * glob:(s + 1) * glob]), y[s * glob:(s + 1) * glob]).backward()
        opt.step()
    trained = torch.load(out)
    reference = model.state_dict()
    assert trained.keys() == reference.keys()
    initial = accelerate_mlp.model_and_data()[0].state_dict()
    for name, value in reference.items():
        assert not torch.equal(value, initial[name]), name  # training moved it
        torch.testing.assert_close(trained[name], value, rtol=1e-5, atol=1e-6)


def test_environment_reports_name_the_npu():
    import subprocess
    import sys

    bin_dir = os.path.dirname(sys.executable)
    acc = subprocess.run([os.path.join(bin_dir, "accelerate"), "env"], capture_output=True,
                         text=True, timeout=120)
    assert acc.returncode == 0, acc.stderr
    assert f"CANN version: {torch.version.cann}" in acc.stdout
    assert "NPU" in acc.stdout or "npu" in acc.stdout
    tf = subprocess.run([os.path.join(bin_dir, "transformers"), "env"], capture_output=True,
                        text=True, timeout=120)
    assert tf.returncode == 0, tf.stderr
    assert torch.version.cann in tf.stdout
