"""Predicting Molecular Properties (CHAMPS): scalar coupling constants of atom pairs, atom transformer with a distance bias.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); conventions.md §2.9, §5 item 7; seed self_attention_mask_guide.txt §3, §7 Q3.
"""
import os
import gc
import csv
import math
import time
import random
from collections import defaultdict

import numpy as np

SEED = 123
DATA = "../input/champs-scalar-coupling/"
MAX_ATOMS = 29
ATOM_TYPES = ["PAD", "H", "C", "N", "O", "F"]
COUPLING_TYPES = ["1JHC", "1JHN", "2JHH", "2JHC", "2JHN", "3JHH", "3JHC", "3JHN"]
N_MOLECULES = 300
EMB = 96
HEADS = 4
LAYERS = 3
N_RBF = 32
CUTOFF = 6.0
BATCH = 32
EPOCHS = 3
LR = 5e-4

random.seed(SEED)
np.random.seed(SEED)


def synth_molecule(name):
    n_heavy = random.randint(2, 9)
    heavy = random.choices(["C", "C", "C", "N", "O", "F"], k=n_heavy)
    xyz = np.cumsum(np.random.randn(n_heavy, 3) * 0.9 + np.array([1.4, 0, 0]), axis=0)
    atoms, coords = list(heavy), list(xyz)
    for i, a in enumerate(heavy):
        for _ in range({"C": 2, "N": 1, "O": 1, "F": 0}[a]):
            atoms.append("H")
            coords.append(xyz[i] + np.random.randn(3) * 0.3 + 1.0)
    atoms, coords = atoms[:MAX_ATOMS], np.array(coords[:MAX_ATOMS])
    pairs = []
    for i, a in enumerate(atoms):
        if a != "H":
            continue
        for j, b in enumerate(atoms):
            if j == i or b == "F" or b == "O":
                continue
            d = float(np.linalg.norm(coords[i] - coords[j]))
            bonds = 1 if d < 1.6 else 2 if d < 2.6 else 3
            ctype = f"{bonds}JH{b}"
            if ctype in COUPLING_TYPES:
                pairs.append((i, j, ctype, {1: 90.0, 2: -5.0, 3: 4.0}[bonds] + 20 * math.exp(-d) + random.gauss(0, 0.5)))
    return {"name": name, "atoms": atoms, "xyz": coords, "pairs": pairs}


def load_molecules():
    if not os.path.exists(DATA + "train.csv"):
        return [synth_molecule(f"dsgdb9nsd_{i:06d}") for i in range(N_MOLECULES)]
    mols = defaultdict(lambda: {"atoms": [], "xyz": [], "pairs": []})
    with open(DATA + "structures.csv") as f:
        for r in csv.DictReader(f):
            m = mols[r["molecule_name"]]
            m["atoms"].append(r["atom"])
            m["xyz"].append([float(r["x"]), float(r["y"]), float(r["z"])])
    with open(DATA + "train.csv") as f:
        for r in csv.DictReader(f):
            mols[r["molecule_name"]]["pairs"].append((int(r["atom_index_0"]), int(r["atom_index_1"]), r["type"],
                                                      float(r["scalar_coupling_constant"])))
    return [{"name": k, "atoms": v["atoms"], "xyz": np.array(v["xyz"]), "pairs": v["pairs"]}
            for k, v in list(mols.items())[:N_MOLECULES] if v["pairs"]]


molecules = [m for m in load_molecules() if m["pairs"]]
type_stats = defaultdict(list)
for m in molecules:
    for _, _, t, y in m["pairs"]:
        type_stats[t].append(y)
TYPE_MEAN = {t: float(np.mean(v)) for t, v in type_stats.items()}
TYPE_STD = {t: float(np.std(v) + 1e-3) for t, v in type_stats.items()}
print(f"molecules {len(molecules)}, pairs {sum(len(m['pairs']) for m in molecules)}")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PAD = 0


class MoleculeDataset(Dataset):
    def __init__(self, mols):
        self.mols = mols

    def __len__(self):
        return len(self.mols)

    def __getitem__(self, i):
        m = self.mols[i]
        n = len(m["atoms"])
        atom = torch.zeros(MAX_ATOMS, dtype=torch.long)
        atom[:n] = torch.tensor([ATOM_TYPES.index(a) for a in m["atoms"]])
        xyz = torch.zeros(MAX_ATOMS, 3)
        xyz[:n] = torch.tensor(m["xyz"], dtype=torch.float32)
        pairs = torch.tensor([[p[0], p[1], COUPLING_TYPES.index(p[2])] for p in m["pairs"]], dtype=torch.long)
        target = torch.tensor([(p[3] - TYPE_MEAN[p[2]]) / TYPE_STD[p[2]] for p in m["pairs"]], dtype=torch.float32)
        return atom, xyz, pairs, target


def collate(batch):
    atoms = torch.stack([b[0] for b in batch])
    xyz = torch.stack([b[1] for b in batch])
    pairs = torch.cat([torch.cat([torch.full((len(b[2]), 1), i), b[2]], 1) for i, b in enumerate(batch)])
    target = torch.cat([b[3] for b in batch])
    return atoms, xyz, pairs, target


class GaussianRBF(nn.Module):
    def __init__(self, n, cutoff):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0, cutoff, n))
        self.gamma = (n / cutoff) ** 2

    def forward(self, d):
        return torch.exp(-self.gamma * (d[..., None] - self.centers) ** 2)


class AtomAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dist_bias = nn.Linear(N_RBF, heads)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, rbf, atom_pad):
        B, N, C = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        scores = scores + self.dist_bias(rbf).permute(0, 3, 1, 2)
        scores = scores + atom_pad[:, None, None, :]  # expect: MC509 atoms
        attn = scores.softmax(dim=-1)
        return x + self.out((attn @ v).transpose(1, 2).reshape(B, N, C))


class CouplingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.atom_emb = nn.Embedding(len(ATOM_TYPES), EMB, padding_idx=PAD)
        self.rbf = GaussianRBF(N_RBF, CUTOFF)
        self.layers = nn.ModuleList([AtomAttention(EMB, HEADS) for _ in range(LAYERS)])
        self.ffns = nn.ModuleList([nn.Sequential(nn.LayerNorm(EMB), nn.Linear(EMB, 2 * EMB), nn.SiLU(),
                                                 nn.Linear(2 * EMB, EMB)) for _ in range(LAYERS)])
        self.type_emb = nn.Embedding(len(COUPLING_TYPES), EMB)
        self.pair_head = nn.Sequential(nn.Linear(3 * EMB + N_RBF, 2 * EMB), nn.SiLU(), nn.Linear(2 * EMB, 1))

    def forward(self, atoms, xyz, pairs):
        atom_pad = atoms == PAD
        dist = torch.cdist(xyz, xyz)
        rbf = self.rbf(dist)
        x = self.atom_emb(atoms)
        for attn, ffn in zip(self.layers, self.ffns):
            x = attn(x, rbf, atom_pad)
            x = x + ffn(x)
        b, i, j, t = pairs.unbind(-1)
        feat = torch.cat([x[b, i], x[b, j], self.type_emb(t), rbf[b, i, j]], dim=-1)
        return self.pair_head(feat).squeeze(-1), t


def group_log_mae(y_true, y_pred, types):
    scores = []
    for t in np.unique(types):
        m = types == t
        scores.append(np.log(max(np.abs(y_true[m] - y_pred[m]).mean(), 1e-9)))
    return float(np.mean(scores))


random.shuffle(molecules)
n_val = len(molecules) // 5
train_loader = DataLoader(MoleculeDataset(molecules[n_val:]), batch_size=BATCH, shuffle=True, collate_fn=collate)
valid_loader = DataLoader(MoleculeDataset(molecules[:n_val]), batch_size=BATCH, collate_fn=collate)

if __name__ == "__main__":
    model = CouplingNet().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        for atoms, xyz, pairs, y in train_loader:
            pred, _ = model(atoms.to(device), xyz.to(device), pairs.to(device))
            loss = F.l1_loss(pred, y.to(device))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            opt.step()
        model.eval()
        ys, ps, ts = [], [], []
        with torch.no_grad():
            for atoms, xyz, pairs, y in valid_loader:
                pred, t = model(atoms.to(device), xyz.to(device), pairs.to(device))
                ys.append(y.numpy())
                ps.append(pred.cpu().numpy())
                ts.append(t.cpu().numpy())
        score = group_log_mae(np.concatenate(ys), np.concatenate(ps), np.concatenate(ts))
        sched.step(score)
        print(f"epoch {epoch} train_l1 {loss.item():.4f} valid group-log-MAE {score:.4f} ({time.time() - t0:.1f}s)")
    torch.save(model.state_dict(), "champs_coupling.pt")
    gc.collect()
