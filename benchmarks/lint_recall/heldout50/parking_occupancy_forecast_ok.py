"""Next-hour occupancy of on-street parking blocks (city open-data notebook export).

Each target block is forecast from its own in-ground sensor history and from the blocks
within walking distance; blocks have different numbers of neighbours, so the neighbour
lists are padded.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6); seed self_attention_mask_guide.txt section 7 Q3
"""

# %%
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(10)

N_BLOCKS, MAX_NEIGHBOURS, HISTORY = 300, 8, 12
occupancy = torch.rand(N_BLOCKS, HISTORY + 1)
n_neigh = torch.randint(1, MAX_NEIGHBOURS, (N_BLOCKS,))
neighbour_ids = torch.randint(0, N_BLOCKS, (N_BLOCKS, MAX_NEIGHBOURS))
lot_mask = torch.arange(MAX_NEIGHBOURS)[None, :] <= n_neigh[:, None]
neighbour_ids = neighbour_ids.masked_fill(~lot_mask, 0)
neighbour_ids[:, 0] = torch.arange(N_BLOCKS)
target = 0.5 * occupancy[:, -1] + 0.5 * (occupancy[neighbour_ids, -2] * lot_mask).sum(1) / lot_mask.sum(1)

# %%
class BlockForecaster(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.enc = nn.GRU(1, d, batch_first=True)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(2 * d, 1)

    def forward(self, histories, lot_mask):
        b, m, t = histories.shape
        _, h = self.enc(histories.reshape(b * m, t, 1))
        h = h[-1].view(b, m, -1)
        keep = lot_mask.float()[:, None, :]

        def attend(q, k, v):
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            return torch.softmax(scores.masked_fill(keep == 0, float("-inf")), dim=-1) @ v

        ctx = attend(self.q(h[:, :1]), self.k(h), self.v(h)).squeeze(1)
        return torch.sigmoid(self.out(torch.cat([h[:, 0], ctx], -1))).squeeze(-1)


def block_histories(ids):
    hist = occupancy[neighbour_ids[ids], :HISTORY].clone()
    hist[:, 0] = occupancy[ids, 1:]
    return hist


model = BlockForecaster()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
train_ids, test_ids = torch.arange(240), torch.arange(240, N_BLOCKS)

# %%
for epoch in range(60):
    pred = model(block_histories(train_ids), lot_mask[train_ids])
    loss = F.mse_loss(pred, target[train_ids])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("train MSE", loss.item())

# %%
with torch.no_grad():
    pred = model(block_histories(test_ids), lot_mask[test_ids])
print("test MAE", (pred - target[test_ids]).abs().mean().item())
