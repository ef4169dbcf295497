"""
Flamingo-style perceiver resampler and gated cross-attention over interleaved
video / text, after Alayrac et al., 2022. Clips have a variable number of frames,
padded to the longest clip in the batch.

Source: conventions.md §1 (direction cheat-sheet), §5 item 1; rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); seed self_attention_mask_guide.txt §2
"""

import math
import re

import torch
import torch.nn.functional as F
from torch import nn, einsum


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def rearrange(t, pattern, **sizes):
    left, right = ([g.split() if g else ([] if s == '1' else [s]) for g, s in re.findall(r'\(([^)]*)\)|(\S+)', side)] for side in pattern.split('->'))
    for group, dim in zip(left, t.shape):
        unknown = [name for name in group if name not in sizes]
        if unknown:
            sizes[unknown[0]] = dim // math.prod(sizes[name] for name in group if name in sizes)
    names = [name for group in left for name in group]
    t = t.reshape(*[sizes[name] for name in names]).permute(*[names.index(name) for group in right for name in group])
    return t.reshape(*[math.prod(sizes[name] for name in group) for group in right])


def FeedForward(dim, mult=4):
    inner_dim = int(dim * mult)
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, inner_dim, bias=False), nn.GELU(), nn.Linear(inner_dim, dim, bias=False))


class PerceiverAttention(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8):
        super().__init__()
        self.heads = heads
        inner_dim = dim_head * heads
        self.norm_media = nn.LayerNorm(dim)
        self.norm_latents = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x, latents, key_padding_mask):
        x = self.norm_media(x)
        latents = self.norm_latents(latents)

        q = self.to_q(latents)
        k, v = self.to_kv(torch.cat((x, latents), dim=-2)).chunk(2, dim=-1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=self.heads), (q, k, v))

        key_padding_mask = F.pad(key_padding_mask, (0, latents.shape[-2]), value=False)
        key_padding_mask = rearrange(key_padding_mask, 'b j -> b 1 1 j')

        out = F.scaled_dot_product_attention(q, k, v, attn_mask=~key_padding_mask)
        return self.to_out(rearrange(out, 'b h n d -> b n (h d)'))


class PerceiverResampler(nn.Module):
    def __init__(self, *, dim, depth, dim_head=64, heads=8, num_latents=16, max_num_frames=8, ff_mult=4):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, dim))
        self.frame_embs = nn.Parameter(torch.randn(max_num_frames, dim))
        self.layers = nn.ModuleList([
            nn.ModuleList([PerceiverAttention(dim=dim, dim_head=dim_head, heads=heads), FeedForward(dim, ff_mult)])
            for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)

    def forward(self, media, frame_mask=None):
        b, m, f, v, _ = media.shape
        frame_mask = default(frame_mask, torch.ones((b, m, f), dtype=torch.bool, device=media.device))

        media = media + self.frame_embs[:f, None]
        x = rearrange(media, 'b m f v d -> (b m) (f v) d')
        padding = rearrange(~frame_mask[..., None].expand(-1, -1, -1, v), 'b m f v -> (b m) (f v)')

        latents = self.latents.expand(b * m, -1, -1)
        for attn, ff in self.layers:
            latents = attn(x, latents, key_padding_mask=padding) + latents
            latents = ff(latents) + latents
        return rearrange(self.norm(latents), '(b m) n d -> b m n d', b=b)


class MaskedCrossAttention(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8, only_attend_immediate_media=True):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        inner_dim = dim_head * heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)
        self.only_attend_immediate_media = only_attend_immediate_media

    def forward(self, x, media, media_locations=None):
        b, t, n = media.shape[:3]
        x = self.norm(x)
        q = self.to_q(x)
        k, v = self.to_kv(rearrange(media, 'b t n d -> b (t n) d')).chunk(2, dim=-1)
        q, k, v = map(lambda z: rearrange(z, 'b n (h d) -> b h n d', h=self.heads), (q, k, v))

        sim = einsum('b h i d, b h j d -> b h i j', q * self.scale, k)

        if exists(media_locations):
            text_time = media_locations.cumsum(dim=-1)
            media_time = (torch.arange(t, device=x.device) + 1).repeat_interleave(n)
            mask_op = torch.eq if self.only_attend_immediate_media else torch.ge
            text_to_media_mask = mask_op(text_time[:, None, :, None], media_time[None, None, None, :])
            sim = sim.masked_fill(~text_to_media_mask, -torch.finfo(sim.dtype).max)

        attn = sim.softmax(dim=-1)

        if exists(media_locations) and self.only_attend_immediate_media:
            text_without_media_mask = rearrange(text_time == 0, 'b i -> b 1 i 1')
            attn = attn.masked_fill(text_without_media_mask, 0.)

        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        return self.to_out(rearrange(out, 'b h n d -> b n (h d)'))


class GatedCrossAttentionBlock(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8, ff_mult=4, only_attend_immediate_media=True):
        super().__init__()
        self.attn = MaskedCrossAttention(dim=dim, dim_head=dim_head, heads=heads, only_attend_immediate_media=only_attend_immediate_media)
        self.attn_gate = nn.Parameter(torch.tensor([0.]))
        self.ff = FeedForward(dim, mult=ff_mult)
        self.ff_gate = nn.Parameter(torch.tensor([0.]))

    def forward(self, x, media, media_locations=None):
        x = self.attn(x, media, media_locations=media_locations) * self.attn_gate.tanh() + x
        return self.ff(x) * self.ff_gate.tanh() + x


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=self.heads), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.to_out(rearrange(out, 'b h n d -> b n (h d)'))


class FlamingoLM(nn.Module):
    def __init__(self, *, num_tokens, dim, depth, media_token_id, pad_id=0, heads=4, dim_head=16, cross_attn_every=2, num_latents=8):
        super().__init__()
        self.media_token_id = media_token_id
        self.pad_id = pad_id
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.resampler = PerceiverResampler(dim=dim, depth=2, dim_head=dim_head, heads=heads, num_latents=num_latents)
        self.layers = nn.ModuleList([])
        for ind in range(depth):
            xattn = GatedCrossAttentionBlock(dim=dim, dim_head=dim_head, heads=heads) if (ind % cross_attn_every) == 0 else None
            self.layers.append(nn.ModuleList([xattn, CausalSelfAttention(dim, heads=heads), FeedForward(dim)]))
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def forward(self, text, media, frame_mask=None, return_loss=False):
        if return_loss:
            text, labels = text[:, :-1], text[:, 1:]
        media_locations = text == self.media_token_id
        media = self.resampler(media, frame_mask=frame_mask)
        x = self.token_emb(text)
        for xattn, attn, ff in self.layers:
            if exists(xattn):
                x = xattn(x, media, media_locations=media_locations)
            x = attn(x) + x
            x = ff(x) + x
        logits = self.to_logits(x)
        if not return_loss:
            return logits
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=self.pad_id)


if __name__ == '__main__':
    torch.manual_seed(0)
    model = FlamingoLM(num_tokens=64, dim=32, depth=4, media_token_id=3)
    text = torch.randint(4, 64, (2, 12))
    text[:, 0], text[1, 6], text[0, -3:] = 3, 3, 0
    media = torch.randn(2, 2, 4, 3, 32)
    frame_mask = torch.ones(2, 2, 4, dtype=torch.bool)
    frame_mask[0, 0, 2:], frame_mask[1, 1, 3:] = False, False
    loss = model(text, media, frame_mask=frame_mask, return_loss=True)
    loss.backward()
    latents = model.resampler(media, frame_mask=frame_mask)
    print('loss', round(loss.item(), 4), 'latents', tuple(latents.shape), 'mean abs', round(latents.abs().mean().item(), 4))
