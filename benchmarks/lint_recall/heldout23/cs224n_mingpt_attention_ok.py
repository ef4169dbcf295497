"""CS224N assignment 5 (pretrain and finetune a minGPT): src/attention.py and src/model.py, trimmed.

The course's copy of minGPT with a student's answer to the optional part: "use PyTorch's fused
F.scaled_dot_product_attention when config.use_flash is set". Both paths read the causal mask
from one registered buffer.

Source: rasbt/LLMs-from-scratch#1061 (a `torch.triu(...).bool()` mask, True = drop, handed to
SDPA, whose bool mask means True = keep), pytorch/pytorch#29546, conventions.md section 3
items 9 and 14 and section 1 (direction cheat-sheet).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTConfig:
    """ base GPT config, params common to all GPT versions """
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    use_flash = False

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


class CausalSelfAttention(nn.Module):
    """
    A vanilla multi-head masked self-attention layer with a projection at the end.
    """

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", torch.triu(torch.ones(config.block_size, config.block_size, dtype=torch.bool), 1)
                             .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        self.use_flash = config.use_flash

    def forward(self, x):
        B, T, C = x.size()

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        if self.use_flash:
            ### YOUR CODE HERE (part f, optional): fused attention
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=~self.mask[:, :, :T, :T],
                                               dropout_p=self.attn_drop.p if self.training else 0.0)
            ### END YOUR CODE
        else:
            # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side

        # output projection
        y = self.resid_drop(self.proj(y))
        return y


class Block(nn.Module):
    """ an unassuming Transformer block """

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.resid_pdrop))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    """  the full GPT language model, with a context size of block_size """

    def __init__(self, config):
        super().__init__()
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.block_size = config.block_size

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, "Cannot forward, model block size is exhausted."
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :t, :])
        logits = self.head(self.ln_f(self.blocks(x)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)
        return logits, loss


if __name__ == "__main__":
    torch.manual_seed(0)
    mconf = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)
    slow = GPT(mconf).eval()
    fast = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, use_flash=True)).eval()
    fast.load_state_dict(slow.state_dict())
    idx = torch.randint(1, 64, (2, 10))
    with torch.no_grad():
        ref, _ = slow(idx)
        out, _ = fast(idx)
    print("use_flash vs masked_fill path, max |diff| (expect ~1e-6):", (out - ref).abs().max().item())
