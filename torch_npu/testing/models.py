"""Small models written for the tests and benchmarks (no downloads): an MLP, a CNN and a
GPT-style decoder, with a seeded batch generator and a training loop that records losses."""
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


def make_model(kind, **kwargs):
    return {"mlp": MLP, "cnn": CNN, "gpt": GPT}[kind](**kwargs)


def batches(kind, steps, batch=8, seed=0):
    """The same inputs and targets for every device (generated on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if kind == "mlp":
            yield torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
        elif kind == "cnn":
            yield torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)
        else:
            seq = torch.randint(0, 64, (batch, 17), generator=g)
            yield seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def loss_fn(kind, out, target):
    if kind == "gpt":
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
