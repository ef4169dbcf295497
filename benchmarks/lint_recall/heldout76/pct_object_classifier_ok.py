"""PCT-style classifier for LiDAR object clusters.

Clusters cut out of the sweep by the tracker (car, pedestrian, cyclist,
other) carry different numbers of points; ``collate_clusters`` pads them per
batch and returns the lengths. The network follows PCT: a point embedding,
four offset-attention layers whose outputs are concatenated, then max and
mean pooling over the real points. The attention runs on SDPA.

Source: conventions.md §1 (direction cheat-sheet), §5 item 1; rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); seed self_attention_mask_guide.txt §2 and §7 Q1.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ("car", "pedestrian", "cyclist", "other")


def collate_clusters(clusters, max_points=None):
    lengths = torch.tensor([c.size(0) for c in clusters])
    n = int(lengths.max()) if max_points is None else max_points
    points = torch.zeros(len(clusters), n, clusters[0].size(1))
    for i, c in enumerate(clusters):
        points[i, : min(c.size(0), n)] = c[:n]
    return points, lengths.clamp(max=n)


def normalize_clusters(points, pad):
    keep = (~pad).unsqueeze(-1).float()
    center = (points[..., :3] * keep).sum(1, keepdim=True) / keep.sum(1, keepdim=True).clamp(min=1)
    xyz = (points[..., :3] - center) * keep
    scale = xyz.norm(dim=-1).amax(dim=1).clamp(min=1e-3)
    return torch.cat([xyz / scale[:, None, None], points[..., 3:] * keep], dim=-1)


class SA_Layer(nn.Module):
    def __init__(self, channels, heads=1):
        super().__init__()
        self.heads = heads
        self.q_conv = nn.Linear(channels, channels // 4, bias=False)
        self.k_conv = nn.Linear(channels, channels // 4, bias=False)
        self.v_conv = nn.Linear(channels, channels)
        self.trans_conv = nn.Linear(channels, channels)
        self.after_norm = nn.LayerNorm(channels)
        self.act = nn.ReLU()

    def forward(self, x, attn_mask=None):
        b, n, c = x.shape
        q = self.q_conv(x).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k_conv(x).view(b, n, self.heads, -1).transpose(1, 2)
        v = self.v_conv(x).view(b, n, self.heads, -1).transpose(1, 2)
        x_r = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x_r = x_r.transpose(1, 2).reshape(b, n, c)
        x_r = self.act(self.after_norm(self.trans_conv(x - x_r)))
        return x + x_r


class Point_Transformer_Last(nn.Module):
    def __init__(self, channels=64):
        super().__init__()
        self.conv1 = nn.Linear(channels, channels, bias=False)
        self.conv2 = nn.Linear(channels, channels, bias=False)
        self.norm1 = nn.LayerNorm(channels)
        self.norm2 = nn.LayerNorm(channels)
        self.sa = nn.ModuleList([SA_Layer(channels) for _ in range(4)])

    def forward(self, x, attn_mask=None):
        x = F.relu(self.norm1(self.conv1(x)))
        x = F.relu(self.norm2(self.conv2(x)))
        outs = []
        for layer in self.sa:
            x = layer(x, attn_mask)
            outs.append(x)
        return torch.cat(outs, dim=-1)


class PCTClassifier(nn.Module):
    def __init__(self, in_dim=4, channels=64, num_classes=len(CLASSES), dropout=0.5):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, channels), nn.LayerNorm(channels), nn.ReLU(),
                                   nn.Linear(channels, channels), nn.LayerNorm(channels), nn.ReLU())
        self.pt_last = Point_Transformer_Last(channels)
        self.fuse = nn.Sequential(nn.Linear(4 * channels, 256), nn.LayerNorm(256), nn.LeakyReLU(0.2))
        self.head = nn.Sequential(nn.Linear(512, 128), nn.ReLU(), nn.Dropout(dropout), nn.Linear(128, num_classes))

    def forward(self, points, lengths):
        n = points.size(1)
        pad = torch.arange(n, device=points.device)[None, :] >= lengths[:, None]
        x = self.embed(normalize_clusters(points, pad))
        x = self.pt_last(x, ~pad[:, None, None, :])
        x = self.fuse(x)
        x_max = x.masked_fill(pad[..., None], float("-inf")).amax(dim=1)
        keep = (~pad)[..., None].to(x.dtype)
        x_mean = (x * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.head(torch.cat([x_max, x_mean], dim=-1))


def synthetic_cluster(label, num_points, g):
    extent = {0: (4.2, 1.8, 1.5), 1: (0.6, 0.6, 1.8), 2: (1.8, 0.6, 1.7), 3: (1.0, 1.0, 1.0)}[label]
    xyz = (torch.rand(num_points, 3, generator=g) - 0.5) * torch.tensor(extent)
    xyz = xyz + torch.randn(1, 3, generator=g) * 5
    intensity = torch.rand(num_points, 1, generator=g)
    return torch.cat([xyz, intensity], dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    sizes = [48, 12, 20, 30, 64, 7]
    clusters = [synthetic_cluster(int(l), s, g) for l, s in zip(labels, sizes)]
    points, lengths = collate_clusters(clusters, max_points=64)
    model = PCTClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for epoch in range(3):
        logits = model(points, lengths)
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (logits.argmax(-1) == labels).float().mean()
        print(f"epoch {epoch} loss {loss.item():.4f} acc {acc.item():.2f}")
    model.eval()
    with torch.no_grad():
        print("pred", [CLASSES[i] for i in model(points, lengths).argmax(-1).tolist()])
