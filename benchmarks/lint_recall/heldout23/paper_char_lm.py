"""Reference implementation: character-level transformer LM (text8-style setup, trimmed).

Single-file paper code: SinusoidalPositions, CausalSelfAttention on torch.bmm with the heads
folded into the batch ((b * h, n, d), the older fairseq layout), MLP, DecoderBlock, CharLM, a
batch sampler over a character string, bits-per-character evaluation, train() and argparse at
the bottom. The causal mask is computed once and registered as a buffer.

Source: seed masked_fill_inplace.txt (section 与模型缓冲区的配合: a registered mask filled with
-1e9 and applied with `x * self.mask`) and seed self_attention_mask_guide.txt section 3
(常见误区: PyTorch 中 mask 是"加法"而非"乘法"; the -inf/0 causal mask of generate_causal_mask).
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SinusoidalPositions(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        inv_freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * inv_freq), torch.cos(pos * inv_freq)
        self.register_buffer("table", table)

    def forward(self, n):
        return self.table[:n]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, max_len, dropout):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("future_mask", torch.triu(torch.full((max_len, max_len), float("-inf")), diagonal=1))

    def forward(self, x):
        b, n, dim = x.shape
        q, k, v = self.in_proj(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2).reshape(b * self.heads, n, self.head_dim)
                   for t in (q, k, v))
        attn_weights = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.head_dim)  # (b * h, n, n)
        attn_weights = attn_weights * self.future_mask[:n, :n]  # expect: MC523 registered
        attn_probs = self.dropout(F.softmax(attn_weights, dim=-1))
        out = torch.bmm(attn_probs, v)  # (b * h, n, d)
        return self.out_proj(out.reshape(b, self.heads, n, self.head_dim).transpose(1, 2).reshape(b, n, dim))


class MLP(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.fc1, self.fc2, self.dropout = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.fc2(F.gelu(self.fc1(x))))


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads, max_len, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, max_len, dropout)
        self.mlp = MLP(dim, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharLM(nn.Module):
    def __init__(self, vocab, dim, depth, heads, max_len, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = SinusoidalPositions(dim, max_len)
        self.blocks = nn.ModuleList([DecoderBlock(dim, heads, max_len, dropout) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.embed(idx) * math.sqrt(self.embed.embedding_dim) + self.pos(idx.shape[1])
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def get_batch(data, batch_size, seq_len, gen):
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
    x = torch.stack([data[s:s + seq_len] for s in starts])
    y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts])
    return x, y


@torch.no_grad()
def evaluate_bpc(model, data, seq_len, gen):
    model.eval()
    x, y = get_batch(data, 16, seq_len, gen)
    loss = F.cross_entropy(model(x).transpose(1, 2), y)
    model.train()
    return loss.item() / math.log(2)


def train(args):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    text = "anarchism originated as a term of abuse first used against early working class radicals " * 20
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    model = CharLM(len(chars), args.dim, args.depth, args.heads, args.seq_len, args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x, y = get_batch(data, args.batch_size, args.seq_len, gen)
        loss = F.cross_entropy(model(x).transpose(1, 2), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    print(f"train loss {loss.item():.3f}, valid bpc {evaluate_bpc(model, data, args.seq_len, gen):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Character-level transformer LM")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=1111)
    train(parser.parse_args())
