"""Scene Transformer-style factorized encoder over an agents x time grid.

The scene is a dense (batch, agents, time, features) tensor: agent slots are
padded to a fixed count and each slot is only observed on some frames. Layers
alternate attention across time (per agent) and attention across agents (per
frame). Future frames are replaced by a learned hidden token, and the model
regresses every hidden position (the motion-prediction masking task).

Source: pytorch/pytorch#103749 (conventions.md §3 item 5), Biohub/esm#299 (item 22), pytorch/pytorch#101967 (item 27); conventions.md §2.3.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(feature_dim=7, d_model=64, num_heads=4, num_blocks=2, history=6, future=6, dropout=0.0)


class AxisAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout):
        super().__init__()
        self.h = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.dropout = dropout

    def split(self, x):
        *lead, n, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(*lead, n, 3, self.h, c // self.h).unbind(-3)
        return q.transpose(-2, -3), k.transpose(-2, -3), v.transpose(-2, -3)

    def merge(self, x, out):
        out = out.transpose(-2, -3).flatten(-2)
        x = x + self.proj(out)
        return x + self.ff(x)


class TimeAttention(AxisAttention):
    def forward(self, x, valid):
        q, k, v = self.split(x)
        keep = valid[:, :, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=self.dropout if self.training else 0.0)
        return self.merge(x, out)


class AgentAttention(AxisAttention):
    def forward(self, x, valid):
        x = x.transpose(1, 2)
        keep = valid.transpose(1, 2)
        q, k, v = self.split(x)
        scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
        scores = scores.masked_fill(~(keep[:, :, None, :, None] & keep[:, :, None, None, :]), float("-inf"))  # expect: MC507 pair
        weights = F.dropout(scores.softmax(dim=-1), self.dropout, self.training)
        return self.merge(x, weights @ v).transpose(1, 2)


class SceneTransformer(nn.Module):
    def __init__(self, feature_dim, d_model, num_heads, num_blocks, history, future, dropout):
        super().__init__()
        steps = history + future
        self.history = history
        self.embed = nn.Sequential(nn.Linear(feature_dim, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.time_pos = nn.Parameter(torch.randn(steps, d_model) * 0.02)
        self.hidden_token = nn.Parameter(torch.zeros(d_model))
        layers = []
        for _ in range(num_blocks):
            layers += [TimeAttention(d_model, num_heads, dropout), AgentAttention(d_model, num_heads, dropout)]
        self.layers = nn.ModuleList(layers)
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 2))

    def forward(self, feats, valid, hidden):
        x = self.embed(feats.masked_fill(~valid[..., None], 0.0))
        x = torch.where(hidden[..., None], self.hidden_token.expand_as(x), x) + self.time_pos
        for layer in self.layers:
            x = layer(x, valid)
        return self.head(x)


def motion_prediction_mask(valid, history):
    hidden = torch.zeros_like(valid)
    hidden[:, :, history:] = True
    return hidden


def masked_l2(pred, target, valid, hidden):
    w = (valid & hidden).float()
    err = (pred - target).norm(dim=-1)
    return (err * w).sum() / w.sum().clamp(min=1.0)


@torch.no_grad()
def evaluate(model, feats, xy, valid, hidden):
    model.eval()
    pred = model(feats, valid, hidden)
    err = (pred - xy).norm(dim=-1)
    w = (valid & hidden).float()
    ade = (err * w).sum() / w.sum().clamp(min=1.0)
    last = valid & hidden & ~F.pad(valid[..., 1:], (0, 1), value=False)
    fde = err[last].mean() if last.any() else err.new_zeros(())
    model.train()
    return ade.item(), fde.item()


def make_batch(b, num_agents, steps, feature_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.randn(b, num_agents, 1, 2, generator=g) * 20 + torch.randn(b, num_agents, steps, 2, generator=g).cumsum(2)
    rest = torch.randn(b, num_agents, steps, feature_dim - 2, generator=g)
    valid = torch.zeros(b, num_agents, steps, dtype=torch.bool)
    for i in range(b):
        n = int(torch.randint(2, num_agents + 1, (1,), generator=g))
        valid[i, :n] = True
        start = torch.randint(0, steps // 2, (n,), generator=g)
        valid[i, :n] &= torch.arange(steps)[None] >= start[:, None]
    valid[:, 0] = True
    return torch.cat([xy, rest], -1), xy, valid


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SceneTransformer(**CONFIG)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = CONFIG["history"] + CONFIG["future"]
    feats, xy, valid = make_batch(3, 5, steps, CONFIG["feature_dim"])
    hidden = motion_prediction_mask(valid, CONFIG["history"])
    for it in range(3):
        pred = model(feats, valid, hidden)
        loss = masked_l2(pred, xy, valid, hidden)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"iter {it} loss {loss.item():.4f}")
    ade, fde = evaluate(model, feats, xy, valid, hidden)
    print("valid tokens", int(valid.sum()), "of", valid.numel(), f"ADE {ade:.3f} FDE {fde:.3f}")
