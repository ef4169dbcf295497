"""Enformer-style regulatory track prediction with contribution scores.

A one-hot DNA window goes through a convolutional stem with attention pooling,
a convolutional tower that halves the resolution at each stage, a transformer
over the resulting bins with a learned relative position bias, a centre crop to
the target length and a softplus head per organism. Windows that run off the
end of a contig are padded; bins made only of padding are left out of
attention and of the Poisson loss. ``contribution_scores`` gives gradient x
input for one output track (``--attribution``).

Source: seed masked_fill_inplace.txt (梯度计算风险, 总结 2-3); conventions.md §2.3
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ_INDICES = {"A": 0, "C": 1, "G": 2, "T": 3, "N": 4}
PAD_INDEX = -1


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def str_to_seq_indices(seqs, length):
    out = torch.full((len(seqs), length), PAD_INDEX, dtype=torch.long)
    for i, s in enumerate(seqs):
        s = s[:length]
        out[i, : len(s)] = torch.tensor([SEQ_INDICES[c] for c in s])
    return out


def seq_indices_to_one_hot(t):
    is_padding = t == PAD_INDEX
    one_hot = F.one_hot(t.clamp(min=0), num_classes=5)[..., :4].float()
    return one_hot.masked_fill(is_padding[..., None], 0.0)


class GELU(nn.Module):
    def forward(self, x):
        return torch.sigmoid(1.702 * x) * x


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


def ConvBlock(dim, dim_out=None, kernel_size=1):
    return nn.Sequential(
        nn.BatchNorm1d(dim), GELU(), nn.Conv1d(dim, default(dim_out, dim), kernel_size, padding=kernel_size // 2)
    )


class AttentionPool(nn.Module):
    def __init__(self, dim, pool_size=2):
        super().__init__()
        self.pool_size = pool_size
        self.to_attn_logits = nn.Conv2d(dim, dim, 1, bias=False)
        nn.init.dirac_(self.to_attn_logits.weight)
        with torch.no_grad():
            self.to_attn_logits.weight.mul_(2)

    def forward(self, x, keep):
        b, d, n = x.shape
        p = self.pool_size
        x = x.view(b, d, n // p, p)
        keep = keep.view(b, 1, n // p, p)
        logits = self.to_attn_logits(x).masked_fill(~keep, -torch.finfo(x.dtype).max)
        attn = logits.softmax(dim=-1)
        return (x * attn).sum(dim=-1), keep.any(dim=-1).squeeze(1)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_key=16, dropout=0.05, max_distance=32):
        super().__init__()
        self.heads = heads
        self.scale = dim_key ** -0.5
        self.max_distance = max_distance
        self.to_qkv = nn.Linear(dim, 3 * heads * dim_key, bias=False)
        self.rel_pos = nn.Embedding(2 * max_distance + 1, heads)
        self.to_out = nn.Linear(heads * dim_key, dim)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        sim = torch.einsum("b h i d, b h j d -> b h i j", q * self.scale, k)
        pos = torch.arange(n, device=x.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-self.max_distance, self.max_distance) + self.max_distance
        sim = sim + self.rel_pos(rel).permute(2, 0, 1)
        if exists(mask):
            sim = sim.masked_fill(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        attn = self.attn_dropout(sim.softmax(dim=-1))
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads=heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, dim * 2), nn.Dropout(0.1), nn.ReLU(), nn.Linear(dim * 2, dim))

    def forward(self, x, mask):
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + self.ff(self.norm2(x))


class Enformer(nn.Module):
    def __init__(self, dim=32, depth=2, heads=4, num_downsamples=3, target_length=4, output_heads=None):
        super().__init__()
        output_heads = default(output_heads, dict(human=6, mouse=3))
        self.target_length = target_length
        self.stem = nn.Conv1d(4, dim // 2, 15, padding=7)
        self.stem_res = Residual(ConvBlock(dim // 2))
        self.pools = nn.ModuleList([AttentionPool(dim // 2)])
        self.tower = nn.ModuleList()
        dims = [dim // 2] + [dim] * (num_downsamples - 1)
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            self.tower.append(nn.Sequential(ConvBlock(d_in, d_out, 5), Residual(ConvBlock(d_out))))
            self.pools.append(AttentionPool(d_out))
        self.blocks = nn.ModuleList([TransformerBlock(dim, heads) for _ in range(depth)])
        self.final = nn.Sequential(ConvBlock(dim, 2 * dim), GELU())
        self.heads = nn.ModuleDict({k: nn.Sequential(nn.Linear(2 * dim, v), nn.Softplus()) for k, v in output_heads.items()})

    def forward(self, x):
        keep = x.sum(dim=-1) > 0
        x = self.stem_res(self.stem(x.transpose(1, 2)))
        x, keep = self.pools[0](x, keep)
        for conv, pool in zip(self.tower, self.pools[1:]):
            x, keep = pool(conv(x), keep)
        x = x.transpose(1, 2)
        for block in self.blocks:
            x = block(x, keep)
        x = self.final(x.transpose(1, 2)).transpose(1, 2)
        start = (x.shape[1] - self.target_length) // 2
        x, keep = x[:, start:start + self.target_length], keep[:, start:start + self.target_length]
        return {name: head(x) for name, head in self.heads.items()}, keep


def contribution_scores(model, seq, head="human", track=0):
    model.eval()
    one_hot = F.one_hot(seq.clamp(min=0), num_classes=5)[..., :4].float()
    one_hot.requires_grad_(True)
    inputs = one_hot.masked_fill_((seq == PAD_INDEX)[..., None], 0.0)  # expect: MC505 leaf
    preds, _ = model(inputs)
    preds[head][..., track].sum().backward()
    return (one_hot.grad * one_hot).sum(dim=-1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--attribution", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Enformer()
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    seqs = ["".join("ACGTN"[i] for i in torch.randint(0, 4, (n,)).tolist()) for n in (64, 64, 40)]
    seq = str_to_seq_indices(seqs, 64)
    targets = {"human": torch.rand(3, 4, 6) * 3, "mouse": torch.rand(3, 4, 3) * 3}
    for step in range(3):
        preds, keep = model(seq_indices_to_one_hot(seq))
        loss = sum((F.poisson_nll_loss(preds[k], targets[k], log_input=False, reduction="none")
                    * keep[..., None]).sum() / keep.sum() for k in preds)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} poisson {loss.item():.4f}")
    if args.attribution:
        scores = contribution_scores(model, seq[2:], track=1)
        print("contribution scores", tuple(scores.shape), "sum", round(scores.sum().item(), 6))
