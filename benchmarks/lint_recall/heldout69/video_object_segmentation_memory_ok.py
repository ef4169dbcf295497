"""STCN-style semi-supervised video object segmentation with a space-time
memory.

The first frame's annotation is encoded into the memory; every following frame
reads the memory through an L2 affinity between its key and the memory keys,
with top-k filtering, decodes one mask per object and is written back to the
memory every few frames. The memory bank is preallocated with a fixed number
of frame slots, and the clips of a batch have different lengths, so every slot
carries a keep mask.

Source: seed masked_fill_inplace.txt (区别; 总结 point 1); conventions.md
section 1 (nn.MultiheadAttention row).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_affinity(mk, qk):
    ck = mk.shape[1]
    a_sq = mk.pow(2).sum(1).unsqueeze(2)
    ab = mk.transpose(1, 2) @ qk
    return (2 * ab - a_sq) / math.sqrt(ck)


def softmax_w_top(x, top):
    values, indices = torch.topk(x, k=top, dim=1)
    x_exp = (values - values[:, :1]).exp()
    x_exp = x_exp / x_exp.sum(dim=1, keepdim=True)
    return torch.zeros_like(x).scatter_(1, indices, x_exp)


class MemoryReader(nn.Module):
    def __init__(self, top_k=20):
        super().__init__()
        self.top_k = top_k

    def forward(self, mk, mv, qk, mem_keep):
        affinity = get_affinity(mk, qk)
        affinity = affinity.masked_fill(~mem_keep[:, :, None], float("-inf"))
        weights = softmax_w_top(affinity, top=min(self.top_k, affinity.shape[1]))
        b, no, cv, thw = mv.shape
        readout = torch.bmm(mv.reshape(b, no * cv, thw), weights)
        return readout.view(b, no, cv, -1)


class STCN(nn.Module):
    def __init__(self, key_dim=16, value_dim=32, stride=8, top_k=20):
        super().__init__()
        self.stride = stride
        self.key_encoder = nn.Sequential(nn.Conv2d(3, 32, stride, stride), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
        self.key_proj = nn.Conv2d(32, key_dim, 3, padding=1)
        self.value_encoder = nn.Sequential(
            nn.Conv2d(5, 32, stride, stride), nn.ReLU(), nn.Conv2d(32, value_dim, 3, padding=1),
        )
        self.reader = MemoryReader(top_k)
        self.decoder = nn.Sequential(
            nn.Conv2d(value_dim + 32, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 1, 3, padding=1),
        )

    def encode_key(self, frame):
        f = self.key_encoder(frame)
        return self.key_proj(f), f

    def encode_value(self, frame, masks, obj_keep):
        others = (masks.sum(1, keepdim=True) - masks).clamp(0, 1)
        values = [self.value_encoder(torch.cat([frame, masks[:, i:i + 1], others[:, i:i + 1]], 1))
                  for i in range(masks.shape[1])]
        return torch.stack(values, 1) * obj_keep[:, :, None, None, None]

    def segment(self, qk, qf, memory, obj_keep, out_size):
        mk, mv, mem_keep = memory["keys"], memory["values"], memory["keep"]
        readout = self.reader(mk, mv, qk.flatten(2), mem_keep)
        b, no, cv, _ = readout.shape
        h, w = qk.shape[-2:]
        readout = readout.view(b * no, cv, h, w)
        feats = qf.repeat_interleave(no, dim=0)
        logits = self.decoder(torch.cat([readout, feats], 1)).view(b, no, h, w)
        logits = F.interpolate(logits, size=out_size, mode="bilinear", align_corners=False)
        return aggregate(logits, obj_keep)


def aggregate(logits, obj_keep):
    bg = torch.zeros_like(logits[:, :1])
    logits = logits.masked_fill(~obj_keep[:, :, None, None], float("-inf"))
    return torch.cat([bg, logits], 1).softmax(dim=1)


class MemoryBank:
    def __init__(self, b, num_objects, hw, capacity=3, key_dim=16, value_dim=32):
        self.hw, self.capacity, self.ptr = hw, capacity, 0
        self.keys = torch.zeros(b, key_dim, capacity * hw)
        self.values = torch.zeros(b, num_objects, value_dim, capacity * hw)
        self.keep = torch.zeros(b, capacity * hw, dtype=torch.bool)

    def as_dict(self):
        return {"keys": self.keys, "values": self.values, "keep": self.keep}

    def write(self, key, value, valid):
        slot = slice(self.ptr * self.hw, (self.ptr + 1) * self.hw)
        self.keys[:, :, slot] = key.flatten(2)
        self.values[..., slot] = value.flatten(3)
        self.keep[:, slot] = valid[:, None]
        self.ptr = self.ptr + 1 if self.ptr + 1 < self.capacity else 1


@torch.no_grad()
def propagate(model, video, first_masks, obj_keep, frame_valid, mem_every=2, capacity=3):
    b, t, _, h, w = video.shape
    probs = first_masks
    outputs = [torch.cat([1 - first_masks.sum(1, keepdim=True).clamp(0, 1), first_masks], 1)]
    bank = None
    for ti in range(t):
        qk, qf = model.encode_key(video[:, ti])
        if bank is None:
            bank = MemoryBank(b, first_masks.shape[1], qk.shape[-2] * qk.shape[-1], capacity)
        else:
            out = model.segment(qk, qf, bank.as_dict(), obj_keep, (h, w))
            outputs.append(out * frame_valid[:, ti, None, None, None])
            probs = out[:, 1:]
        if ti % mem_every == 0:
            bank.write(qk, model.encode_value(video[:, ti], probs, obj_keep), frame_valid[:, ti])
    return torch.stack(outputs, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    video = torch.randn(2, 5, 3, 64, 64)
    frame_valid = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    video = video * frame_valid[:, :, None, None, None]
    first_masks = torch.zeros(2, 2, 64, 64)
    first_masks[0, 0, 10:30, 10:30], first_masks[0, 1, 40:60, 30:50] = 1.0, 1.0
    first_masks[1, 0, 20:50, 20:40] = 1.0
    obj_keep = torch.tensor([[True, True], [True, False]])
    model = STCN().eval()
    out = propagate(model, video, first_masks, obj_keep, frame_valid)
    print("outputs", tuple(out.shape), "finite", bool(torch.isfinite(out).all()))
