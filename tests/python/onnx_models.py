"""Models and helpers shared by test_atc.py and test_inference.py: PyTorch modules exported to
ONNX in the tests, the installed atc command, onnxruntime as the reference."""

import os
import subprocess
import sys

import torch
from torch import nn

ATC = os.path.join(os.path.dirname(sys.executable), "atc")
TOL = 1e-4


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(32, 64), nn.Linear(64, 48), nn.Linear(48, 10)

    def forward(self, x):
        return torch.softmax(self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x))))), dim=-1)


class CNN(nn.Module):
    """torchvision-style: conv-BN-relu, pooling, a conv followed by two BNs (the second cannot
    fold into the conv), global pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2, self.bn3 = nn.BatchNorm2d(16), nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16 * 4 * 4 + 16, 10)
        for bn in (self.bn1, self.bn2, self.bn3):  # non-trivial statistics: folding matters
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.sigmoid(self.bn3(self.bn2(self.conv2(x))))
        y = nn.functional.avg_pool2d(torch.relu(self.conv3(x)), 2)
        g = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.fc(torch.cat([torch.flatten(y, 1), torch.flatten(g, 1)], dim=1))


class Encoder(nn.Module):
    """The parts of a transformer encoder layer the engine covers: LayerNorm, batched MatMul
    with Transpose, Softmax, GELU (erf)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.d = heads, d
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        q, k, v = (f(h).reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))


class DecoderBlock(nn.Module):
    """A GPT block: fused qkv Linear split in three, causal mask (tril -> masked_fill, folded
    by atc into a constant condition for Where), LayerNorm, GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))


class GPT(nn.Module):
    """A small GPT-style decoder without KV cache: token ids in (int64), logits out."""

    def __init__(self, vocab=50, d=32, context=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(DecoderBlock(d), DecoderBlock(d))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


class WithReduceMean(nn.Module):
    def forward(self, x):
        return torch.relu(x).mean(dim=(2, 3))


class WithCumSum(nn.Module):  # CumSum: an op the engine does not run
    def forward(self, x):
        return torch.relu(x).cumsum(dim=1)


def export(model, shape, path, fold=True, example=None):
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        example = torch.randn(*shape) if example is None else example
        torch.onnx.export(model, (example,), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"], opset_version=17,
                          do_constant_folding=fold)
    return str(path)


def atc(*args):
    return subprocess.run([ATC, *args], capture_output=True, text=True, timeout=300)


def convert(onnx_path, out_stem, *extra):
    r = atc(f"--model={onnx_path}", "--framework=5", f"--output={out_stem}",
            "--soc_version=Ascend910B2", *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ATC run success" in r.stdout
    return str(out_stem) + ".om"


def onnxruntime_run(onnx_path, x):
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def make_models(directory):
    """Exports and converts the MLP, the CNN and the encoder layer; returns {name: (onnx path,
    om path, input shape)}. The CNN and the encoder are exported without the exporter's
    constant folding, so atc itself must fold the BNs and the shape arithmetic (Shape /
    Gather / Unsqueeze / Concat feeding Reshape, 0-d constants included)."""
    specs = {"mlp": (MLP, (4, 32), True), "cnn": (CNN, (2, 3, 32, 32), False),
             "encoder": (Encoder, (2, 8, 32), False)}
    out = {}
    for name, (cls, shape, fold) in specs.items():
        torch.manual_seed(1)
        path = export(cls(), shape, directory / f"{name}.onnx", fold=fold)
        out[name] = (path, convert(path, directory / name), shape)
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 16))
    path = export(GPT(), ids.shape, directory / "gpt.onnx", fold=False, example=ids)
    out["gpt"] = (path, convert(path, directory / "gpt"), tuple(ids.shape))
    return out


# Ways to damage an .om file, with the word the refusal must contain.
DAMAGED_OM = [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:40], "truncated"),
    (lambda b: b[:-100] + bytes(100), "corrupt"),
    (lambda b: b"PK\x03\x04" + b[4:], "not an offline model"),
    (lambda b: b[:8] + (3).to_bytes(4, "little") + b[12:], "version 3"),
]


class KVCacheDecoder(nn.Module):
    """A GPT-2-shaped decoder (learned positions, pre-LN blocks, fused qkv, tanh GELU, tied
    head) with a static KV cache, written so that one ONNX graph serves the prefill (S prompt
    tokens) and each decode step (S = 1) and needs no scatter: the caller gives
    `place` [S, T], one-hot (row s has a 1 at the cache slot of token s), and `mask` [S, T],
    additive (0 where token s may attend, -1e4 elsewhere). The new keys / values enter the
    cache as cache * (1 - slots written) + place^T @ new; the caches are returned whole.
    Inputs: ids [B, S] int64, pos [B, S] int64, place [S, T], mask [S, T],
    cache_k / cache_v [L, B, H, T, D]. Outputs: logits [B, S, vocab], cache_k, cache_v."""

    def __init__(self, vocab=96, d=64, heads=4, layers=2, context=32):
        super().__init__()
        self.heads, self.layers, self.context = heads, layers, context
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ff1 = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(layers))
        self.ff2 = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids, pos, place, mask, cache_k, cache_v):
        b, s = ids.shape
        d = self.tok.weight.shape[1]
        hd = d // self.heads
        x = self.tok(ids) + self.pos(pos)
        keep = (1.0 - place.sum(0)).unsqueeze(-1)  # [T, 1]: 0 at the slots written now
        new_k, new_v = [], []
        for i in range(self.layers):
            q, k, v = self.qkv[i](self.ln1[i](x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, s, self.heads, hd).transpose(1, 2) for z in (q, k, v))
            ck = cache_k[i] * keep + place.t() @ k  # [B, H, T, D]
            cv = cache_v[i] * keep + place.t() @ v
            new_k.append(ck)
            new_v.append(cv)
            att = torch.softmax(q @ ck.transpose(-1, -2) * hd ** -0.5 + mask, dim=-1)
            x = x + self.proj[i]((att @ cv).transpose(1, 2).reshape(b, s, d))
            x = x + self.ff2[i](nn.functional.gelu(self.ff1[i](self.ln2[i](x)),
                                                   approximate="tanh"))
        logits = self.ln_f(x) @ self.tok.weight.t()
        return logits, torch.stack(new_k), torch.stack(new_v)

    def step_inputs(self, ids, start, batch=1):
        """pos, place and mask for tokens ids [B, S] written at slots start..start+S-1."""
        s, t = ids.shape[1], self.context
        slots = torch.arange(start, start + s)
        pos = slots.unsqueeze(0).expand(batch, s).contiguous()
        place = torch.zeros(s, t)
        place[torch.arange(s), slots] = 1.0
        mask = torch.where(torch.arange(t).unsqueeze(0) <= slots.unsqueeze(1), 0.0, -1e4)
        return pos, place, mask

    def empty_cache(self, batch=1):
        d = self.tok.weight.shape[1]
        shape = (self.layers, batch, self.heads, self.context, d // self.heads)
        return torch.zeros(shape), torch.zeros(shape)


KV_INPUTS = ["ids", "pos", "place", "mask", "cache_k", "cache_v"]
KV_OUTPUTS = ["logits", "cache_k_out", "cache_v_out"]


def export_kv_decoder(model, path, prompt=8):
    """Exports KVCacheDecoder with the sequence length dynamic (batch 1)."""
    model.eval()
    ids = torch.randint(0, model.tok.num_embeddings, (1, prompt))
    args = (ids, *model.step_inputs(ids, 0), *model.empty_cache())
    dyn = {"ids": {1: "S"}, "pos": {1: "S"}, "place": {0: "S"}, "mask": {0: "S"}}
    with torch.no_grad():
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=KV_INPUTS,
                          output_names=KV_OUTPUTS, dynamic_axes=dyn, opset_version=17)
    return str(path)


def kv_decoder_input_shape(model, batch=1):
    t, d = model.context, model.tok.weight.shape[1]
    cache = f"{model.layers},{batch},{model.heads},{t},{d // model.heads}"
    return (f"ids:{batch},-1;pos:{batch},-1;place:-1,{t};mask:-1,{t};"
            f"cache_k:{cache};cache_v:{cache}")
