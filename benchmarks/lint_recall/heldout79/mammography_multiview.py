"""Four-view screening mammography classifier with cross-view attention.

A screening exam has up to four standard views (L-CC, L-MLO, R-CC, R-MLO);
some exams miss a view (implants, repeats, prior mastectomy).  A shared CNN
stem turns each view into a grid of tokens; a transformer attends across the
tokens of all present views, and each breast gets a malignancy logit from
the views of its side.  Inference can run under bfloat16 autocast on CPU
for screening throughput.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105 (conventions.md §3 item 18), huggingface/lerobot PR #710 (§3 item 19); conventions.md §2.3.
"""
import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VIEWS = ("L-CC", "L-MLO", "R-CC", "R-MLO")
SIDE_OF_VIEW = torch.tensor([0, 0, 1, 1])
NEG_INF = torch.finfo(torch.float32).min


class ViewStem(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, d // 2, 5, stride=2, padding=2), nn.BatchNorm2d(d // 2), nn.ReLU(),
            nn.Conv2d(d // 2, d, 3, stride=2, padding=1), nn.BatchNorm2d(d), nn.ReLU(),
            nn.AdaptiveAvgPool2d((4, 2)),
        )

    def forward(self, x):
        return self.net(x).flatten(2).transpose(1, 2)


class CrossViewAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(d // heads)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, token_keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        scores = scores.masked_fill(~token_keep[:, None, None, :], NEG_INF)  # expect: MC517 autocast
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CrossViewAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x, token_keep):
        x = x + self.attn(self.ln1(x), token_keep)
        return x + self.mlp(self.ln2(x))


class MultiViewMammo(nn.Module):
    def __init__(self, d=64, heads=4, depth=2):
        super().__init__()
        self.stem = ViewStem(d)
        self.view_emb = nn.Embedding(len(VIEWS), d)
        self.pos = nn.Parameter(torch.zeros(1, 1, 8, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.breast_head = nn.Linear(d, 1)
        self.view_score = nn.Linear(d, 1)

    def forward(self, images, view_present):
        b, v = view_present.shape
        tok = self.stem(images.flatten(0, 1)).view(b, v, -1, self.pos.size(-1))
        tok = tok + self.pos + self.view_emb.weight[None, :, None, :]
        per_view = tok.size(2)
        x = tok.flatten(1, 2)
        token_keep = view_present.repeat_interleave(per_view, dim=1)
        for blk in self.blocks:
            x = blk(x, token_keep)
        view_vec = self.norm(x).view(b, v, per_view, -1).mean(2).float()
        side = F.one_hot(SIDE_OF_VIEW.to(images.device), 2).T.bool()
        use = side[None] & view_present[:, None, :]
        s = self.view_score(view_vec).squeeze(-1).float()
        s = s[:, None, :].expand(-1, 2, -1).masked_fill(~use, NEG_INF)
        w = torch.softmax(s, dim=-1)
        breast_vec = w @ view_vec
        return self.breast_head(breast_vec).squeeze(-1)


def exam_batch(n, generator, missing=((1, 3), (2, 0))):
    images = torch.randn(n, len(VIEWS), 1, 64, 32, generator=generator)
    view_present = torch.ones(n, len(VIEWS), dtype=torch.bool)
    for exam, view in missing:
        view_present[exam, view] = False
        images[exam, view] = 0.0
    labels = (torch.rand(n, 2, generator=generator) < 0.3).float()
    return images, view_present, labels


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = MultiViewMammo()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images, view_present, labels = exam_batch(4, g)
    pos_weight = torch.tensor([4.0])
    for step in range(4):
        logits = model(images, view_present)
        loss = F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4))
    model.eval()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        probs = torch.sigmoid(model(images, view_present).float())
    print("exam 0 (L, R):", [round(p, 3) for p in probs[0].tolist()])
