"""
A Stable-Audio-style latent diffusion transformer for text-to-audio (Evans et
al., 2024) at toy scale: a DiT over VAE latent frames with rotary self-attention,
cross-attention to T5-like prompt tokens, a prepended global token built from
the diffusion time, a pooled prompt embedding and the clip's timing
(seconds_start, seconds_total), and the v-objective. Clips shorter than the
training window are padded with silence latents that the loss ignores.

Source: conventions.md §1 (direction cheat-sheet, HF attention_mask row), §5 item 1; seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1
"""

import math
from typing import Dict, List

import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor


def exists(val):
    return val is not None


class PromptTokenizer:
    def __init__(self, vocab_size=256, pad_token_id=0, max_length=16):
        self.vocab_size, self.pad_token_id, self.max_length = vocab_size, pad_token_id, max_length

    def __call__(self, prompts: List[str], padding=True, return_tensors='pt') -> Dict[str, Tensor]:
        ids = [[1 + sum(map(ord, word)) % (self.vocab_size - 1) for word in prompt.split()][:self.max_length] for prompt in prompts]
        longest = max(1, max(map(len, ids)))
        return {
            'input_ids': torch.tensor([seq + [self.pad_token_id] * (longest - len(seq)) for seq in ids]),
            'attention_mask': torch.tensor([[1] * len(seq) + [0] * (longest - len(seq)) for seq in ids]),
        }


class FourierFeatures(nn.Module):
    def __init__(self, dim, std=1.):
        super().__init__()
        self.register_buffer('weight', torch.randn(dim // 2, 1) * std)

    def forward(self, t):
        f = 2 * math.pi * t[:, None] @ self.weight.T
        return torch.cat((f.cos(), f.sin()), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        self.register_buffer('inv_freq', 1. / (theta ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, n, device):
        freqs = einsum('i, j -> i j', torch.arange(n, device=device).float(), self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def apply_rotary(pos, t):
    t1, t2 = t.chunk(2, dim=-1)
    return t * pos.cos() + torch.cat((-t2, t1), dim=-1) * pos.sin()


class Attention(nn.Module):
    def __init__(self, dim, *, dim_context=None, dim_head=16, heads=4):
        super().__init__()
        self.heads, self.scale = heads, dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim_context or dim, dim_head * heads * 2, bias=False)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)

    def forward(self, x, context=None, mask=None, rotary_emb=None):
        x = self.norm(x)
        kv_input = context if exists(context) else x
        q, k, v = (self.to_q(x), *self.to_kv(kv_input).chunk(2, dim=-1))
        q, k, v = map(lambda t: t.unflatten(-1, (self.heads, -1)).transpose(1, 2), (q, k, v))
        if exists(rotary_emb):
            q, k = apply_rotary(rotary_emb, q), apply_rotary(rotary_emb, k)

        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        if exists(mask):
            sim = sim.masked_fill(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        out = einsum('b h i j, b h j d -> b h i d', sim.softmax(dim=-1), v)
        return self.to_out(out.transpose(1, 2).flatten(2))


class PromptConditioner(nn.Module):
    def __init__(self, tokenizer: PromptTokenizer, dim_text=32):
        super().__init__()
        self.tokenizer = tokenizer
        self.token_emb = nn.Embedding(tokenizer.vocab_size, dim_text)
        self.pos_emb = nn.Embedding(tokenizer.max_length, dim_text)
        self.encoder = Attention(dim_text)
        self.pool_query = nn.Parameter(torch.randn(dim_text))

    def forward(self, prompts: List[str]):
        enc = self.tokenizer(prompts, padding=True, return_tensors='pt')
        input_ids = enc['input_ids']
        text_keep = enc['attention_mask'].bool()
        tokens = self.token_emb(input_ids) + self.pos_emb(torch.arange(input_ids.shape[1]))
        tokens = self.encoder(tokens, mask=text_keep) + tokens

        pool_sim = einsum('b n d, d -> b n', tokens, self.pool_query) * tokens.shape[-1] ** -0.5
        pool_sim = pool_sim.masked_fill(text_keep, -torch.finfo(pool_sim.dtype).max)  # expect: MC519 keep
        pooled = einsum('b n, b n d -> b d', pool_sim.softmax(dim=-1), tokens)
        return tokens, text_keep, pooled


class AudioDiT(nn.Module):
    def __init__(self, *, tokenizer: PromptTokenizer, latent_dim=8, dim=48, depth=2, dim_text=32, heads=4, dim_head=12, max_seconds=30):
        super().__init__()
        self.max_seconds = max_seconds
        self.conditioner = PromptConditioner(tokenizer, dim_text)
        self.time_features = FourierFeatures(dim)
        self.seconds_start_emb = nn.Sequential(FourierFeatures(dim), nn.Linear(dim, dim))
        self.seconds_total_emb = nn.Sequential(FourierFeatures(dim), nn.Linear(dim, dim))
        self.to_global = nn.Sequential(nn.Linear(dim + dim_text, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.proj_in = nn.Linear(latent_dim, dim)
        self.rotary_emb = RotaryEmbedding(dim_head)
        self.layers = nn.ModuleList([nn.ModuleList([
            Attention(dim, dim_head=dim_head, heads=heads),
            Attention(dim, dim_context=dim_text, dim_head=dim_head, heads=heads),
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        ]) for _ in range(depth)])
        self.proj_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, latent_dim))

    def forward(self, latents: Tensor, times: Tensor, prompts: List[str], seconds_start: Tensor, seconds_total: Tensor, latent_keep: Tensor):
        b, n, _ = latents.shape
        context, context_keep, pooled = self.conditioner(prompts)
        timing = self.seconds_start_emb(seconds_start / self.max_seconds) + self.seconds_total_emb(seconds_total / self.max_seconds)
        global_cond = self.to_global(torch.cat((self.time_features(times), pooled), dim=-1)) + timing

        x = torch.cat((global_cond[:, None], self.proj_in(latents)), dim=1)
        keep = F.pad(latent_keep, (1, 0), value=True)
        rotary_emb = self.rotary_emb(n + 1, x.device)

        for self_attn, cross_attn, ff in self.layers:
            x = self_attn(x, mask=keep, rotary_emb=rotary_emb) + x
            x = cross_attn(x, context=context, mask=context_keep) + x
            x = ff(x) + x
        return self.proj_out(x[:, 1:])


def v_objective_loss(model, latents, latent_keep, prompts, seconds_start, seconds_total):
    t = torch.rand(latents.shape[0])
    alpha, sigma = (t * math.pi / 2).cos()[:, None, None], (t * math.pi / 2).sin()[:, None, None]
    noise = torch.randn_like(latents)
    pred = model(alpha * latents + sigma * noise, t, prompts, seconds_start, seconds_total, latent_keep)
    loss = ((pred - (alpha * noise - sigma * latents)) ** 2).mean(dim=-1)
    return (loss * latent_keep).sum() / latent_keep.sum()


if __name__ == '__main__':
    torch.manual_seed(0)
    model = AudioDiT(tokenizer=PromptTokenizer())
    prompts = ['warm analog synth pad with slow attack', 'rain on a tin roof', 'drum loop 120 bpm']
    seconds_total = torch.tensor([10., 4., 7.])
    frames_per_second = 2
    latent_keep = torch.arange(20)[None, :] < (seconds_total * frames_per_second)[:, None]
    latents = torch.randn(3, 20, 8) * latent_keep[..., None]
    loss = v_objective_loss(model, latents, latent_keep, prompts, torch.zeros(3), seconds_total)
    loss.backward()
    print('loss', round(loss.item(), 4))
