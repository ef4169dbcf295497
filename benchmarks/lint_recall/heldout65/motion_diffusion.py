"""
Human Motion Diffusion Model (MDM, Tevet et al., 2023) with the per-token text
cross-attention of later text-to-motion work: a transformer denoiser that
predicts the clean pose sequence from a noised one, a prepended timestep token,
classifier-free guidance by dropping the caption, and variable-length motions
padded to the longest clip.

Source: huggingface/transformers PR #27114 (conventions.md §3 item 15); NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 item 16); conventions.md §2.3, §5 item 4
"""

import math
import zlib
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor


def exists(val):
    return val is not None


def prob_mask_like(shape, prob, device):
    if prob == 1:
        return torch.ones(shape, device=device, dtype=torch.bool)
    elif prob == 0:
        return torch.zeros(shape, device=device, dtype=torch.bool)
    return torch.zeros(shape, device=device).uniform_(0, 1) < prob


def tokenize(texts: List[str], pad_id: int = 0, vocab_size: int = 500) -> Tensor:
    ids = [[1 + zlib.crc32(word.encode()) % (vocab_size - 1) for word in text.split()] for text in texts]
    longest = max(1, max(map(len, ids)))
    return torch.tensor([seq + [pad_id] * (longest - len(seq)) for seq in ids])


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        self.dim, self.theta = dim, theta

    def forward(self, t):
        half_dim = self.dim // 2
        emb = torch.exp(torch.arange(half_dim, device=t.device) * -(math.log(self.theta) / (half_dim - 1)))
        emb = t.float()[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, key_keep):
        b, n, _ = x.shape
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.view(b, n, self.heads, -1).transpose(1, 2), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep[:, None, None, :])
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class CrossAttention(nn.Module):
    def __init__(self, dim, dim_context, heads=4, dim_head=16):
        super().__init__()
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_kv = nn.Linear(dim_context, heads * dim_head * 2, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim)

    def forward(self, x, context, context_bias):
        b, n, _ = x.shape
        q, k, v = (self.to_q(self.norm(x)), *self.to_kv(context).chunk(2, dim=-1))
        q, k, v = map(lambda t: t.view(b, t.shape[1], self.heads, -1).transpose(1, 2), (q, k, v))
        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = (sim + context_bias).softmax(dim=-1)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class MotionDenoiser(nn.Module):
    def __init__(self, *, dim_pose=12, dim=32, depth=2, heads=4, text_vocab=500, dim_text=24, max_frames=64, cond_drop_prob=0.1, pad_id=0):
        super().__init__()
        self.cond_drop_prob = cond_drop_prob
        self.pad_id = pad_id
        self.text_emb = nn.Embedding(text_vocab, dim_text)
        self.text_encoder = SelfAttention(dim_text, heads=2)
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, dim * 4), nn.SiLU(), nn.Linear(dim * 4, dim))
        self.pose_in = nn.Linear(dim_pose, dim)
        self.pos_emb = nn.Embedding(max_frames + 1, dim)
        self.layers = nn.ModuleList([nn.ModuleList([
            SelfAttention(dim, heads),
            CrossAttention(dim, dim_text, heads),
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        ]) for _ in range(depth)])
        self.pose_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim_pose))

    def forward(self, motion: Tensor, times: Tensor, text_ids: Tensor, frames_keep: Tensor, cond_drop_prob: Optional[float] = None) -> Tensor:
        b, n, _ = motion.shape
        cond_drop_prob = cond_drop_prob if exists(cond_drop_prob) else self.cond_drop_prob

        text_keep = text_ids != self.pad_id
        context = self.text_emb(text_ids)
        context = self.text_encoder(context, key_keep=text_keep) + context

        min_value = torch.finfo(context.dtype).min
        drop = prob_mask_like((b,), cond_drop_prob, motion.device)
        text_bias = torch.zeros(text_keep.shape, dtype=context.dtype, device=context.device).masked_fill(~text_keep, min_value)[:, None, None, :]
        drop_bias = torch.zeros((b,), dtype=context.dtype, device=context.device).masked_fill(drop, min_value)[:, None, None, None]
        context_bias = text_bias + drop_bias  # expect: MC513 sum

        x = torch.cat((self.time_mlp(times)[:, None], self.pose_in(motion)), dim=1)
        x = x + self.pos_emb(torch.arange(n + 1, device=motion.device))
        key_keep = F.pad(frames_keep, (1, 0), value=True)

        for self_attn, cross_attn, ff in self.layers:
            x = self_attn(x, key_keep=key_keep) + x
            x = cross_attn(x, context, context_bias=context_bias) + x
            x = ff(x) + x
        return self.pose_out(x[:, 1:])

    @torch.no_grad()
    def forward_with_cond_scale(self, *args, cond_scale=2.5, **kwargs):
        cond = self.forward(*args, cond_drop_prob=0., **kwargs)
        null = self.forward(*args, cond_drop_prob=1., **kwargs)
        return null + (cond - null) * cond_scale


def masked_mse(pred, target, keep):
    loss = ((pred - target) ** 2).mean(dim=-1)
    return (loss * keep).sum() / keep.sum().clamp(min=1)


if __name__ == '__main__':
    torch.manual_seed(0)
    timesteps = 100
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, timesteps), dim=0)
    model = MotionDenoiser()

    captions = ['a person walks forward then turns left', 'someone jumps', 'a man waves with both hands slowly']
    lengths = torch.tensor([20, 12, 16])
    text_ids = tokenize(captions)
    frames_keep = torch.arange(20)[None, :] < lengths[:, None]
    motion = torch.randn(3, 20, 12) * frames_keep[..., None]

    t = torch.randint(0, timesteps, (3,))
    a = alphas_cumprod[t][:, None, None]
    noised = a.sqrt() * motion + (1 - a).sqrt() * torch.randn_like(motion)
    loss = masked_mse(model(noised, t, text_ids, frames_keep), motion, frames_keep)
    loss.backward()

    prompts = ['a person walks forward then turns left', '']
    guided = model.forward_with_cond_scale(torch.randn(2, 20, 12), torch.full((2,), 50), tokenize(prompts), torch.ones(2, 20, dtype=torch.bool))
    print('loss', round(loss.item(), 4), 'guided finite per sample', guided.isfinite().flatten(1).all(dim=-1).tolist())
