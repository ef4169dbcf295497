"""Vessel trajectory prediction from AIS messages with TrAISformer.

Imitates CIA-Oceanix/TrAISformer (Nguyen and Fablet, 2021), itself built on minGPT: a
`Config` class with the region of interest and the `lat_size` / `lon_size` / `sog_size` /
`cog_size` bins, the "four-hot" discretisation `to_indexes` over the registered `att_sizes`,
`lat_emb` / `lon_emb` / `sog_emb` / `cog_emb` concatenated into one token, `pos_emb`,
minGPT's `CausalSelfAttention` with `key` / `query` / `value` / `proj` and the registered
`mask` triangle, `Block`, the classification `head` split per attribute, the loss masked by
`masks` for padded tracks, `AISDataset` returning `(seq, mask, seqlen, mmsi, time_start)`, and
`trainers.sample` with `init_seqlen` observed steps. Predictions for the operational feed use
only the last `lookback` messages, as the vessel-traffic service keeps a short history.
Synthetic data: tracks of 24-48 ten-minute steps along three shipping lanes of a Danish-
waters-like region, with speed changes and turns.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 注意: 张量共享内存风险).
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    lat_min, lat_max, lon_min, lon_max = 55.5, 58.0, 10.3, 13.0
    lat_size, lon_size, sog_size, cog_size = 50, 50, 30, 72
    n_lat_embd, n_lon_embd, n_sog_embd, n_cog_embd = 16, 16, 8, 8
    n_embd = 48
    n_head = 4
    n_layer = 2
    max_seqlen = 48
    embd_pdrop = resid_pdrop = attn_pdrop = 0.1
    init_seqlen = 18
    lookback = 12
    batch_size = 32
    max_epochs = 6
    learning_rate = 6e-4
    full_size = lat_size + lon_size + sog_size + cog_size


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        L = config.max_seqlen
        self.register_buffer("mask", torch.tril(torch.ones(L, L)).view(1, 1, L, L))
        self.register_buffer("lag", (torch.arange(L)[:, None] - torch.arange(L)[None, :]).view(1, 1, L, L))
        self.n_head = config.n_head

    def forward(self, x, lookback=None):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = self.mask
        if lookback is not None:
            mask = self.mask.masked_fill(self.lag >= lookback, 0)
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.resid_pdrop))

    def forward(self, x, lookback=None):
        x = x + self.attn(self.ln1(x), lookback=lookback)
        return x + self.mlp(self.ln2(x))


class TrAISformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lat_size, self.lon_size = config.lat_size, config.lon_size
        self.sog_size, self.cog_size = config.sog_size, config.cog_size
        self.register_buffer("att_sizes", torch.tensor([config.lat_size, config.lon_size, config.sog_size, config.cog_size]))
        self.lat_emb = nn.Embedding(self.lat_size, config.n_lat_embd)
        self.lon_emb = nn.Embedding(self.lon_size, config.n_lon_embd)
        self.sog_emb = nn.Embedding(self.sog_size, config.n_sog_embd)
        self.cog_emb = nn.Embedding(self.cog_size, config.n_cog_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.max_seqlen, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.full_size, bias=False)
        self.max_seqlen = config.max_seqlen
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()

    def to_indexes(self, x):
        idxs = (x * self.att_sizes).long()
        return torch.minimum(idxs, self.att_sizes - 1)

    def forward(self, x, masks=None, with_targets=False, lookback=None):
        idxs = self.to_indexes(x)
        if with_targets:
            inputs, targets = idxs[:, :-1, :].contiguous(), idxs[:, 1:, :].contiguous()
        else:
            inputs, targets = idxs, None
        batchsize, seqlen, _ = inputs.size()
        token_embeddings = torch.cat((self.lat_emb(inputs[:, :, 0]), self.lon_emb(inputs[:, :, 1]),
                                      self.sog_emb(inputs[:, :, 2]), self.cog_emb(inputs[:, :, 3])), dim=-1)
        fea = self.drop(token_embeddings + self.pos_emb[:, :seqlen, :])
        for block in self.blocks:
            fea = block(fea, lookback=lookback)
        logits = self.head(self.ln_f(fea))
        loss = None
        if targets is not None:
            splits = torch.split(logits, (self.lat_size, self.lon_size, self.sog_size, self.cog_size), dim=-1)
            loss = sum(F.cross_entropy(l.reshape(-1, l.size(-1)), targets[:, :, i].reshape(-1), reduction="none")
                       .view(batchsize, seqlen) for i, l in enumerate(splits))
            if masks is not None:
                masks = masks[:, :-1]
                loss = (loss * masks).sum(dim=1) / masks.sum(dim=1)
            loss = loss.mean()
        return logits, loss


class AISDataset(torch.utils.data.Dataset):
    def __init__(self, l_data, max_seqlen=96):
        self.max_seqlen = max_seqlen
        self.l_data = l_data

    def __len__(self):
        return len(self.l_data)

    def __getitem__(self, idx):
        V = self.l_data[idx]
        m_v = V["traj"][:, :4]
        seqlen = min(len(m_v), self.max_seqlen)
        seq = np.zeros((self.max_seqlen, 4))
        seq[:seqlen, :] = m_v[:seqlen, :]
        mask = torch.zeros(self.max_seqlen)
        mask[:seqlen] = 1.0
        return torch.tensor(seq, dtype=torch.float32), mask, torch.tensor(seqlen), torch.tensor(V["mmsi"]), torch.tensor(V["traj"][0, 4])


def make_tracks(n, rng, cfg):
    lanes = [((0.1, 0.2), (0.9, 0.7)), ((0.2, 0.9), (0.8, 0.1)), ((0.05, 0.5), (0.95, 0.55))]
    tracks = []
    for i in range(n):
        (a0, b0), (a1, b1) = lanes[int(rng.integers(len(lanes)))]
        if rng.random() < 0.5:
            (a0, b0), (a1, b1) = (a1, b1), (a0, b0)
        T = int(rng.integers(24, cfg.max_seqlen + 1))
        speed = rng.uniform(0.012, 0.025)
        heading = math.atan2(b1 - b0, a1 - a0)
        lat, lon = a0 + rng.normal(0, 0.02), b0 + rng.normal(0, 0.02)
        rows = []
        for t in range(T):
            if rng.random() < 0.05:
                speed = float(np.clip(speed * rng.uniform(0.6, 1.4), 0.005, 0.03))
            heading += rng.normal(0, 0.05)
            lat = float(np.clip(lat + speed * math.cos(heading), 0, 0.999))
            lon = float(np.clip(lon + speed * math.sin(heading), 0, 0.999))
            rows.append([lat, lon, speed / 0.03 * 0.999, (heading % (2 * math.pi)) / (2 * math.pi), 600.0 * t])
        tracks.append({"mmsi": 219000000 + i, "traj": np.array(rows)})
    return tracks


@torch.no_grad()
def sample(model, seqs, steps, lookback=None):
    model.eval()
    for _ in range(steps):
        seqs_cond = seqs if seqs.size(1) <= model.max_seqlen else seqs[:, -model.max_seqlen:]
        logits, _ = model(seqs_cond, lookback=lookback)
        parts = torch.split(logits[:, -1, :], (model.lat_size, model.lon_size, model.sog_size, model.cog_size), dim=-1)
        ix = torch.stack([p.argmax(dim=-1) for p in parts], dim=-1)
        seqs = torch.cat((seqs, ((ix.float() + 0.5) / model.att_sizes)[:, None, :]), dim=1)
    return seqs


def main():
    torch.manual_seed(42)
    rng = np.random.default_rng(42)
    cfg = Config()
    train_loader = torch.utils.data.DataLoader(AISDataset(make_tracks(320, rng, cfg), cfg.max_seqlen),
                                               batch_size=cfg.batch_size, shuffle=True)
    test_set = AISDataset(make_tracks(64, rng, cfg), cfg.max_seqlen)
    model = TrAISformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate * 5, betas=(0.9, 0.95))
    deg_per_unit = np.array([cfg.lat_max - cfg.lat_min, cfg.lon_max - cfg.lon_min])
    for epoch in range(cfg.max_epochs):
        model.train()
        losses = []
        for seqs, masks, seqlens, mmsis, time_starts in train_loader:
            _, loss = model(seqs, masks=masks, with_targets=True)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
        seqs = torch.stack([test_set[i][0] for i in range(len(test_set))])
        preds = sample(model, seqs[:, : cfg.init_seqlen], steps=6, lookback=cfg.lookback)
        err_deg = (preds[:, -1, :2] - seqs[:, cfg.init_seqlen + 5, :2]).numpy() * deg_per_unit
        err_km = np.hypot(err_deg[:, 0] * 111.0, err_deg[:, 1] * 111.0 * math.cos(math.radians(56.7)))
        print(f"epoch {epoch} train loss {np.mean(losses):.3f}, 1-hour prediction error {err_km.mean():.2f} km")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
