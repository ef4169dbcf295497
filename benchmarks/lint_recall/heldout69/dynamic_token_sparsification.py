"""DynamicViT-style token sparsification for a plain ViT detection backbone.

A light prediction module scores the patch tokens after some blocks; dropped
tokens are masked out of attention with the keep policy (Gumbel-softmax with a
straight-through hard decision), and the ratio loss keeps the number of kept
tokens close to the target schedule.

Source: seed masked_fill_inplace.txt (注意 / 梯度计算风险; 总结 point 3).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

KEEP_RATE = 0.7
PRUNE_LOC = (1, 2)


def softmax_with_policy(attn, policy, eps=1e-6):
    b, n, _ = policy.shape
    attn_policy = policy.reshape(b, 1, 1, n)
    eye = torch.eye(n, dtype=attn_policy.dtype, device=attn_policy.device).view(1, 1, n, n)
    attn_policy = attn_policy + (1.0 - attn_policy) * eye
    max_att = attn.max(dim=-1, keepdim=True)[0]
    attn = (attn - max_att).exp()
    attn.masked_fill_(attn_policy == 0, 0.0)  # expect: MC505 policy
    return (attn + eps / n) / (attn.sum(dim=-1, keepdim=True) + eps)


class Attention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, policy=None):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if policy is None:
            attn = attn.softmax(dim=-1)
        else:
            attn = softmax_with_policy(attn, policy)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x, policy=None):
        x = x + self.attn(self.norm1(x), policy=policy)
        return x + self.mlp(self.norm2(x))


class PredictorLG(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.in_conv = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU())
        self.out_conv = nn.Sequential(
            nn.Linear(dim, dim // 2), nn.GELU(), nn.Linear(dim // 2, 2), nn.LogSoftmax(dim=-1),
        )

    def forward(self, x, policy):
        x = self.in_conv(x)
        b, n, c = x.shape
        local_x = x[:, :, : c // 2]
        global_x = (x[:, :, c // 2:] * policy).sum(dim=1, keepdim=True) / policy.sum(dim=1, keepdim=True)
        x = torch.cat([local_x, global_x.expand(b, n, c // 2)], dim=-1)
        return self.out_conv(x)


class DynamicViT(nn.Module):
    def __init__(self, img_size=64, patch=8, dim=64, depth=4, heads=4, num_classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        num_patches = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.score_predictor = nn.ModuleList([PredictorLG(dim) for _ in PRUNE_LOC])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        b, n, _ = x.shape
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1) + self.pos_embed
        prev_decision = torch.ones(b, n, 1, dtype=x.dtype, device=x.device)
        policy, decisions, p_count = None, [], 0
        for i, blk in enumerate(self.blocks):
            if i in PRUNE_LOC:
                spatial_x = x[:, 1:]
                pred_score = self.score_predictor[p_count](spatial_x, prev_decision).reshape(b, -1, 2)
                if self.training:
                    hard_keep = F.gumbel_softmax(pred_score, hard=True)[:, :, 0:1] * prev_decision
                else:
                    hard_keep = (pred_score[:, :, 0:1] > pred_score[:, :, 1:2]).to(x.dtype) * prev_decision
                decisions.append(hard_keep.reshape(b, -1))
                cls_policy = torch.ones(b, 1, 1, dtype=hard_keep.dtype, device=hard_keep.device)
                policy = torch.cat([cls_policy, hard_keep], dim=1)
                prev_decision = hard_keep
                p_count += 1
            x = blk(x, policy=policy)
        x = self.norm(x)
        return self.head(x[:, 0]), decisions


def ratio_loss(decisions, base_rate=KEEP_RATE):
    loss = 0.0
    for i, score in enumerate(decisions):
        target = base_rate ** (i + 1)
        loss = loss + ((score.mean(dim=1) - target) ** 2).mean()
    return loss / max(len(decisions), 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DynamicViT()
    images = torch.randn(2, 3, 64, 64)
    labels = torch.tensor([3, 7])
    if "--train" in sys.argv:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        for step in range(2):
            logits, decisions = model(images)
            loss = F.cross_entropy(logits, labels) + 2.0 * ratio_loss(decisions)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("train loss", round(loss.item(), 4))
    model.eval()
    with torch.no_grad():
        logits, decisions = model(images)
    print("logits", tuple(logits.shape), "kept", [int(d.sum()) for d in decisions])
