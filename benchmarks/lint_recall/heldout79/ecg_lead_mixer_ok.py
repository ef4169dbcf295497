"""Multi-label rhythm/morphology classifier for 12-lead and reduced-lead ECGs.

Each lead is cut into patches by a shared 1-D conv stem and encoded over time
on its own (recordings of different lengths are padded to the batch's
longest); lead summaries then attend to each other with an anatomical prior
between limb and precordial leads.  Batches are grouped by acquisition device,
so a whole batch shares one lead set (12-lead cart, 6-lead limb-only patch).
Targets are the five PTB-XL diagnostic superclasses.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LEADS = ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")
LIMB_LEADS = LEADS[:6]
SUPERCLASSES = ("NORM", "MI", "STTC", "CD", "HYP")
FS = 100
PATCH = 25


def lead_prior(scale: float = 1.0) -> torch.Tensor:
    group = torch.tensor([0] + [1] * 6 + [2] * 6)
    same = (group[:, None] == group[None, :]).float()
    same[0, :] = 0.0
    same[:, 0] = 0.0
    return same * scale


def lead_set_mask(names, device=None) -> torch.Tensor:
    return torch.tensor([lead in names for lead in LEADS], dtype=torch.bool, device=device)


class PatchStem(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(1, d_model // 2, kernel_size=7, padding=3), nn.GELU(),
            nn.Conv1d(d_model // 2, d_model, kernel_size=PATCH, stride=PATCH),
        )

    def forward(self, ecg):
        b, n_leads, t = ecg.shape
        z = self.conv(ecg.reshape(b * n_leads, 1, t))
        return z.transpose(1, 2).reshape(b, n_leads, z.size(-1), -1)


class TemporalBlock(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.dropout = dropout

    def forward(self, x, patch_keep):
        n, p, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, p, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=patch_keep[:, None, None, :],
                                             dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(out.transpose(1, 2).reshape(n, p, d))
        return x + self.mlp(self.norm2(x))


class LeadMixer(nn.Module):
    def __init__(self, d_model, n_heads, prior_scale=1.0):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.register_buffer("lead_bias", lead_prior(prior_scale))

    def forward(self, tokens, lead_present):
        b, n, d = tokens.shape
        keep = torch.cat([lead_present.new_ones(1), lead_present])
        bias = self.lead_bias.masked_fill(~keep[None, :], float("-inf"))
        q, k, v = self.qkv(self.norm(tokens)).view(b, n, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        return tokens + self.proj(out.transpose(1, 2).reshape(b, n, d))


class ECGClassifier(nn.Module):
    def __init__(self, d_model=64, n_heads=4, depth=2, mix_depth=2):
        super().__init__()
        self.stem = PatchStem(d_model)
        self.pos = nn.Parameter(torch.randn(1, 64, d_model) * 0.02)
        self.temporal = nn.ModuleList([TemporalBlock(d_model, n_heads) for _ in range(depth)])
        self.lead_emb = nn.Embedding(len(LEADS), d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.mixers = nn.ModuleList([LeadMixer(d_model, n_heads) for _ in range(mix_depth)])
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, len(SUPERCLASSES)))

    def forward(self, ecg, n_samples, lead_present):
        b, n_leads, _ = ecg.shape
        ecg = ecg * lead_present[None, :, None].to(ecg.dtype)
        z = self.stem(ecg)
        p = z.size(2)
        patch_keep = torch.arange(p, device=ecg.device)[None, :] < (n_samples // PATCH)[:, None]
        x = (z + self.pos[:, None, :p]).flatten(0, 1)
        keep_flat = patch_keep.repeat_interleave(n_leads, dim=0)
        for blk in self.temporal:
            x = blk(x, keep_flat)
        w = keep_flat.unsqueeze(-1).to(x.dtype)
        lead_tok = (x * w).sum(1) / w.sum(1).clamp(min=1.0)
        lead_tok = lead_tok.view(b, n_leads, -1) + self.lead_emb.weight[None]
        tokens = torch.cat([self.cls.expand(b, -1, -1), lead_tok], dim=1)
        for mixer in self.mixers:
            tokens = mixer(tokens, lead_present)
        return self.head(tokens[:, 0])


def random_batch(b, seconds, lead_names, generator):
    t = FS * max(seconds)
    ecg = torch.randn(b, len(LEADS), t, generator=generator) * 0.1
    beat = torch.sin(torch.linspace(0, 2 * math.pi * max(seconds), t)) ** 20
    ecg += beat[None, None, :]
    n_samples = torch.tensor([FS * s for s in seconds][:b])
    for i, n in enumerate(n_samples.tolist()):
        ecg[i, :, n:] = 0.0
    y = (torch.rand(b, len(SUPERCLASSES), generator=generator) < 0.3).float()
    return ecg, n_samples, lead_set_mask(lead_names), y


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = ECGClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [random_batch(3, [10, 8, 6], LEADS, g), random_batch(3, [10, 10, 7], LIMB_LEADS, g),
               random_batch(3, [9, 10, 10], LEADS, g)]
    for ecg, n_samples, present, y in batches:
        logits = model(ecg, n_samples, present)
        loss = F.binary_cross_entropy_with_logits(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("loss", round(loss.item(), 4))
    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(*batches[0][:3]))
    print(dict(zip(SUPERCLASSES, probs[0].round(decimals=3).tolist())))
