"""Indoor positioning from smartphone WiFi scans, Kaggle "Indoor Location & Navigation" (2021).

Imitates the public PyTorch solutions of the competition (XYZ10 / Microsoft Research data):
a `CFG` namespace, the per-site BSSID label encoding of the "unified WiFi features" kernels
(the strongest `NUM_FEATS` access points of each scan, their RSSI standardised), a site
embedding, `IndoorDataset` and `collate_fn` padding the scans, `IndoorModel` predicting x, y
and the floor, `train_one_epoch` / `valid_one_epoch`, and the competition metric
(`comp_metric`: mean Euclidean error plus 15 per floor of error). Instead of the kernels'
LSTM over a fixed-size feature row, the scan's access points are one token each in a
transformer encoder, padded per batch. Two synthetic buildings of three floors with 30 access
points per floor and a log-distance path-loss model stand in for the malls.

Source: seed self_attention_mask_guide.txt section 2; conventions.md section 1 (direction
cheat-sheet) and section 5 item 1.
"""

import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CFG:
    seed = 42
    NUM_FEATS = 20
    n_sites = 2
    n_floors = 3
    aps_per_floor = 30
    d_model = 48
    n_heads = 4
    n_layers = 2
    lr = 2e-3
    batch_size = 64
    epochs = 5


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def comp_metric(xhat, yhat, fhat, x, y, f):
    intermediate = np.sqrt(np.power(xhat - x, 2) + np.power(yhat - y, 2)) + 15 * np.abs(fhat - f)
    return intermediate.sum() / xhat.shape[0]


def build_sites(rng):
    sites = []
    for site in range(CFG.n_sites):
        width, height = rng.uniform(80, 150), rng.uniform(60, 120)
        aps = []
        for floor in range(CFG.n_floors):
            for _ in range(CFG.aps_per_floor):
                aps.append((rng.uniform(0, width), rng.uniform(0, height), floor))
        sites.append({"width": width, "height": height, "aps": np.array(aps)})
    return sites


def simulate_waypoints(sites, n, rng):
    records = []
    for _ in range(n):
        site = int(rng.integers(CFG.n_sites))
        s = sites[site]
        x, y, floor = rng.uniform(0, s["width"]), rng.uniform(0, s["height"]), int(rng.integers(CFG.n_floors))
        dist = np.hypot(s["aps"][:, 0] - x, s["aps"][:, 1] - y)
        rssi = -35 - 22 * np.log10(dist + 1) - 14 * np.abs(s["aps"][:, 2] - floor) + rng.normal(0, 3, len(dist))
        visible = np.nonzero(rssi > -82)[0]
        visible = visible[np.argsort(-rssi[visible])][: CFG.NUM_FEATS]
        if len(visible) == 0:
            continue
        bssid = site * len(s["aps"]) + visible + 1
        records.append({"site": site, "bssid": bssid, "rssi": rssi[visible], "x": x, "y": y, "floor": floor})
    return records


class IndoorDataset(torch.utils.data.Dataset):
    def __init__(self, records, rssi_mean, rssi_std):
        self.records = records
        self.rssi_mean = rssi_mean
        self.rssi_std = rssi_std

    def __len__(self):
        return len(self.records)

    def __getitem__(self, idx):
        r = self.records[idx]
        return {
            "site_id": r["site"],
            "bssid": torch.tensor(r["bssid"], dtype=torch.long),
            "rssi": torch.tensor((r["rssi"] - self.rssi_mean) / self.rssi_std, dtype=torch.float32),
            "target": torch.tensor([r["x"], r["y"]], dtype=torch.float32),
            "floor": r["floor"],
        }


def collate_fn(samples):
    max_aps = max(len(s["bssid"]) for s in samples)
    b = len(samples)
    bssid = torch.zeros(b, max_aps, dtype=torch.long)
    rssi = torch.zeros(b, max_aps)
    attention_mask = torch.zeros(b, max_aps, dtype=torch.bool)
    for i, s in enumerate(samples):
        n = len(s["bssid"])
        bssid[i, :n] = s["bssid"]
        rssi[i, :n] = s["rssi"]
        attention_mask[i, :n] = True
    return {
        "site_id": torch.tensor([s["site_id"] for s in samples]),
        "bssid": bssid,
        "rssi": rssi,
        "attention_mask": attention_mask,
        "target": torch.stack([s["target"] for s in samples]),
        "floor": torch.tensor([s["floor"] for s in samples]),
    }


class IndoorModel(nn.Module):
    def __init__(self, n_bssid, n_sites, n_floors):
        super().__init__()
        self.bssid_embedding = nn.Embedding(n_bssid, CFG.d_model, padding_idx=0)
        self.site_embedding = nn.Embedding(n_sites, CFG.d_model)
        self.rssi_fc = nn.Sequential(nn.Linear(1, CFG.d_model), nn.ReLU(), nn.Linear(CFG.d_model, CFG.d_model))
        layer = nn.TransformerEncoderLayer(CFG.d_model, CFG.n_heads, CFG.d_model * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, CFG.n_layers, enable_nested_tensor=False)
        self.xy_head = nn.Sequential(nn.Linear(CFG.d_model * 2, 64), nn.ReLU(), nn.Linear(64, 2))
        self.floor_head = nn.Linear(CFG.d_model * 2, n_floors)

    def forward(self, batch):
        attention_mask = batch["attention_mask"]
        h = self.bssid_embedding(batch["bssid"]) + self.rssi_fc(batch["rssi"].unsqueeze(-1))
        h = self.encoder(h, src_key_padding_mask=attention_mask)  # expect: MC502 kwarg
        keep = attention_mask.unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        feats = torch.cat([pooled, self.site_embedding(batch["site_id"])], dim=-1)
        return self.xy_head(feats) * 100.0, self.floor_head(feats)


def train_one_epoch(model, loader, optimizer):
    model.train()
    for batch in loader:
        xy, floor_logits = model(batch)
        loss = F.smooth_l1_loss(xy, batch["target"], beta=5.0) + 5.0 * F.cross_entropy(floor_logits, batch["floor"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def valid_one_epoch(model, loader):
    model.eval()
    preds, floors, targets, true_floors = [], [], [], []
    with torch.no_grad():
        for batch in loader:
            xy, floor_logits = model(batch)
            preds.append(xy.numpy())
            floors.append(floor_logits.argmax(-1).numpy())
            targets.append(batch["target"].numpy())
            true_floors.append(batch["floor"].numpy())
    p, f, t, tf = map(np.concatenate, (preds, floors, targets, true_floors))
    return comp_metric(p[:, 0], p[:, 1], f, t[:, 0], t[:, 1], tf)


if __name__ == "__main__":
    seed_everything(CFG.seed)
    rng = np.random.default_rng(CFG.seed)
    sites = build_sites(rng)
    train_records = simulate_waypoints(sites, 1200, rng)
    valid_records = simulate_waypoints(sites, 300, rng)
    all_rssi = np.concatenate([r["rssi"] for r in train_records])
    mean, std = all_rssi.mean(), all_rssi.std()
    train_loader = torch.utils.data.DataLoader(IndoorDataset(train_records, mean, std), batch_size=CFG.batch_size,
                                               shuffle=True, collate_fn=collate_fn)
    valid_loader = torch.utils.data.DataLoader(IndoorDataset(valid_records, mean, std), batch_size=256,
                                               shuffle=False, collate_fn=collate_fn)
    n_bssid = CFG.n_sites * CFG.n_floors * CFG.aps_per_floor + 1
    model = IndoorModel(n_bssid, CFG.n_sites, CFG.n_floors)
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG.lr)
    for epoch in range(CFG.epochs):
        loss = train_one_epoch(model, train_loader, optimizer)
        score = valid_one_epoch(model, valid_loader)
        print(f"epoch {epoch + 1}: train loss {loss:.3f}  valid metric {score:.2f}")
