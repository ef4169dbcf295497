"""
Zorro, "the masked multimodal transformer" (Recasens et al., 2023): audio and
video tokens only attend within their own modality, fusion tokens attend to
everything, and learned return tokens pool one embedding per modality. Audio
clips of different durations are padded along the spectrogram's time axis.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5); Biohub/esm#299 (conventions.md §3 item 22); conventions.md §2.3
"""

import math
import re
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn, einsum


class TokenTypes(Enum):
    AUDIO = 0
    VIDEO = 1
    FUSION = 2
    GLOBAL = 3


def exists(val):
    return val is not None


def default(*args):
    for arg in args:
        if exists(arg):
            return arg
    return None


def rearrange(t, pattern, **sizes):
    left, right = ([g.split() if g else ([] if s == '1' else [s]) for g, s in re.findall(r'\(([^)]*)\)|(\S+)', side)] for side in pattern.split('->'))
    for group, dim in zip(left, t.shape):
        unknown = [name for name in group if name not in sizes]
        if unknown:
            sizes[unknown[0]] = dim // math.prod(sizes[name] for name in group if name in sizes)
    names = [name for group in left for name in group]
    t = t.reshape(*[sizes[name] for name in names]).permute(*[names.index(name) for group in right for name in group])
    return t.reshape(*[math.prod(sizes[name] for name in group) for group in right])


class GEGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


def FeedForward(dim, mult=4):
    inner_dim = int(dim * mult * 2 / 3)
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, inner_dim * 2, bias=False), GEGLU(), nn.Linear(inner_dim, dim, bias=False))


class Attention(nn.Module):
    def __init__(self, dim, dim_head=64, heads=8):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        inner_dim = dim_head * heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x, context=None, attn_mask=None, mask=None):
        x = self.norm(x)
        kv_x = default(context, x)
        q, k, v = (self.to_q(x), *self.to_kv(kv_x).chunk(2, dim=-1))
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=self.heads), (q, k, v))

        sim = einsum('b h i d, b h j d -> b h i j', q * self.scale, k)

        if exists(context):
            sim = sim.masked_fill(~(attn_mask & mask[:, None, None, :]), float('-inf'))
        else:
            sim = sim.masked_fill(~(attn_mask & mask[:, None, None, :]), float('-inf'))

        attn = sim.softmax(dim=-1)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        return self.to_out(rearrange(out, 'b h n d -> b n (h d)'))


class Zorro(nn.Module):
    def __init__(self, *, dim, depth, dim_head=32, heads=4, ff_mult=4, num_fusion_tokens=8, audio_patch_size=(8, 4), video_patch_size=(2, 8, 8), video_channels=3, return_token_types=(TokenTypes.AUDIO, TokenTypes.VIDEO, TokenTypes.FUSION, TokenTypes.GLOBAL)):
        super().__init__()
        self.audio_patch_size = audio_patch_size
        self.audio_to_tokens = nn.Conv2d(1, dim, kernel_size=audio_patch_size, stride=audio_patch_size)
        self.video_to_tokens = nn.Conv3d(video_channels, dim, kernel_size=video_patch_size, stride=video_patch_size)
        self.fusion_tokens = nn.Parameter(torch.randn(num_fusion_tokens, dim))

        self.return_token_types = return_token_types
        self.register_buffer('return_token_types_tensor', torch.tensor([t.value for t in return_token_types]), persistent=False)
        self.return_tokens = nn.Parameter(torch.randn(len(return_token_types), dim))
        self.attn_pool = Attention(dim=dim, dim_head=dim_head, heads=heads)

        self.layers = nn.ModuleList([nn.ModuleList([Attention(dim=dim, dim_head=dim_head, heads=heads), FeedForward(dim, ff_mult)]) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, *, audio, video, audio_lengths=None):
        b, device = audio.shape[0], audio.device

        audio_tokens = self.audio_to_tokens(audio[:, None])
        audio_time_patches = audio_tokens.shape[-1]
        audio_tokens = rearrange(audio_tokens, 'b d f t -> b (f t) d')
        video_tokens = rearrange(self.video_to_tokens(video), 'b d t h w -> b (t h w) d')
        fusion_tokens = self.fusion_tokens.expand(b, -1, -1)

        audio_keep = torch.ones((b, audio_time_patches), dtype=torch.bool, device=device)
        if exists(audio_lengths):
            num_patches = (audio_lengths + self.audio_patch_size[1] - 1) // self.audio_patch_size[1]
            audio_keep = torch.arange(audio_time_patches, device=device)[None, :] < num_patches[:, None]
        audio_keep = audio_keep[:, None, :].expand(-1, audio_tokens.shape[1] // audio_time_patches, -1).reshape(b, -1)

        tokens = torch.cat((audio_tokens, video_tokens, fusion_tokens), dim=1)
        mask = F.pad(audio_keep, (0, video_tokens.shape[1] + fusion_tokens.shape[1]), value=True)

        token_types = torch.tensor(
            [TokenTypes.AUDIO.value] * audio_tokens.shape[1] + [TokenTypes.VIDEO.value] * video_tokens.shape[1] + [TokenTypes.FUSION.value] * fusion_tokens.shape[1],
            device=device
        )
        token_types_attend_from, token_types_attend_to = token_types[:, None], token_types[None, :]
        zorro_mask = (token_types_attend_from == token_types_attend_to) | (token_types_attend_from == TokenTypes.FUSION.value)

        for attn, ff in self.layers:
            tokens = attn(tokens, attn_mask=zorro_mask, mask=mask) + tokens
            tokens = ff(tokens) + tokens
        tokens = self.norm(tokens)

        return_types = self.return_token_types_tensor[:, None]
        pool_mask = (return_types == token_types[None, :]) | (return_types == TokenTypes.GLOBAL.value)
        return_tokens = self.return_tokens.expand(b, -1, -1)
        pooled = self.attn_pool(return_tokens, context=tokens, attn_mask=pool_mask, mask=mask) + return_tokens
        return pooled


if __name__ == '__main__':
    torch.manual_seed(0)
    model = Zorro(dim=32, depth=2)
    audio = torch.randn(2, 32, 24)
    audio_lengths = torch.tensor([24, 13])
    audio[1, :, 13:] = 0.
    video = torch.randn(2, 3, 4, 16, 16)
    pooled = model(audio=audio, video=video, audio_lengths=audio_lengths)
    audio_emb, video_emb, fusion_emb, global_emb = pooled.unbind(dim=1)
    logits = F.normalize(audio_emb, dim=-1) @ F.normalize(video_emb, dim=-1).t() / 0.07
    loss = (F.cross_entropy(logits, torch.arange(2)) + F.cross_entropy(logits.t(), torch.arange(2))) / 2
    loss.backward()
    print('pooled', tuple(pooled.shape), 'loss', round(loss.item(), 4), 'finite', bool(pooled.isfinite().all()))
