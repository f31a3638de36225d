"""nanoGPT's model (Karpathy's model.py, same architecture, parameter names and
initialisation), restated compactly in PyTorch. It is the reference the C++ GPT is tested
against (make_gpt_fixture.py) and races against (benchmarks/gpt_bench_vs_pytorch.py).
Runs on Debian's python3-torch (1.13: no scaled_dot_product_attention, so attention is the
explicit masked softmax, as nanoGPT does on that version)."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False
    # A mixture of experts in place of the MLP of every moe_every-th block (0 experts: dense).
    n_experts: int = 0
    experts_per_token: int = 1
    capacity_factor: float = 1.25
    moe_every: int = 1
    aux_loss_weight: float = 0.01

    def is_moe_block(self, layer):
        return self.n_experts > 0 and (layer + 1) % self.moe_every == 0


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's own cannot drop it)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.attn_dropout = nn.Dropout(c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd = c.n_head, c.n_embd
        mask = torch.tril(torch.ones(c.block_size, c.block_size)).view(1, 1, c.block_size, c.block_size)
        self.register_buffer("bias", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Expert(nn.Module):
    """One expert: the MLP's shape, without its dropout (the mixture drops its sum)."""

    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class MixtureOfExperts(nn.Module):
    """nanodist's mixture of experts (nn/moe_mlp.hpp), written plainly: per sequence (GShard's
    group), each token's k most probable experts (ties: the lower index), the gate the router's
    probability itself (not renormalised over the k); each expert takes at most
    ceil(f·k·block_size/E) tokens of a sequence, position by position, each token's choices in
    rank order (causal: a choice's fate depends on earlier tokens only); a choice over capacity
    is dropped (the residual carries the token). Switch's
    load-balancing loss E·Σ_e f_e·P_e per sequence (f_e: the share of the k·T choices that
    named e, P_e: e's mean probability), averaged over sequences, is left in self.aux_loss."""

    def __init__(self, c):
        super().__init__()
        self.router = nn.Linear(c.n_embd, c.n_experts, bias=False)
        self.experts = nn.ModuleList([Expert(c) for _ in range(c.n_experts)])
        self.dropout = nn.Dropout(c.dropout)
        self.k, self.f, self.block_size = c.experts_per_token, c.capacity_factor, c.block_size
        self.aux_loss, self.dropped = None, 0

    def forward(self, x):
        B, T, C = x.size()
        E, k = len(self.experts), self.k
        probs = F.softmax(self.router(x), dim=-1)  # [B,T,E]
        choice = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[..., :k]  # [B,T,k]
        capacity = min(math.ceil(self.f * k * self.block_size / E), self.block_size)
        rows = [[] for _ in range(E)]  # (b, t) each expert computes, in slot order
        self.dropped = 0
        for b in range(B):
            used = [0] * E
            for t in range(T):
                for j in range(k):
                    e = int(choice[b, t, j])
                    if used[e] < capacity:
                        used[e] += 1
                        rows[e].append((b, t))
                    else:
                        self.dropped += 1
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            if rows[e]:
                bi = torch.tensor([r[0] for r in rows[e]])
                ti = torch.tensor([r[1] for r in rows[e]])
                out = probs[bi, ti, e].unsqueeze(-1) * expert(x[bi, ti])
                y = y.index_put((bi, ti), out.to(y.dtype), accumulate=True)  # (under autocast: bf16 in)
        chosen = F.one_hot(choice, E).sum(dim=2).to(x.dtype)  # [B,T,E]
        f = chosen.sum(dim=1) / (k * T)  # [B,E]
        P = probs.mean(dim=1)  # [B,E]
        self.aux_loss = (E * (f * P).sum(dim=-1)).mean()
        return self.dropout(y)


class Block(nn.Module):
    def __init__(self, c, layer=0):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, bias=c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = MixtureOfExperts(c) if c.is_moe_block(layer) else MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout),
            h=nn.ModuleList([Block(c, l) for l in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, bias=c.bias),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding=True):
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            if self.config.n_experts > 0 and self.training:  # the load-balancing losses, summed over the mixtures
                loss = loss + self.config.aux_loss_weight * self.aux_loss()
        return logits, loss

    def aux_loss(self):
        """Σ over the mixture blocks of their last forward's load-balancing loss (unweighted)."""
        return sum(b.mlp.aux_loss for b in self.transformer.h if isinstance(b.mlp, MixtureOfExperts))

    def configure_optimizer(self, weight_decay, learning_rate, betas):
        """nanoGPT's AdamW: decay only tensors with ≥ 2 dimensions."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)
