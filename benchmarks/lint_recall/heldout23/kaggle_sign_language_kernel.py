"""Kaggle kernel, "Google - Isolated Sign Language Recognition": landmark-sequence transformer.

A competition notebook in one script: CFG, the hand-landmark preprocessing (NaN frames to 0),
a Dataset of variable-length clips, a collate that pads the frames and returns a 0/1
`frame_mask`, a small transformer encoder on F.scaled_dot_product_attention with masked mean
pooling, the training loop and a TTA-free inference step. Synthetic clips stand in for the
parquet files.

Source: pytorch/pytorch#103963, huggingface/transformers#32195 and #46458, conventions.md
section 2.9 and tools.md P1 (a float 0/1 keep-mask given to SDPA is added to the scores and
masks nothing).
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class CFG:
    seed = 7
    max_frames = 32
    n_landmarks = 42  # left + right hand
    d_model = 64
    n_heads = 4
    n_layers = 2
    n_classes = 10
    drop_rate = 0.1
    batch_size = 8
    epochs = 4
    lr = 2e-3


def preprocess(frames):
    """frames: (T, 543, 3) landmarks -> (T, 84) hand x/y, NaN to 0, at most max_frames frames."""
    hands = torch.cat([frames[:, 468:489, :2], frames[:, 522:543, :2]], dim=1)
    hands = torch.nan_to_num(hands, nan=0.0)
    return hands.flatten(1)[: CFG.max_frames]


class SignDataset(Dataset):
    def __init__(self, n, gen):
        self.items = []
        for _ in range(n):
            label = int(torch.randint(0, CFG.n_classes, (1,), generator=gen))
            T = int(torch.randint(6, 40, (1,), generator=gen))
            frames = torch.randn(T, 543, 3, generator=gen) * 0.1 + label / CFG.n_classes
            frames[torch.rand(T, generator=gen) < 0.2] = float("nan")  # hand not detected
            self.items.append((preprocess(frames), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    T = max(len(x) for x, _ in batch)
    x = torch.zeros(len(batch), T, 2 * CFG.n_landmarks)
    frame_mask = torch.zeros(len(batch), T)
    for i, (seq, _) in enumerate(batch):
        x[i, : len(seq)] = seq
        frame_mask[i, : len(seq)] = 1.0
    return x, frame_mask, torch.tensor([y for _, y in batch])


class MHSA(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p = h, p
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, frame_mask):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        attn_mask = frame_mask[:, None, None, :]  # expect: MC508 collate
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.p if self.training else 0.0)  # also: MC508
        return self.proj(out.transpose(1, 2).reshape(B, T, D))


class EncoderBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(CFG.d_model), nn.LayerNorm(CFG.d_model)
        self.attn = MHSA(CFG.d_model, CFG.n_heads, CFG.drop_rate)
        self.ffn = nn.Sequential(nn.Linear(CFG.d_model, 2 * CFG.d_model), nn.SiLU(), nn.Linear(2 * CFG.d_model, CFG.d_model))

    def forward(self, x, frame_mask):
        x = x + self.attn(self.ln1(x), frame_mask)
        return x + self.ffn(self.ln2(x))


class SignModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(2 * CFG.n_landmarks, CFG.d_model)
        self.pos = nn.Parameter(torch.randn(CFG.max_frames, CFG.d_model) / math.sqrt(CFG.d_model))
        self.blocks = nn.ModuleList([EncoderBlock() for _ in range(CFG.n_layers)])
        self.head = nn.Sequential(nn.Dropout(CFG.drop_rate), nn.Linear(CFG.d_model, CFG.n_classes))

    def forward(self, x, frame_mask):
        x = self.embed(x) + self.pos[: x.shape[1]]
        for blk in self.blocks:
            x = blk(x, frame_mask)
        m = frame_mask.unsqueeze(-1)
        return self.head((x * m).sum(1) / m.sum(1))


if __name__ == "__main__":
    random.seed(CFG.seed)
    gen = torch.Generator().manual_seed(CFG.seed)
    torch.manual_seed(CFG.seed)
    train_loader = DataLoader(SignDataset(64, gen), batch_size=CFG.batch_size, shuffle=True, collate_fn=collate)
    model = SignModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    for epoch in range(CFG.epochs):
        model.train()
        for x, frame_mask, y in train_loader:
            loss = F.cross_entropy(model(x, frame_mask), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    model.eval()
    test = SignDataset(3, torch.Generator().manual_seed(1))
    with torch.no_grad():
        batched = model(*collate([test[i] for i in range(3)])[:2])
        alone = torch.cat([model(*collate([test[i]])[:2]) for i in range(3)])
    print("batched vs alone, max |diff| (expect ~1e-6):", (batched - alone).abs().max().item())
