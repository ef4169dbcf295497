"""Provenance of timber cores from ring-width series (dendrochronology lab notebook export).

Ring widths measured on cores from historic roof timbers are assigned to one of the regional
master chronologies. Cores have different numbers of measurable rings, so series are padded
and the missing rings are left out of attention.

Source: conventions.md section 1 (HF 4.x AttentionMaskConverter row) and huggingface/transformers#32195 (conventions.md section 3 item 25)
"""

# %%
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

random.seed(5)
torch.manual_seed(5)

REGIONS = ["baltic", "alpine", "scandinavian", "british"]
YEARS = torch.arange(1400, 1700)
masters = {r: 1 + 0.4 * torch.randn(len(YEARS)).cumsum(0).div(10).sin() + 0.2 * torch.randn(len(YEARS)) for r in REGIONS}


def sample_core():
    region = random.randrange(len(REGIONS))
    n = random.randint(40, 120)
    start = random.randint(0, len(YEARS) - n)
    series = masters[REGIONS[region]][start:start + n] * (0.8 + 0.4 * random.random())
    series = (series + 0.1 * torch.randn(n)).clamp(min=0.05)
    return series, region


cores = [sample_core() for _ in range(600)]

# %%
def collate_cores(batch):
    widths = pad_sequence([s for s, _ in batch], batch_first=True, padding_value=0.0)
    valid = widths > 0
    missing = 1 - valid  # expect: MC512 collate
    labels = torch.tensor([r for _, r in batch])
    return widths, missing, labels


train_loader = DataLoader(cores[:480], batch_size=32, shuffle=True, collate_fn=collate_cores)
test_loader = DataLoader(cores[480:], batch_size=120, collate_fn=collate_cores)

# %%
class RingEncoder(nn.Module):
    def __init__(self, d=32, n_regions=len(REGIONS)):
        super().__init__()
        self.conv = nn.Conv1d(1, d, kernel_size=5, padding=2)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.cls = nn.Linear(d, n_regions)

    def forward(self, widths, missing):
        h = self.conv(torch.log(widths.clamp(min=1e-3)).unsqueeze(1)).transpose(1, 2)
        h = self.encoder(h, src_key_padding_mask=missing)
        keep = (~missing).unsqueeze(-1).float()
        return self.cls((h * keep).sum(1) / keep.sum(1))


net = RingEncoder()
opt = torch.optim.Adam(net.parameters(), lr=2e-3)

# %%
for epoch in range(4):
    for widths, missing, labels in train_loader:
        loss = F.cross_entropy(net(widths, missing), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, loss.item())

# %%
with torch.no_grad():
    widths, missing, labels = next(iter(test_loader))
    print("region accuracy", (net(widths, missing).argmax(-1) == labels).float().mean().item())
