"""Q-Transformer for offline robotic grasping (per-dimension autoregressive Q-learning).

Each action dimension (gripper x, y, z, yaw, close) is discretised into bins
and gets its own Q-value head, conditioned on the camera history and on the
bins already chosen for the earlier dimensions.  The camera history holds the
last ``n_frames`` frames and is padded at the start of an episode.  Training
uses per-dimension Bellman backups, Monte-Carlo lower bounds and a conservative
regulariser on the bins the dataset did not take.

Source: TransformerLensOrg/TransformerLens PR #366 (fixes #318; conventions.md section 3
item 20); conventions.md sections 2.3 and 5 item 5.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class QTConfig:
    n_frames: int = 3
    tokens_per_frame: int = 4
    action_dims: int = 5
    action_bins: int = 16
    dim: int = 48
    heads: int = 4
    depth: int = 2
    discount: float = 0.98
    conservative_weight: float = 0.5


class FrameTokenizer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, cfg.dim, 3, stride=2, padding=1))
        self.token_learner = nn.Conv2d(cfg.dim, cfg.tokens_per_frame, 1)

    def forward(self, frames):
        B, F_, C, H, W = frames.shape
        feats = self.conv(frames.flatten(0, 1))
        attn = self.token_learner(feats).flatten(2).softmax(-1)
        tokens = torch.einsum("bkn,bdn->bkd", attn, feats.flatten(2))
        return tokens.view(B, F_ * tokens.size(1), -1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, allowed):
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("b h i d, b h j d -> b h i j", q, k) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~allowed, -1e-9)  # expect: MC516 weak
        out = torch.einsum("b h i j, b h j d -> b h i d", scores.softmax(dim=-1), v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class QTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tokenizer = FrameTokenizer(cfg)
        self.frame_pos = nn.Parameter(torch.randn(cfg.n_frames * cfg.tokens_per_frame, cfg.dim) * 0.02)
        self.action_bin_emb = nn.Embedding(cfg.action_dims * cfg.action_bins + 1, cfg.dim)
        self.layers = nn.ModuleList([nn.ModuleList([nn.LayerNorm(cfg.dim), Attention(cfg.dim, cfg.heads),
                                                    nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, cfg.dim)])
                                     for _ in range(cfg.depth)])
        self.q_head = nn.Linear(cfg.dim, cfg.action_bins)
        n_obs = cfg.n_frames * cfg.tokens_per_frame
        n = n_obs + cfg.action_dims
        layout = torch.ones(n, n, dtype=torch.bool)
        layout[:n_obs, n_obs:] = False
        layout[n_obs:, n_obs:] = torch.ones(cfg.action_dims, cfg.action_dims, dtype=torch.bool).tril()
        self.register_buffer("layout", layout, persistent=False)

    def forward(self, frames, frame_keep, prev_bins):
        cfg = self.cfg
        obs = self.tokenizer(frames) + self.frame_pos
        offsets = torch.arange(cfg.action_dims - 1) * cfg.action_bins
        start = torch.full_like(prev_bins[:, :1], cfg.action_dims * cfg.action_bins)
        act = self.action_bin_emb(torch.cat([start, prev_bins[:, :-1] + offsets], dim=1))
        x = torch.cat([obs, act], dim=1)
        token_keep = torch.cat([frame_keep.repeat_interleave(cfg.tokens_per_frame, dim=1),
                                torch.ones_like(prev_bins, dtype=torch.bool)], dim=1)
        allowed = self.layout[None, None] & token_keep[:, None, None, :]
        for ln1, attn, ln2, ff in self.layers:
            x = x + attn(ln1(x), allowed)
            x = x + F.gelu(ff(ln2(x)))
        return torch.sigmoid(self.q_head(x[:, -cfg.action_dims:]))

    @torch.no_grad()
    def greedy_action(self, frames, frame_keep):
        bins = torch.zeros(frames.size(0), self.cfg.action_dims, dtype=torch.long)
        for d in range(self.cfg.action_dims):
            bins[:, d] = self(frames, frame_keep, bins)[:, d].argmax(-1)
        return bins


def q_learning_loss(model, target_model, batch, cfg):
    q_all = model(batch["frames"], batch["frame_keep"], batch["bins"])
    q_taken = q_all.gather(-1, batch["bins"].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        q_next_dim = target_model(batch["frames"], batch["frame_keep"], batch["bins"]).max(-1).values[:, 1:]
        next_bins = target_model.greedy_action(batch["next_frames"], batch["next_frame_keep"])
        q_next_state = target_model(batch["next_frames"], batch["next_frame_keep"], next_bins)[:, 0].max(-1).values
        last = batch["reward"] + cfg.discount * (1.0 - batch["done"]) * q_next_state
        targets = torch.cat([q_next_dim, last.unsqueeze(-1)], dim=1)
        targets = torch.maximum(targets, batch["mc_return"].unsqueeze(-1))
    td = F.mse_loss(q_taken, targets)
    unseen = torch.ones_like(q_all, dtype=torch.bool).scatter(-1, batch["bins"].unsqueeze(-1), False)
    conservative = (q_all.pow(2) * unseen).sum() / unseen.sum()
    return td + cfg.conservative_weight * conservative


def random_batch(cfg, B=4):
    frame_keep = torch.arange(cfg.n_frames)[None] >= torch.randint(0, cfg.n_frames, (B, 1))
    next_frame_keep = torch.cat([frame_keep[:, 1:], torch.ones(B, 1, dtype=torch.bool)], dim=1)
    return {"frames": torch.randn(B, cfg.n_frames, 3, 16, 16), "frame_keep": frame_keep,
            "next_frames": torch.randn(B, cfg.n_frames, 3, 16, 16), "next_frame_keep": next_frame_keep,
            "bins": torch.randint(cfg.action_bins, (B, cfg.action_dims)), "reward": (torch.rand(B) < 0.3).float(),
            "done": (torch.rand(B) < 0.2).float(), "mc_return": torch.rand(B) * 0.5}


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = QTConfig()
    model, target_model = QTransformer(cfg), QTransformer(cfg)
    target_model.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss = q_learning_loss(model, target_model, random_batch(cfg), cfg)
    loss.backward()
    optimizer.step()
    print("loss", round(loss.item(), 5), "greedy", model.greedy_action(torch.randn(2, cfg.n_frames, 3, 16, 16),
                                                                   torch.ones(2, cfg.n_frames, dtype=torch.bool)).tolist())
