"""Online surgical phase recognition for laparoscopic cholecystectomy (Cholec80).

Frame features come from a frozen ResNet (precomputed, 1 fps).  A causal
temporal transformer reads the whole video so far (long-range branch) next to a
short causal window (local branch); the two are fused per frame.  Videos in a
batch have different lengths and are right-padded.  Training adds the
truncated-MSE smoothing loss of MS-TCN over consecutive valid frames.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PHASES = ("Preparation", "CalotTriangleDissection", "ClippingCutting", "GallbladderDissection",
          "GallbladderPackaging", "CleaningCoagulation", "GallbladderRetraction")


@dataclass
class PhaseConfig:
    feat_dim: int = 512
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    local_window: int = 8
    dropout: float = 0.1
    attn_dropout: float = 0.0
    smooth_weight: float = 0.15
    smooth_clip: float = 4.0


def causal_window_keep(t: int, window: int, device=None) -> torch.Tensor:
    i = torch.arange(t, device=device)
    delta = i[:, None] - i[None, :]
    return (delta >= 0) & (delta < window)


class CausalBlock(nn.Module):
    def __init__(self, cfg: PhaseConfig):
        super().__init__()
        self.h = cfg.n_heads
        self.p = cfg.attn_dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, frame_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        p = self.p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=frame_keep[:, None, None, :], dropout_p=p, is_causal=True)  # expect: MC506 causal
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class LocalBranch(nn.Module):
    def __init__(self, cfg: PhaseConfig):
        super().__init__()
        self.window = cfg.local_window
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, dropout=cfg.dropout, batch_first=True)
        self.ln = nn.LayerNorm(cfg.d_model)

    def forward(self, x, frame_keep):
        t = x.size(1)
        allowed = causal_window_keep(t, self.window, x.device)
        h = self.ln(x)
        y, _ = self.attn(h, h, h, attn_mask=~allowed, key_padding_mask=~frame_keep, need_weights=False)
        return x + y


class OnlinePhaseNet(nn.Module):
    def __init__(self, cfg: PhaseConfig):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Sequential(nn.Linear(cfg.feat_dim, cfg.d_model), nn.Dropout(cfg.dropout))
        self.pos = nn.Embedding(4096, cfg.d_model)
        self.long_range = nn.ModuleList([CausalBlock(cfg) for _ in range(cfg.n_layers)])
        self.local = LocalBranch(cfg)
        self.fuse = nn.Linear(2 * cfg.d_model, cfg.d_model)
        self.cls = nn.Linear(cfg.d_model, len(PHASES))

    def forward(self, feats, lengths):
        b, t, _ = feats.shape
        frame_keep = torch.arange(t, device=feats.device)[None, :] < lengths[:, None]
        x = self.inp(feats) + self.pos(torch.arange(t, device=feats.device))[None]
        g = x
        for blk in self.long_range:
            g = blk(g, frame_keep)
        l = self.local(x, frame_keep)
        return self.cls(torch.relu(self.fuse(torch.cat([g, l], dim=-1)))), frame_keep

    def loss(self, logits, frame_keep, phases):
        target = phases.masked_fill(~frame_keep, -100)
        ce = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=-100)
        logp = F.log_softmax(logits, dim=-1)
        diff = (logp[:, 1:] - logp[:, :-1].detach()) ** 2
        diff = diff.clamp(max=self.cfg.smooth_clip ** 2).mean(-1)
        pair_keep = (frame_keep[:, 1:] & frame_keep[:, :-1]).to(diff.dtype)
        smooth = (diff * pair_keep).sum() / pair_keep.sum().clamp(min=1.0)
        return ce + self.cfg.smooth_weight * smooth


def frame_accuracy(logits, phases, frame_keep):
    hit = (logits.argmax(-1) == phases) & frame_keep
    return (hit.sum() / frame_keep.sum()).item()


def synthetic_videos(lengths, feat_dim, generator):
    t = max(lengths)
    feats = torch.randn(len(lengths), t, feat_dim, generator=generator)
    phases = torch.zeros(len(lengths), t, dtype=torch.long)
    for i, n in enumerate(lengths):
        cuts = torch.linspace(0, n, len(PHASES) + 1).long()
        for ph in range(len(PHASES)):
            phases[i, cuts[ph]:cuts[ph + 1]] = ph
            feats[i, cuts[ph]:cuts[ph + 1], ph] += 3.0
        feats[i, n:] = 0.0
    return feats, torch.tensor(lengths), phases


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = PhaseConfig()
    model = OnlinePhaseNet(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    feats, lengths, phases = synthetic_videos([40, 33, 25], cfg.feat_dim, g)
    for step in range(6):
        logits, frame_keep = model(feats, lengths)
        loss = model.loss(logits, frame_keep, phases)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits, frame_keep = model(feats, lengths)
    print("loss", round(loss.item(), 4), "acc", round(frame_accuracy(logits, phases, frame_keep), 3))
