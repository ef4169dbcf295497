"""Masked pose autoencoding of resident-intruder mouse clips, then a linear behaviour probe.

Layout after amathislab/BehaveMAE (Stoffl et al., "Elucidating the hierarchical nature of
behavior with masked autoencoders", ECCV 2024) in its plain MAE form from facebookresearch/mae's
`models_mae.py`: `patchify` / `unpatchify` over frames, `random_masking` returning `x_masked`,
`mask` and `ids_restore`, `forward_encoder` / `forward_decoder` / `forward_loss`, timm-style
`Block` / `Attention`, a decoder restricted to nearby frames, tracking dropouts left out of the
loss, and a linear probe on frozen features for attack / chase / investigation / other.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BEHAVIOURS = ["attack", "chase", "investigation", "other"]
N_FRAMES, N_MICE, N_KP, PATCH = 32, 2, 7, 2
TEMPLATE = np.array([[0.06, 0], [0.04, 0.015], [0.04, -0.015], [0.02, 0], [-0.02, 0.015], [-0.02, -0.015], [-0.05, 0]])


def temporal_window_bias(num_tokens, window):
    idx = torch.arange(num_tokens + 1)
    far = (idx[:, None] - idx[None, :]).abs() > window
    far[0, :] = False
    far[:, 0] = False
    return torch.zeros(num_tokens + 1, num_tokens + 1).masked_fill(far, float("-inf"))


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if attn_bias is not None:
            attn = attn + attn_bias
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x, attn_bias=None):
        x = x + self.attn(self.norm1(x), attn_bias=attn_bias)
        return x + self.mlp(self.norm2(x))


def get_1d_sincos_pos_embed(embed_dim, length):
    omega = 1.0 / 10000 ** (np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0))
    out = np.arange(length)[:, None] * omega[None]
    emb = np.concatenate([np.zeros((1, embed_dim)), np.concatenate([np.sin(out), np.cos(out)], 1)], 0)
    return torch.from_numpy(emb).float().unsqueeze(0)


class BehaveMAE(nn.Module):
    def __init__(self, embed_dim=64, depth=2, num_heads=4, decoder_embed_dim=48, decoder_depth=2, window=2):
        super().__init__()
        self.num_tokens = N_FRAMES // PATCH
        self.patch_dim = PATCH * N_MICE * N_KP * 2
        self.patch_embed = nn.Linear(self.patch_dim, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.register_buffer("pos_embed", get_1d_sincos_pos_embed(embed_dim, self.num_tokens))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.register_buffer("decoder_pos_embed", get_1d_sincos_pos_embed(decoder_embed_dim, self.num_tokens))
        self.register_buffer("decoder_attn_bias", temporal_window_bias(self.num_tokens, window))
        self.decoder_blocks = nn.ModuleList([Block(decoder_embed_dim, num_heads) for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim)
        self.decoder_pred = nn.Linear(decoder_embed_dim, self.patch_dim)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)

    def patchify(self, poses):
        return poses.reshape(poses.size(0), self.num_tokens, self.patch_dim)

    def random_masking(self, x, mask_ratio):
        N, L, D = x.shape
        len_keep = int(L * (1 - mask_ratio))
        ids_shuffle = torch.argsort(torch.rand(N, L), dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, D))
        mask = torch.ones(N, L)
        mask[:, :len_keep] = 0
        return x_masked, torch.gather(mask, 1, ids_restore), ids_restore

    def forward_encoder(self, x, mask_ratio):
        x = self.patch_embed(x) + self.pos_embed[:, 1:]
        x, mask, ids_restore = self.random_masking(x, mask_ratio)
        cls_tokens = (self.cls_token + self.pos_embed[:, :1]).expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x), mask, ids_restore

    def forward_decoder(self, x, ids_restore):
        x = self.decoder_embed(x)
        mask_tokens = self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1) + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x, attn_bias=self.decoder_attn_bias)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:, :]

    def forward_loss(self, target, pred, mask, kp_valid):
        loss = ((pred - target) ** 2 * kp_valid).sum(-1) / kp_valid.sum(-1).clamp(min=1)
        return (loss * mask).sum() / mask.sum()

    def forward(self, poses, kp_valid, mask_ratio=0.75):
        target = self.patchify(poses)
        valid = self.patchify(kp_valid.float())
        latent, mask, ids_restore = self.forward_encoder(target, mask_ratio)
        pred = self.forward_decoder(latent, ids_restore)
        return self.forward_loss(target, pred, mask, valid), pred, mask


def simulate_clip(rng, behaviour):
    res = np.cumsum(rng.normal(0, 0.01, (N_FRAMES, 2)), 0) + rng.uniform(0.3, 0.7, 2)
    speed = {0: 0.03, 1: 0.025, 2: 0.005, 3: 0.01}[behaviour]
    heading = np.cumsum(rng.normal(0, 0.3 if behaviour == 0 else 0.1, N_FRAMES)) + rng.uniform(0, 2 * np.pi)
    res = res + np.cumsum(speed * np.stack([np.cos(heading), np.sin(heading)], 1), 0)
    lag = {0: 1, 1: 4, 2: 1, 3: 0}[behaviour]
    offset = {0: 0.03, 1: 0.12, 2: 0.09, 3: 0.35}[behaviour]
    intr = np.roll(res, -lag, axis=0) + offset * np.stack([np.cos(heading + 0.5), np.sin(heading + 0.5)], 1)
    if behaviour == 3:
        intr = intr + np.cumsum(rng.normal(0, 0.02, (N_FRAMES, 2)), 0)
    poses = []
    for c in (res, intr):
        vel = np.gradient(c, axis=0)
        ang = np.arctan2(vel[:, 1], vel[:, 0] + 1e-6)
        rot = np.stack([np.stack([np.cos(ang), -np.sin(ang)], -1), np.stack([np.sin(ang), np.cos(ang)], -1)], -2)
        poses.append(c[:, None, :] + np.einsum("tij,kj->tki", rot, TEMPLATE))
    poses = np.stack(poses, 1) + rng.normal(0, 0.003, (N_FRAMES, N_MICE, N_KP, 2))
    poses[rng.random(N_FRAMES) < 0.08, 1] = np.nan
    return poses.astype(np.float32)


def make_dataset(rng, n):
    labels = rng.integers(0, len(BEHAVIOURS), n)
    poses = torch.from_numpy(np.stack([simulate_clip(rng, int(b)) for b in labels]))
    kp_valid = ~torch.isnan(poses)
    poses = (poses - 0.5).nan_to_num(0.0) * 4.0
    return poses, kp_valid, torch.from_numpy(labels)


def embed(model, poses):
    model.eval()
    with torch.no_grad():
        latent, _, _ = model.forward_encoder(model.patchify(poses), mask_ratio=0.0)
    return torch.cat([latent[:, 0], latent[:, 1:].mean(1)], -1)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    poses, kp_valid, labels = make_dataset(rng, 1600)
    model = BehaveMAE()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for step in range(400):
        model.train()
        idx = torch.randint(0, 1200, (64,))
        loss, pred, mask = model(poses[idx], kp_valid[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: masked reconstruction loss {loss.item():.4f}")
    feats = embed(model, poses)
    mu, sd = feats[:1200].mean(0), feats[:1200].std(0) + 1e-6
    feats = (feats - mu) / sd
    probe = nn.Linear(feats.size(1), len(BEHAVIOURS))
    popt = torch.optim.Adam(probe.parameters(), lr=1e-2)
    for _ in range(300):
        ploss = F.cross_entropy(probe(feats[:1200]), labels[:1200])
        popt.zero_grad()
        ploss.backward()
        popt.step()
    acc = (probe(feats[1200:]).argmax(-1) == labels[1200:]).float().mean().item()
    print(f"linear probe accuracy on 400 held-out clips: {acc:.3f}")
