"""Neural Data Transformer (NDT) for latent-rate inference from population spiking.

Follows snel-repo/neural-data-transformers and the Neural Latents Benchmark protocol: binned spike
counts of the held-in neurons embedded per time bin, learned positions, context-limited attention
(`context_forward` / `context_backward` bins), masked modeling of whole time bins with a Poisson
NLL, rates for held-in and held-out neurons, and co-smoothing bits per spike (co-bps) on held-out
neurons. Trials of different lengths are padded per batch; the 4-D additive mask is prepared the
way Hugging Face models prepare theirs.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 items 15 and 16), conventions.md §2.3 and §5 item 4
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class NDTConfig:
    n_heldin: int = 40
    n_heldout: int = 10
    max_bins: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 3
    context_forward: int = 4
    context_backward: int = 12
    mask_ratio: float = 0.25
    dropout: float = 0.2


def simulate_session(n_trials, cfg, g):
    n = cfg.n_heldin + cfg.n_heldout
    readout = 0.8 * torch.randn(3, n, generator=g)
    bias = math.log(0.2) + 0.3 * torch.randn(n, generator=g)
    theta = 0.15
    rot = torch.tensor([[math.cos(theta), -math.sin(theta), 0.0], [math.sin(theta), math.cos(theta), 0.0],
                        [0.0, 0.0, 0.95]])
    trials = []
    for _ in range(n_trials):
        t_len = int(torch.randint(30, cfg.max_bins + 1, (1,), generator=g))
        z, zs = torch.randn(3, generator=g), []
        for _ in range(t_len):
            z = rot @ z + 0.05 * torch.randn(3, generator=g)
            zs.append(z)
        rates = torch.exp(torch.stack(zs) @ readout + bias)
        trials.append(torch.poisson(rates, generator=g))
    return trials


def collate_trials(trials, cfg):
    t_max = max(t.size(0) for t in trials)
    spikes = torch.zeros(len(trials), t_max, cfg.n_heldin + cfg.n_heldout)
    bin_mask = torch.zeros(len(trials), t_max, dtype=torch.long)
    for i, t in enumerate(trials):
        spikes[i, : t.size(0)], bin_mask[i, : t.size(0)] = t, 1
    return {"heldin": spikes[..., : cfg.n_heldin], "heldout": spikes[..., cfg.n_heldin:], "bin_mask": bin_mask}


def _make_context_mask(t_len, context_forward, context_backward, dtype, device):
    idx = torch.arange(t_len, device=device)
    offset = idx[None, :] - idx[:, None]
    blocked = (offset > context_forward) | (offset < -context_backward)
    return torch.zeros(t_len, t_len, dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)


def _expand_mask(bin_mask, dtype, tgt_len):
    expanded = bin_mask[:, None, None, :].expand(-1, 1, tgt_len, -1).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


def _prepare_4d_attention_mask(bin_mask, cfg, dtype):
    t_len = bin_mask.size(1)
    context_mask = _make_context_mask(t_len, cfg.context_forward, cfg.context_backward, dtype, bin_mask.device)
    expanded_mask = _expand_mask(bin_mask, dtype, t_len)
    return context_mask[None, None].masked_fill(expanded_mask.bool(), torch.finfo(dtype).min)


class NDTAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x, attention_mask):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.dropout(F.softmax(attn_weights, dim=-1), self.dropout, self.training)
        return self.o_proj(torch.matmul(attn_weights, v).transpose(1, 2).reshape(B, T, D))


class NDTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = NDTAttention(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.ReLU(), nn.Dropout(cfg.dropout),
                                 nn.Linear(2 * cfg.d_model, cfg.d_model))
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, attention_mask):
        x = x + self.dropout(self.self_attn(self.norm1(x), attention_mask))
        return x + self.dropout(self.ffn(self.norm2(x)))


class NeuralDataTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embedder = nn.Linear(cfg.n_heldin, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_bins, cfg.d_model)
        self.layers = nn.ModuleList([NDTLayer(cfg) for _ in range(cfg.n_layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.rate_head = nn.Linear(cfg.d_model, cfg.n_heldin + cfg.n_heldout)

    def forward(self, heldin, bin_mask):
        x = self.embedder(torch.log1p(heldin)) * math.sqrt(self.cfg.d_model)
        x = x + self.pos(torch.arange(heldin.size(1), device=heldin.device))
        attention_mask = _prepare_4d_attention_mask(bin_mask, self.cfg, x.dtype)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return self.rate_head(self.norm(x))

    def masked_loss(self, batch):
        keep = batch["bin_mask"].bool()
        masked_bins = keep & (torch.rand(keep.shape, device=keep.device) < self.cfg.mask_ratio)
        heldin = batch["heldin"].masked_fill(masked_bins[..., None], 0.0)
        log_rates = self(heldin, batch["bin_mask"])
        target = torch.cat([batch["heldin"], batch["heldout"]], -1)
        nll = F.poisson_nll_loss(log_rates, target, log_input=True, reduction="none")
        loss_bins = masked_bins[..., None].expand_as(nll).clone()
        loss_bins[..., self.cfg.n_heldin:] = keep[..., None]
        return nll[loss_bins].mean()


def co_bps(log_rates, heldout, keep):
    rates, spikes = log_rates.exp()[keep], heldout[keep]
    null_rates = spikes.mean(0, keepdim=True).expand_as(spikes)
    ll = (spikes * torch.log(rates) - rates).sum()
    ll_null = (spikes * torch.log(null_rates.clamp(min=1e-9)) - null_rates).sum()
    return ((ll - ll_null) / (spikes.sum() * math.log(2))).item()


def main():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    cfg = NDTConfig()
    trials = simulate_session(900, cfg, g)
    train, test = trials[:800], trials[800:]
    model = NeuralDataTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-5)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(train)).tolist()
        for start in range(0, len(train), 32):
            loss = model.masked_loss(collate_trials([train[i] for i in perm[start:start + 32]], cfg))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 200.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            batch = collate_trials(test, cfg)
            log_rates = model(batch["heldin"], batch["bin_mask"])[..., cfg.n_heldin:]
        score = co_bps(log_rates, batch["heldout"], batch["bin_mask"].bool())
        print(f"epoch {epoch} loss {loss.item():.4f} co-bps {score:.4f}")


if __name__ == "__main__":
    main()
