"""Tiny models and data of the modern fixtures (make_modern_fixtures.py). Deterministic: seeds only.

TrickyNet is the 0.14.5 fixtures' "tricky" model (tests/data/fixtures/*tricky*, /work/shared/oracle/oracle_models.py):
  gate [1] (0-dim [] in 0.14.5's; see below), tri [3], embed.weight [24,12] (tied with head.weight), ln1 [12]+[12], fc1 [20,12]+[20],
  proj [5,20]+[5] (FROZEN), fc2 [12,25]+[12], ln2 [12]+[12], head.bias [24];
  buffers: mix [12] (persistent, random), pos [6] (non-persistent).
Every module computes in fp32 (parameters cast with .float() in forward), so bf16/fp16 runs keep fp32 arithmetic;
parameters, gradients and checkpoints still have DeepSpeed's low-precision dtype, with fp32 masters.

Data: step s uses a fixed global batch, torch.Generator().manual_seed(1000 + s), GB = mb * W rows of S+1 tokens;
rank r takes rows [r*mb, (r+1)*mb); inputs = tokens[:, :-1], labels = tokens[:, 1:].
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_SEED = 1234


class F32Linear(nn.Linear):
    def forward(self, x):
        b = self.bias.float() if self.bias is not None else None
        return F.linear(x.float(), self.weight.float(), b)


class F32LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)


class F32Embedding(nn.Embedding):
    def forward(self, idx):
        return F.embedding(idx, self.weight.float())


class TrickyNet(nn.Module):
    V, D, H, FZ, S = 24, 12, 20, 5, 6

    def __init__(self, gate_0dim=False):
        super().__init__()
        V, D, H, FZ, S = self.V, self.D, self.H, self.FZ, self.S
        # 0-dim in the 0.14.5 fixtures; DeepSpeed 0.19.8's engine cannot broadcast a 0-dim param
        # (_broadcast_model: p.data.view(torch.uint8) -> "self.dim() cannot be 0 to view Float as Byte"), so [1] here
        self.gate = nn.Parameter(torch.tensor(1.0) + 0.1 * torch.randn(() if gate_0dim else (1,)))
        self.tri = nn.Parameter(0.1 * torch.randn(3))
        self.embed = F32Embedding(V, D)
        self.ln1 = F32LayerNorm(D)
        self.fc1 = F32Linear(D, H)
        self.proj = F32Linear(H, FZ)
        for p in self.proj.parameters():
            p.requires_grad_(False)  # frozen
        self.fc2 = F32Linear(H + FZ, D)
        self.ln2 = F32LayerNorm(D)
        self.head = F32Linear(D, V, bias=True)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("mix", 1.0 + 0.1 * torch.randn(D))  # persistent
        self.register_buffer("pos", torch.linspace(0.0, 1.0, S), persistent=False)

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        x = self.ln1(x) * self.mix.float() + 0.01 * self.pos.float()[None, :, None]
        h = torch.tanh(self.fc1(x) * self.gate.float())
        z = torch.cat([h, self.proj(h)], dim=-1)
        t = self.tri.float()
        y = self.fc2(z) + t[0] * x + t[1] * x.roll(1, dims=1) + t[2] * x.roll(2, dims=1)
        logits = self.head(self.ln2(y))
        return F.cross_entropy(logits.reshape(-1, self.V), labels.reshape(-1))


def tricky_param_groups(model, decay_lr=1e-2, no_decay_lr=5e-3):
    """Two torch param groups: decay (matrices and tri; weight_decay 0.1, lr decay_lr) and no-decay (the rest;
    weight_decay 0.0, lr no_decay_lr). The frozen proj.* go to their groups too (DeepSpeed drops them)."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if (p.dim() >= 2 or n == "tri") else no_decay).append(p)
    return [{"params": decay, "weight_decay": 0.1, "lr": decay_lr},
            {"params": no_decay, "weight_decay": 0.0, "lr": no_decay_lr}]


def tricky_group_names(model):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if (p.dim() >= 2 or n == "tri") else no_decay).append(n)
    return [decay, no_decay]


def tricky_batch(step, rank, world, mb=2):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, TrickyNet.V, (mb * world, TrickyNet.S + 1), generator=g)
    mine = tokens[rank * mb:(rank + 1) * mb]
    return mine[:, :-1].contiguous(), mine[:, 1:].contiguous()


def fingerprint(tokens):
    """A position-weighted token sum: tells which step's batch a rank trained on."""
    t = tokens.reshape(-1).long()
    return int((t * torch.arange(1, t.numel() + 1)).sum())


class ValueNet(nn.Module):
    """The second model of the accelerate fixture: a small regressor. in [8] -> 16 -> 1, plus a 1-element scale."""

    def __init__(self):
        super().__init__()
        self.fc = F32Linear(8, 16)
        self.out = F32Linear(16, 1)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x, y):
        pred = self.out(torch.tanh(self.fc(x))).squeeze(-1) * self.scale.float()
        return F.mse_loss(pred, y.float())


def value_batch(step, rank, world, mb=2):
    g = torch.Generator().manual_seed(5000 + step)
    x = torch.randn(mb * world, 8, generator=g)
    y = torch.randn(mb * world, generator=g)
    return x[rank * mb:(rank + 1) * mb], y[rank * mb:(rank + 1) * mb]


def llama_config(tie=False):
    """A tiny LlamaConfig (no download): vocab 32, hidden 16, 2 layers, 2 heads, 1 KV head, MLP 32."""
    import transformers
    return transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                    tie_word_embeddings=tie)


def llama_dataset(n=64, seq=8, vocab=32):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (n, seq), generator=g)
    return [{"input_ids": r, "labels": r.clone()} for r in ids]
