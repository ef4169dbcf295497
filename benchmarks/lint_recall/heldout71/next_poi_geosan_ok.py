"""Next point-of-interest recommendation with geography-aware self-attention (GeoSAN style).

A user's check-in trajectory (POI ids, hour-of-week slots and quadkey-style grid cells, padded
with 0 on the right) goes through a causal self-attention encoder; a target-aware decoder lets
each step's candidate POIs attend to the trajectory up to that step, and training uses a
weighted binary loss over sampled nearby negatives. Evaluation ranks the true next POI among
100 candidates (Hit@5, NDCG@5).

Source: pytorch/pytorch PR #111007; conventions.md section 1 (SDPA is_causal row), section 2.7
and section 5 item 8.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ARGS = dict(n_poi=60, n_grid=20, n_slot=168, dim=16, heads=2, layers=2, max_len=8, dropout=0.0,
            num_neg=4, temperature=1.0)


def causal_keep(n, device=None):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x, key_keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep & causal_keep(n, x.device), dropout_p=p)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.ln1 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.ln2 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, key_keep):
        x = x + self.drop(self.attn(self.ln1(x), key_keep))
        return x + self.drop(self.ff(self.ln2(x)))


class TargetAwareDecoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)

    def forward(self, cand, hist, seq_keep):
        n = hist.size(1)
        allowed = causal_keep(n, hist.device)[None, :, None, :] & seq_keep[:, None, None, :]
        scores = torch.einsum("bscd,btd->bsct", self.q(cand), self.k(hist)) / math.sqrt(hist.size(-1))
        scores = scores.masked_fill(~allowed, float("-inf"))
        ctx = torch.einsum("bsct,btd->bscd", scores.softmax(dim=-1), hist)
        return (ctx * cand).sum(dim=-1)


class GeoSAN(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.poi_emb = nn.Embedding(a["n_poi"], a["dim"], padding_idx=0)
        self.grid_emb = nn.Embedding(a["n_grid"], a["dim"], padding_idx=0)
        self.slot_emb = nn.Embedding(a["n_slot"] + 1, a["dim"], padding_idx=0)
        self.pos_emb = nn.Embedding(a["max_len"], a["dim"])
        self.layers = nn.ModuleList([EncoderLayer(a["dim"], a["heads"], a["dropout"]) for _ in range(a["layers"])])
        self.decoder = TargetAwareDecoder(a["dim"])
        self.poi_grid = nn.Parameter(torch.randint(1, a["n_grid"], (a["n_poi"],)), requires_grad=False)

    def encode(self, traj):
        poi, slot = traj["poi"], traj["slot"]
        seq_keep = poi != 0
        pos = torch.arange(poi.size(1), device=poi.device)
        x = self.poi_emb(poi) + self.grid_emb(self.poi_grid[poi] * seq_keep) + self.slot_emb(slot) + self.pos_emb(pos)
        key_keep = seq_keep[:, None, None, :]
        for layer in self.layers:
            x = layer(x, key_keep)
        return x, seq_keep

    def candidate_embedding(self, cand):
        return self.poi_emb(cand) + self.grid_emb(self.poi_grid[cand])

    def forward(self, traj, targets, negatives):
        hist, seq_keep = self.encode(traj)
        cand = torch.cat([targets.unsqueeze(-1), negatives], dim=-1)
        return self.decoder(self.candidate_embedding(cand), hist, seq_keep), seq_keep


def weighted_bce(logits, seq_keep, temperature):
    pos, neg = logits[..., 0], logits[..., 1:]
    w = F.softmax(neg / temperature, dim=-1).detach()
    loss = -F.logsigmoid(pos) - (w * F.logsigmoid(-neg)).sum(dim=-1)
    return (loss * seq_keep).sum() / seq_keep.sum()


def toy_trajectories(batch_size, a, generator=None):
    lens = torch.randint(2, a["max_len"] + 1, (batch_size,), generator=generator)
    keep = torch.arange(a["max_len"])[None, :] < lens[:, None]
    poi = torch.randint(1, a["n_poi"], (batch_size, a["max_len"] + 1), generator=generator)
    slot = torch.randint(1, a["n_slot"] + 1, (batch_size, a["max_len"]), generator=generator)
    traj = {"poi": poi[:, :-1] * keep, "slot": slot * keep}
    targets = poi[:, 1:] * keep
    negatives = torch.randint(1, a["n_poi"], (batch_size, a["max_len"], a["num_neg"]), generator=generator)
    return traj, targets, negatives


@torch.no_grad()
def evaluate(model, traj, targets, n_cand=20, k=5):
    model.eval()
    last = (traj["poi"] != 0).sum(dim=1) - 1
    rows = torch.arange(targets.size(0))
    negs = torch.randint(1, model.poi_emb.num_embeddings, (targets.size(0), targets.size(1), n_cand - 1))
    logits, _ = model(traj, targets, negs)
    rank = (logits[rows, last, 1:] > logits[rows, last, :1]).sum(dim=-1)
    hit = (rank < k).float()
    ndcg = hit / torch.log2(rank.float() + 2)
    return hit.mean().item(), ndcg.mean().item()


if __name__ == "__main__":
    torch.manual_seed(8)
    model = GeoSAN(ARGS)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    traj, targets, negatives = toy_trajectories(5, ARGS)
    for epoch in range(3):
        model.train()
        logits, keep = model(traj, targets, negatives)
        loss = weighted_bce(logits, keep, ARGS["temperature"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    hit, ndcg = evaluate(model, traj, targets)
    print("loss %.4f  hit@5 %.3f  ndcg@5 %.3f" % (loss.item(), hit, ndcg))
