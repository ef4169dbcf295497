"""Mixed-precision training loop for a padded-sequence tagger (torch.autocast + GradScaler).

The usual AMP recipe: forward and loss under `torch.autocast(device_type, dtype=torch.float16)`,
`scaler.scale(loss).backward()`, `scaler.step(opt)`, `scaler.update()`. AMP is switched on
when a GPU is present; on a CPU-only machine the same loop runs in float32.

Source: huggingface/lerobot PR #710, conventions.md §2.3 and §3 item 19
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
USE_AMP = DEVICE == "cuda"
PAD, N_TAGS = 0, 5


def masked_attention(q, k, v, key_pad):
    scores = q @ k.transpose(-2, -1) * q.size(-1) ** -0.5
    scores = scores.masked_fill(key_pad[:, None, None, :], torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) @ v


class Tagger(nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.cls = nn.Linear(dim, N_TAGS)

    def forward(self, ids):
        b, t = ids.shape
        x = self.emb(ids)
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = masked_attention(q, k, v, ids == PAD).transpose(1, 2).reshape(b, t, -1)
        return self.cls(x + self.proj(y))


def make_batch(gen, b=8, t=10):
    lengths = torch.randint(3, t + 1, (b,), generator=gen)
    ids = torch.randint(1, 50, (b, t), generator=gen)
    ids[torch.arange(t)[None, :] >= lengths[:, None]] = PAD
    tags = torch.where(ids == PAD, -100, ids % N_TAGS)
    return ids.to(DEVICE), tags.to(DEVICE)


def train(steps=15):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = Tagger().to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler(DEVICE, enabled=USE_AMP)
    for step in range(steps):
        ids, tags = make_batch(gen)
        with torch.autocast(device_type=DEVICE, dtype=torch.float16, enabled=USE_AMP):
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, N_TAGS).float(), tags.reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if step % 5 == 0 or step == steps - 1:
            print(f"step {step:2d} loss {loss.item():.4f} scale {scaler.get_scale() if USE_AMP else 1.0}")
    return model


if __name__ == "__main__":
    print("device", DEVICE, "amp", USE_AMP)
    train()
