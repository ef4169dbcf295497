"""End-to-end speaker diarization for recorded contact-centre calls, compiled with TorchScript.

An EEND-style encoder reads subsampled log-mel frames of a two-channel-mixed call chunk and
predicts, per frame, whether the agent and the customer are speaking. Chunks of a call queue
differ in length and are padded into batches; the permutation-free loss ignores the padded
frames. The attention is written as TorchScript functions so the whole model can be scripted
and loaded by the C++ transcription workers.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5), Biohub/esm#299 (item 22), §2.3
"""

import argparse
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

N_SPEAKERS = 2


@torch.jit.script
def frame_keep_mask(lengths: Tensor, max_len: int) -> Tensor:
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


@torch.jit.script
def masked_attention(q: Tensor, k: Tensor, v: Tensor, frame_keep: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~frame_keep[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, frame_keep: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        ctx = masked_attention(qkv[0], qkv[1], qkv[2], frame_keep)
        x = self.norm1(x + self.drop(self.proj(ctx.transpose(1, 2).reshape(b, t, d))))
        return self.norm2(x + self.drop(self.ff(x)))


class CallDiarizer(nn.Module):
    def __init__(self, n_mels: int = 40, dim: int = 128, heads: int = 4, layers: int = 3, dropout: float = 0.1):
        super().__init__()
        self.subsample = nn.Conv1d(n_mels, dim, kernel_size=5, stride=2, padding=2)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads, dropout) for _ in range(layers)])
        self.activity = nn.Linear(dim, N_SPEAKERS)

    def forward(self, feats: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        x = self.subsample(feats.transpose(1, 2)).transpose(1, 2)
        sub_lengths = torch.div(lengths + 1, 2, rounding_mode="floor")
        keep = frame_keep_mask(sub_lengths, x.size(1))
        if not torch.jit.is_scripting():
            assert bool(keep[:, 0].all()), "empty chunk in batch"
        for layer in self.layers:
            x = layer(x, keep)
        return self.activity(x), keep


def pit_loss(logits: Tensor, labels: Tensor, keep: Tensor) -> Tensor:
    weight = keep.unsqueeze(-1).to(logits.dtype)
    losses = []
    for perm in ([0, 1], [1, 0]):
        bce = F.binary_cross_entropy_with_logits(logits, labels[..., perm], reduction="none")
        losses.append((bce * weight).sum(dim=(1, 2)) / weight.sum(dim=(1, 2)))
    return torch.stack(losses, dim=1).min(dim=1).values.mean()


def simulate_calls(n: int, n_mels: int = 40, generator: Optional[torch.Generator] = None):
    calls: List[Tuple[Tensor, Tensor]] = []
    for _ in range(n):
        frames = int(torch.randint(60, 200, (1,), generator=generator))
        turns = torch.randint(0, 3, (frames // 10 + 1,), generator=generator).repeat_interleave(10)[:frames]
        labels = torch.stack([turns == 1, turns == 2], dim=-1).float()
        timbre = torch.randn(N_SPEAKERS, n_mels, generator=generator)
        feats = labels @ timbre + 0.5 * torch.randn(frames, n_mels, generator=generator)
        calls.append((feats, labels))
    return calls


def collate(calls: List[Tuple[Tensor, Tensor]]):
    lengths = torch.tensor([c[0].size(0) for c in calls])
    feats = nn.utils.rnn.pad_sequence([c[0] for c in calls], batch_first=True)
    labels = nn.utils.rnn.pad_sequence([c[1] for c in calls], batch_first=True)
    labels = labels[:, ::2][:, : (feats.size(1) + 1) // 2]
    return {"feats": feats, "lengths": lengths, "labels": labels}


def train(model: CallDiarizer, calls, steps: int, batch_size: int = 8, lr: float = 1e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(steps):
        idx = torch.randint(0, len(calls), (batch_size,)).tolist()
        batch = collate([calls[i] for i in idx])
        logits, keep = model(batch["feats"], batch["lengths"])
        loss = pit_loss(logits, batch["labels"], keep)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    return loss.item()


@torch.no_grad()
def diarization_error(model: CallDiarizer, calls) -> float:
    model.eval()
    batch = collate(calls)
    logits, keep = model(batch["feats"], batch["lengths"])
    pred = logits.sigmoid() > 0.5
    ref = batch["labels"].bool()
    err = torch.minimum((pred != ref).sum(-1), (pred != ref.flip(-1)).sum(-1))
    return (err * keep).sum().item() / max(1, int((ref.sum(-1) * keep).sum()))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default="diarizer_ts.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = CallDiarizer()
    loss = train(model, simulate_calls(256, generator=gen), args.steps)
    der = diarization_error(model, simulate_calls(32, generator=gen))
    scripted = torch.jit.script(model.eval())
    scripted.save(args.out)
    print(f"loss {loss:.3f}  DER {der:.3f}  saved {args.out}")


if __name__ == "__main__":
    main()
