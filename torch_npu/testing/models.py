"""Small models written for the tests and benchmarks (no downloads): an MLP, a CNN, a
GPT-style decoder and a LLaMA-style decoder written without fused kernels, with a seeded batch
generator and a training loop that records losses."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, d)), self.dropout, self.training)
        x = x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.dropout, self.training)
        return x


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, block=16, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, from elementwise ops and a mean."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    """Pre-norm attention and SwiGLU MLP, attention spelled out: q @ k^T, masked_fill with the
    causal mask, softmax, @ v; rotary embeddings applied as q * cos + rotate_half(q) * sin."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        dh = d // self.heads
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, self.heads, dh).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        att = att.masked_fill(mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.wo(y)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LLaMA(nn.Module):
    """A LLaMA-style decoder as written without fused kernels (RMSNorm, rotary embeddings and
    attention in Python, SwiGLU MLP), with the output head tied to the token embedding."""

    def __init__(self, vocab=64, d=32, heads=4, layers=2, block=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        ffn = (8 * d // 3 + 15) // 16 * 16
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied embeddings
        dh = d // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        freqs = torch.outer(torch.arange(block, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.ones(block, block, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
        x = self.tok(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.head(self.norm(x))


# LLaMA-style sizes by model width: the model's arguments and the tokens per sequence.
LLAMA_SIZES = {
    32: dict(vocab=64, d=32, heads=4, layers=2, block=16),
    128: dict(vocab=256, d=128, heads=4, layers=2, block=64),
}


def make_model(kind, **kwargs):
    return {"mlp": MLP, "cnn": CNN, "gpt": GPT, "llama": LLaMA}[kind](**kwargs)


def batches(kind, steps, batch=8, seed=0, vocab=64, seq=16):
    """The same inputs and targets for every device (generated on the CPU). Token models
    ("gpt", "llama") take `seq` tokens of a `vocab`-word vocabulary, targets shifted by one."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if kind == "mlp":
            yield torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
        elif kind == "cnn":
            yield torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)
        else:
            tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
            yield tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_fn(kind, out, target):
    if kind in ("gpt", "llama"):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    return F.cross_entropy(out, target)


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-3)


def train(kind, device, optimizer="sgd", steps=20, seed=0, **model_kwargs):
    """Trains a freshly initialised model (same weights on every device); returns the losses."""
    torch.manual_seed(seed)
    model = make_model(kind, **model_kwargs).to(device)
    opt = make_optimizer(optimizer, model.parameters())
    losses = []
    for x, y in batches(kind, steps, seed=seed):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(kind, model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_mixed(kind, device, dtype, optimizer="adamw", steps=20, seed=0, **model_kwargs):
    """train() under torch.autocast(device, dtype): bfloat16 alone, float16 with a GradScaler
    (as a float16 recipe needs); returns the losses (float32, computed inside the region)."""
    torch.manual_seed(seed)
    model = make_model(kind, **model_kwargs).to(device)
    opt = make_optimizer(optimizer, model.parameters())
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    losses = []
    for x, y in batches(kind, steps, seed=seed):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype):
            loss = loss_fn(kind, model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses
