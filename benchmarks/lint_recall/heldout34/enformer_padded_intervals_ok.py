"""Enformer-style prediction of genomic tracks from DNA, over intervals of different lengths.

Written after lucidrains/enformer-pytorch (enformer_pytorch/modeling_enformer.py:
``exponential_linspace_int``, the exponential and central-mask positional features,
``get_positional_embed``, ``relative_shift``, ``Attention`` with ``rel_content_bias`` and
``rel_pos_bias``, ``AttentionPool``, ``ConvBlock``, ``Residual``, ``poisson_loss``,
``str_to_one_hot``, species heads). Intervals are padded to a common number of 128-bp
bins with all-zero one-hot columns and carry a per-bin mask from the data loader; the
positional basis is laid out for a fixed maximum of bins.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


def exponential_linspace_int(start, end, num, divisible_by=1):
    base = math.exp(math.log(end / start) / (num - 1))
    return [int(round(start * base**i / divisible_by) * divisible_by) for i in range(num)]


def get_positional_features_exponential(positions, features, seq_len, min_half_life=3.0):
    max_range = math.log(seq_len) / math.log(2.0)
    half_life = 2 ** torch.linspace(min_half_life, max_range, features, device=positions.device)
    return torch.exp(-math.log(2.0) / half_life[None, ...] * positions.abs()[..., None])


def get_positional_features_central_mask(positions, features, seq_len):
    center_widths = 2 ** torch.arange(1, features + 1, device=positions.device).float() - 1
    return (center_widths[None, ...] > positions.abs()[..., None]).float()


def get_positional_embed(seq_len, feature_size, device, max_len=None):
    distances = torch.arange(-seq_len + 1, seq_len, device=device)
    feature_functions = [get_positional_features_exponential, get_positional_features_central_mask]
    num_basis_per_class = feature_size // (len(feature_functions) * 2)
    embeddings = torch.cat([fn(distances, num_basis_per_class, max_len or seq_len) for fn in feature_functions], dim=-1)
    return torch.cat((embeddings, torch.sign(distances)[..., None] * embeddings), dim=-1)


def relative_shift(x):
    x = torch.cat((torch.zeros_like(x[..., :1]), x), dim=-1)
    _, h, t1, t2 = x.shape
    x = x.reshape(-1, h, t2, t1)[:, :, 1:, :].reshape(-1, h, t1, t2 - 1)
    return x[..., : ((t2 + 1) // 2)]


def str_to_one_hot(seq):
    lookup = {"A": 0, "C": 1, "G": 2, "T": 3}
    one_hot = torch.zeros(len(seq), 4)
    for i, base in enumerate(seq.upper()):
        if base in lookup:
            one_hot[i, lookup[base]] = 1.0
        else:
            one_hot[i] = 0.25
    return one_hot


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


def ConvBlock(dim, dim_out=None, kernel_size=1):
    return nn.Sequential(nn.BatchNorm1d(dim), nn.GELU(), nn.Conv1d(dim, dim_out or dim, kernel_size, padding=kernel_size // 2))


class AttentionPool(nn.Module):
    def __init__(self, dim, pool_size=2):
        super().__init__()
        self.pool_size = pool_size
        self.to_attn_logits = nn.Conv2d(dim, dim, 1, bias=False)
        nn.init.dirac_(self.to_attn_logits.weight)
        with torch.no_grad():
            self.to_attn_logits.weight.mul_(2)

    def forward(self, x):
        b, d, n = x.shape
        x = x.view(b, d, n // self.pool_size, self.pool_size)
        attn = self.to_attn_logits(x).softmax(dim=-1)
        return (x * attn).sum(dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, *, num_rel_pos_features, heads=4, dim_key=16, dim_value=16, max_bins=64):
        super().__init__()
        self.scale, self.heads, self.dim_key, self.max_bins = dim_key**-0.5, heads, dim_key, max_bins
        self.num_rel_pos_features = num_rel_pos_features
        self.to_q = nn.Linear(dim, dim_key * heads, bias=False)
        self.to_k = nn.Linear(dim, dim_key * heads, bias=False)
        self.to_v = nn.Linear(dim, dim_value * heads, bias=False)
        self.to_out = nn.Linear(dim_value * heads, dim)
        self.to_rel_k = nn.Linear(num_rel_pos_features, dim_key * heads, bias=False)
        self.rel_content_bias = nn.Parameter(torch.randn(1, heads, 1, dim_key))
        self.rel_pos_bias = nn.Parameter(torch.randn(1, heads, 1, dim_key))

    def forward(self, x, bin_mask=None):
        b, n, _ = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (self.to_q(x), self.to_k(x), self.to_v(x)))
        q = q * self.scale
        content_logits = torch.einsum("b h i d, b h j d -> b h i j", q + self.rel_content_bias, k)
        positions = get_positional_embed(n, self.num_rel_pos_features, x.device, max_len=self.max_bins)
        rel_k = self.to_rel_k(positions).view(-1, self.heads, self.dim_key).transpose(0, 1)
        rel_logits = relative_shift(torch.einsum("b h i d, h j d -> b h i j", q + self.rel_pos_bias, rel_k))
        logits = content_logits + rel_logits
        if bin_mask is not None:
            logits = logits.masked_fill(~bin_mask[:, None, None, :], -torch.finfo(logits.dtype).max)
        attn = logits.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class TransformerLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads=heads, num_rel_pos_features=dim // heads)
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * 2), nn.ReLU(), nn.Linear(dim * 2, dim))

    def forward(self, x, bin_mask=None):
        x = x + self.attn(self.attn_norm(x), bin_mask=bin_mask)
        return x + self.ff(x)


@dataclass
class EnformerConfig:
    dim: int = 48
    depth: int = 2
    heads: int = 4
    num_downsamples: int = 7
    dim_divisible_by: int = 8
    output_heads: tuple = (("human", 8), ("mouse", 4))


class Enformer(nn.Module):
    def __init__(self, config: EnformerConfig):
        super().__init__()
        half_dim = config.dim // 2
        self.stem = nn.Sequential(nn.Conv1d(4, half_dim, 15, padding=7), Residual(ConvBlock(half_dim)), AttentionPool(half_dim))
        filters = [half_dim, *exponential_linspace_int(half_dim, config.dim, config.num_downsamples - 1, config.dim_divisible_by)]
        self.conv_tower = nn.Sequential(*[
            nn.Sequential(ConvBlock(d_in, d_out, kernel_size=5), Residual(ConvBlock(d_out, d_out, 1)), AttentionPool(d_out))
            for d_in, d_out in zip(filters[:-1], filters[1:])
        ])
        self.transformer = nn.ModuleList(TransformerLayer(config.dim, config.heads) for _ in range(config.depth))
        self.final_pointwise = nn.Sequential(ConvBlock(filters[-1], config.dim * 2, 1), nn.GELU())
        self.heads = nn.ModuleDict({name: nn.Sequential(nn.Linear(config.dim * 2, n), nn.Softplus())
                                    for name, n in config.output_heads})

    def forward(self, x, bin_mask=None, head=None):
        x = self.conv_tower(self.stem(x.transpose(1, 2))).transpose(1, 2)
        for layer in self.transformer:
            x = layer(x, bin_mask=bin_mask)
        x = self.final_pointwise(x.transpose(1, 2)).transpose(1, 2)
        out = {name: fn(x) for name, fn in self.heads.items()}
        return out[head] if head is not None else out


def poisson_loss(pred, target):
    return pred - target * torch.log(pred.clamp(min=1e-8))


def collate_intervals(seqs, tracks, bin_size=128, num_bins=None):
    num_bins = num_bins or max(len(s) // bin_size for s in seqs)
    x = torch.zeros(len(seqs), num_bins * bin_size, 4)
    y = torch.zeros(len(seqs), num_bins, tracks[0].shape[-1])
    bin_mask = torch.zeros(len(seqs), num_bins, dtype=torch.bool)
    for i, (s, t) in enumerate(zip(seqs, tracks)):
        x[i, : len(s)] = str_to_one_hot(s)
        y[i, : t.shape[0]] = t
        bin_mask[i, : t.shape[0]] = True
    return {"x": x, "target": y, "bin_mask": bin_mask}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    seqs = ["".join("ACGT"[i] for i in torch.randint(0, 4, (128 * int(n),), generator=g)) for n in torch.randint(6, 17, (16,), generator=g)]
    tracks = [torch.stack([str_to_one_hot(s)[i * 128 : (i + 1) * 128, 1:3].sum() * torch.ones(8) / 16 for i in range(len(s) // 128)]) for s in seqs]
    model = Enformer(EnformerConfig())
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    for step in range(12):
        idx = [(step * 4 + j) % 16 for j in range(4)]
        batch = collate_intervals([seqs[i] for i in idx], [tracks[i] for i in idx])
        pred = model(batch["x"], bin_mask=batch["bin_mask"], head="human")
        loss = (poisson_loss(pred, batch["target"]).mean(-1) * batch["bin_mask"]).sum() / batch["bin_mask"].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 4 == 0:
            print(f"step {step} poisson loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        short = min(range(16), key=lambda i: len(seqs[i]))
        n = tracks[short].shape[0]
        preds = []
        for num_bins in (n + 8, n + 40):
            batch = collate_intervals([seqs[short]], [tracks[short]], num_bins=num_bins)
            preds.append(model(batch["x"], bin_mask=batch["bin_mask"], head="human")[0, :n])
        print("8 vs 40 padded bins:", (preds[0] - preds[1]).abs().max().item())
