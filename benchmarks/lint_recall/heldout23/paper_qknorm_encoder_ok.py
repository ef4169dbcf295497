"""Reference implementation: QKNorm attention ("Query-Key Normalization for Transformers") in a
small text-classification encoder.

Research-code layout in one file: ScaleNorm, QKNormAttention (l2-normalised queries and keys,
cosine similarity times a learned gain g initialised from the sequence length, as in the
paper), FeedForward, EncoderLayer, Encoder, a classifier head, a synthetic task, train() and
argparse at the bottom. Padding is hidden in the scaled similarity matrix before the softmax.

Source: seed self_attention_mask_guide.txt, section 3 (常见误区: 有些框架使用 1/-1 而不是 -inf/0) and
section 7 Q3; TransformerLensOrg/TransformerLens PR #366 (fixes #318): a masking value that is
not negative enough for the scores it competes with.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ScaleNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(math.sqrt(dim)))
        self.eps = eps

    def forward(self, x):
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp(min=self.eps)


class QKNormAttention(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.g = nn.Parameter(torch.tensor(math.log2(max_len ** 2 - max_len)))

    def forward(self, x, mask):
        """x: (b, n, dim); mask: (b, n) bool, True for real tokens."""
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.g  # (b, h, n, n)
        sim = sim.masked_fill(~mask[:, None, None, :], float("-inf"))
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class FeedForward(nn.Module):
    def __init__(self, dim, mult=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.norm1, self.norm2 = ScaleNorm(dim), ScaleNorm(dim)
        self.attn = QKNormAttention(dim, heads, max_len)
        self.ff = FeedForward(dim)

    def forward(self, x, mask):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ff(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self, num_tokens, dim, depth, heads, max_len, num_classes):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads, max_len) for _ in range(depth)])
        self.to_logits = nn.Linear(dim, num_classes)

    def forward(self, tokens):
        mask = tokens != 0
        x = self.token_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x, mask)
        m = mask.unsqueeze(-1).float()
        return self.to_logits((x * m).sum(1) / m.sum(1))


def make_batch(batch_size, max_len, num_tokens, gen):
    """Label 1 if token 3 occurs in the real part of the sequence; random right padding."""
    tokens = torch.randint(1, num_tokens, (batch_size, max_len), generator=gen)
    lengths = torch.randint(2, max_len + 1, (batch_size,), generator=gen)
    tokens[torch.arange(max_len)[None, :] >= lengths[:, None]] = 0
    return tokens, (tokens == 3).any(dim=1).long()


@torch.no_grad()
def padding_check(model):
    """The same sequence with and without right padding must give the same logits."""
    model.eval()
    tokens = torch.tensor([[5, 3, 8, 0, 0, 0, 0, 0], [5, 3, 8, 9, 9, 9, 9, 9]])
    padded, unpadded = model(tokens)[0], model(tokens[:1, :3])[0]
    model.train()
    return (padded - unpadded).abs().max().item()


def train(args):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Encoder(args.num_tokens, args.dim, args.depth, args.heads, args.max_len, 2)
    print(f"padding check at init, max |diff| (expect ~1e-6): {padding_check(model):.3g}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        tokens, labels = make_batch(args.batch_size, args.max_len, args.num_tokens, gen)
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.3f}")
    print(f"padding check after training, max |diff| (expect ~1e-6): {padding_check(model):.3g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="QKNorm encoder")
    parser.add_argument("--num_tokens", type=int, default=20)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    train(parser.parse_args())
