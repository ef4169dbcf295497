"""Audio event tagger over log-mel spectrograms of clips with different durations.

A strided conv front end turns mel frames into tokens; the tagger computes the token lengths,
builds an additive key bias (0 for real tokens, -inf for padding) once, and passes it through
the encoder to the attention of every block. Clip-level tags come from a masked mean.

Source: self_attention_mask_guide.txt §3 common mistakes and Q3 (seed)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, frame_bias):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        scores = scores + frame_bias
        return self.proj(torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, frame_bias):
        x = x + self.attn(self.norm1(x), frame_bias)
        return x + self.ff(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self, dim, heads, depth):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))

    def forward(self, x, frame_bias):
        for block in self.blocks:
            x = block(x, frame_bias)
        return x


class AudioTagger(nn.Module):
    def __init__(self, n_mels=32, dim=48, heads=4, depth=2, num_tags=5):
        super().__init__()
        self.frontend = nn.Sequential(nn.Conv1d(n_mels, dim, 3, stride=2, padding=1), nn.GELU(),
                                      nn.Conv1d(dim, dim, 3, stride=2, padding=1), nn.GELU())
        self.encoder = Encoder(dim, heads, depth)
        self.classifier = nn.Linear(dim, num_tags)

    def forward(self, mels, mel_lengths):
        x = self.frontend(mels).transpose(1, 2)
        lengths = ((mel_lengths - 1) // 2 + 1 - 1) // 2 + 1
        valid = torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]
        frame_bias = torch.zeros(valid.shape, device=x.device).masked_fill(~valid, float("-inf"))
        h = self.encoder(x, frame_bias[:, None, None, :])
        pooled = (h * valid[..., None]).sum(1) / lengths[:, None]
        return self.classifier(pooled)


if __name__ == "__main__":
    torch.manual_seed(0)
    mel_lengths = torch.tensor([100, 64, 37, 80])
    mels = torch.randn(4, 32, 100)
    for i, n in enumerate(mel_lengths.tolist()):
        mels[i, :, n:] = 0.0
    tags = (torch.rand(4, 5) < 0.3).float()
    model = AudioTagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = F.binary_cross_entropy_with_logits(model(mels, mel_lengths), tags)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
