"""Lithology from wireline logs (GR, RHOB, NPHI, DT, PEF), one class per depth sample, trained with DDP.

Each well is cut into intervals of up to 64 samples (0.5 ft apart); the last interval of a well
is shorter and padded. A transformer over the depth samples labels sandstone, shale, limestone,
dolomite or anhydrite at every depth. Launch with
`torchrun --nproc_per_node=4 well_log_lithology_ddp.py`; every rank reads its shard through a
DistributedSampler, rank 0 writes the checkpoint and the all-reduced accuracy.

Source: conventions.md section 2.6, section 1 (SDPA row), section 5 item 6.
"""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

LOGS = ["GR", "RHOB", "NPHI", "DT", "PEF"]
FACIES = ["sandstone", "shale", "limestone", "dolomite", "anhydrite"]
SIGNATURE = np.array([[45, 2.35, 0.18, 85, 1.8], [110, 2.50, 0.32, 105, 3.1], [25, 2.68, 0.08, 55, 5.0],
                      [30, 2.80, 0.05, 48, 3.1], [15, 2.95, 0.01, 50, 5.0]], dtype=np.float32)
INTERVAL = 64


def synth_well(rng, n_samples):
    facies, depth = [], 0
    while depth < n_samples:
        bed = int(rng.integers(4, 30))
        facies += [int(rng.integers(len(FACIES)))] * bed
        depth += bed
    facies = np.array(facies[:n_samples])
    logs = SIGNATURE[facies] * rng.normal(1.0, 0.04, (n_samples, len(LOGS))).astype(np.float32)
    logs = (logs - SIGNATURE.mean(0)) / SIGNATURE.std(0)
    return logs.astype(np.float32), facies


class WellIntervals(Dataset):
    def __init__(self, n_wells, seed):
        rng = np.random.default_rng(seed)
        self.items = []
        for _ in range(n_wells):
            logs, facies = synth_well(rng, int(rng.integers(300, 900)))
            for start in range(0, len(facies), INTERVAL):
                self.items.append((logs[start:start + INTERVAL], facies[start:start + INTERVAL]))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        logs, facies = self.items[i]
        return torch.from_numpy(logs), torch.from_numpy(facies)


def collate_intervals(batch):
    lengths = torch.tensor([len(f) for _, f in batch])
    logs = torch.zeros(len(batch), INTERVAL, len(LOGS))
    facies = torch.full((len(batch), INTERVAL), -100, dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        logs[i, : len(y)] = x
        facies[i, : len(y)] = y
    valid = torch.arange(INTERVAL)[None, :] < lengths[:, None]
    return logs, valid, facies


class DepthAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, valid):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        out = sdpa(q, k, v, valid, self.dropout if self.training else 0.0)  # expect: MC515 positional
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class LithologyNet(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=3, dropout=0.1):
        super().__init__()
        self.inp = nn.Conv1d(len(LOGS), d_model, kernel_size=5, padding=2)
        self.pos = nn.Parameter(torch.zeros(1, INTERVAL, d_model))
        self.attn = nn.ModuleList([DepthAttention(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.GELU(),
                                                nn.Linear(2 * d_model, d_model)) for _ in range(n_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, len(FACIES))

    def forward(self, logs, valid):
        x = self.inp((logs * valid[..., None]).transpose(1, 2)).transpose(1, 2) + self.pos
        for attn, norm, ffn in zip(self.attn, self.norms, self.ffn):
            x = x + attn(norm(x), valid)
            x = x + ffn(x)
        return self.head(x)


def main(epochs=12, batch_size=64, lr=2e-3):
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    train_set, val_set = WellIntervals(60, seed=0), WellIntervals(12, seed=1)
    train_sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, drop_last=True)
    train_loader = DataLoader(train_set, batch_size, sampler=train_sampler, collate_fn=collate_intervals, drop_last=True)
    val_loader = DataLoader(val_set, batch_size, sampler=DistributedSampler(val_set, shuffle=False), collate_fn=collate_intervals)
    model = DDP(LithologyNet().to(device), device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    for epoch in range(epochs):
        train_sampler.set_epoch(epoch)
        model.train()
        for logs, valid, facies in train_loader:
            logs, valid, facies = logs.to(device), valid.to(device), facies.to(device)
            loss = F.cross_entropy(model(logs, valid).flatten(0, 1), facies.flatten(), ignore_index=-100)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        stats = torch.zeros(2, device=device)
        with torch.no_grad():
            for logs, valid, facies in val_loader:
                pred = model(logs.to(device), valid.to(device)).argmax(-1)
                facies = facies.to(device)
                stats += torch.stack([((pred == facies) & (facies >= 0)).sum(), (facies >= 0).sum()]).float()
        dist.all_reduce(stats)
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f} val acc {(stats[0] / stats[1]).item():.3f}")
    if rank == 0:
        torch.save(model.module.state_dict(), "lithology.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
