"""Point-cloud classifier with local self-attention inside a ball of fixed radius.

Clouds hold different numbers of points and are zero-padded to the largest one, with a
`valid` flag per point. Each point attends to the real points within `radius` of it and to
itself; the class token is the masked mean of the real points.

Source: huggingface/transformers#32195, conventions.md §2.9 and §5 item 7
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LocalAttention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.pos_mlp = nn.Sequential(nn.Linear(3, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.out = nn.Linear(dim, dim)

    def forward(self, feats, pos, neighbours):
        b, n, d = feats.shape
        x = feats + self.pos_mlp(pos)
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * self.scale
        scores = scores + neighbours[:, None]  # expect: MC509 pointcloud
        attn = scores.softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class PointClassifier(nn.Module):
    def __init__(self, num_classes, dim=32, depth=2, radius=0.6):
        super().__init__()
        self.radius = radius
        self.embed = nn.Linear(3, dim)
        self.layers = nn.ModuleList(LocalAttention(dim) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, num_classes)

    def forward(self, pos, valid):
        neighbours = self.ball_query(pos, valid)
        h = self.embed(pos)
        for attn, norm in zip(self.layers, self.norms):
            h = h + attn(norm(h), pos, neighbours)
        pooled = (h * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
        return self.head(pooled)

    def ball_query(self, pos, valid):
        dist = torch.cdist(pos, pos)
        inside = (dist <= self.radius) & valid[:, None, :]
        return inside | torch.eye(pos.size(1), dtype=torch.bool, device=pos.device)


def make_batch(counts, generator):
    pos = torch.zeros(len(counts), max(counts), 3)
    valid = torch.zeros(len(counts), max(counts), dtype=torch.bool)
    labels = torch.randint(0, 2, (len(counts),), generator=generator)
    for i, n in enumerate(counts):
        p = torch.randn(n, 3, generator=generator)
        if labels[i] == 1:
            p = p / p.norm(dim=1, keepdim=True)
        pos[i, :n], valid[i, :n] = p, True
    return pos, valid, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = PointClassifier(num_classes=2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(10):
        pos, valid, labels = make_batch([64, 40, 52, 30], g)
        loss = F.cross_entropy(model(pos, valid), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.3f}")
