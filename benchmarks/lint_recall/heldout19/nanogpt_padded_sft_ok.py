"""nanoGPT's model.py, adapted by a learner for supervised fine-tuning on padded batches (correct twin).

Karpathy's `GPTConfig`, `CausalSelfAttention` with `self.flash` and the slow path on the
`self.bias` tril buffer, `Block`, `GPT` with weight tying. For right-padded batches the learner
passes a key padding mask (True = real token) and, on the flash path, hands it to SDPA next to
the existing `is_causal=True`: the CPU default kernel ANDs the two, the MATH kernel raises, and
other kernels may drop one of them.

Twin: folds the causal triangle into `attn_mask` and sets `is_causal` only when there is no mask.

Source: pytorch/pytorch#131254 and PR #105342 / #101089 (is_causal is a hint), conventions.md
§1 (SDPA is_causal row) and §2.7 (`Explicit attn_mask should not be set when is_causal=True`).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 32
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):

    def __init__(self, config, flash=True):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = flash and hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

    def forward(self, x, attn_mask=None):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if self.flash:
            if attn_mask is not None:  # fold the causal triangle into the padding mask
                attn_mask = attn_mask & (self.bias[:, :, :T, :T] == 1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0, is_causal=attn_mask is None)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            if attn_mask is not None:
                att = att.masked_fill(~attn_mask, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):

    def __init__(self, config, flash=True):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, flash)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias))

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.ln_1(x), attn_mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):

    def __init__(self, config, flash=True):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList([Block(config, flash) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # https://paperswithcode.com/method/weight-tying

    def forward(self, idx, targets=None, attention_mask=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        # (b, t) 1 = real token -> (b, 1, 1, t) bool, True = may attend
        attn_mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        for block in self.h:
            x = block(x, attn_mask)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


if __name__ == "__main__":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config).eval()
    slow = GPT(config, flash=False).eval()
    slow.load_state_dict(model.state_dict())
    idx = torch.randint(1, config.vocab_size, (2, 12))
    attention_mask = torch.ones(2, 12, dtype=torch.long)
    attention_mask[1, 8:] = 0  # right padding
    targets = idx.roll(-1, dims=1).masked_fill(attention_mask == 0, -1)
    with torch.no_grad():
        logits, loss = model(idx, targets, attention_mask)
        ref, _ = slow(idx, targets, attention_mask)
        print("flash (default kernel) vs slow path:", (logits - ref).abs().max().item())
        with sdpa_kernel(SDPBackend.MATH):
            logits, _ = model(idx, targets, attention_mask)
        print("MATH vs slow path:", (logits - ref).abs().max().item())
