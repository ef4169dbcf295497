"""Text-conditioned latent diffusion with a padded T5-style prompt encoder (diffusers layout).

Source: NVIDIA/apex#1052 and facebookresearch/fairseq#3575 (conventions.md §3 item 18),
conventions.md §2.3, tools.md §0 P5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class PipelineConfig:
    vocab_size: int = 64
    max_text_len: int = 12
    text_dim: int = 64
    text_layers: int = 2
    text_heads: int = 4
    latent_channels: int = 4
    block_channels: int = 64
    attention_head_dim: int = 16
    sample_size: int = 8
    num_train_timesteps: int = 100
    guidance_scale: float = 4.0
    pad_token_id: int = 0
    eos_token_id: int = 1


class PromptTokenizer:
    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg

    def __call__(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        ids = torch.full((len(prompts), cfg.max_text_len), cfg.pad_token_id, dtype=torch.long)
        for i, text in enumerate(prompts):
            toks = [2 + (sum(map(ord, w)) % (cfg.vocab_size - 2)) for w in text.split()]
            toks = [*toks[: cfg.max_text_len - 1], cfg.eos_token_id]
            ids[i, : len(toks)] = torch.tensor(toks)
        return {"input_ids": ids, "attention_mask": (ids != cfg.pad_token_id).long()}


class T5EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.o(h.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class PromptEncoder(nn.Module):
    def __init__(self, cfg: PipelineConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.text_dim)
        self.pos = nn.Parameter(torch.randn(cfg.max_text_len, cfg.text_dim) * 0.02)
        self.blocks = nn.ModuleList(
            T5EncoderBlock(cfg.text_dim, cfg.text_heads) for _ in range(cfg.text_layers)
        )
        self.final_norm = nn.LayerNorm(cfg.text_dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keep = attention_mask.bool()
        x = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        for block in self.blocks:
            x = block(x, keep)
        return self.final_norm(x)


class Attention(nn.Module):
    def __init__(self, query_dim: int, cross_attention_dim: int | None, dim_head: int) -> None:
        super().__init__()
        inner = query_dim
        self.heads, self.scale = inner // dim_head, dim_head**-0.5
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_k = nn.Linear(cross_attention_dim or query_dim, inner, bias=False)
        self.to_v = nn.Linear(cross_attention_dim or query_dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, query_dim), nn.Dropout(0.0)])

    def head_to_batch_dim(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        t = t.reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)
        return t.reshape(b * self.heads, n, d // self.heads)

    def batch_to_head_dim(self, t: torch.Tensor) -> torch.Tensor:
        bh, n, d = t.shape
        t = t.reshape(bh // self.heads, self.heads, n, d).permute(0, 2, 1, 3)
        return t.reshape(bh // self.heads, n, d * self.heads)

    def prepare_attention_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        return attention_mask.repeat_interleave(self.heads, dim=0).unsqueeze(1)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query = self.head_to_batch_dim(self.to_q(hidden_states))
        key = self.head_to_batch_dim(self.to_k(context))
        value = self.head_to_batch_dim(self.to_v(context))
        empty = torch.empty(
            query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype, device=query.device
        )
        scores = torch.baddbmm(empty, query, key.transpose(-1, -2), beta=0, alpha=self.scale)
        if attention_mask is not None:
            attention_mask = self.prepare_attention_mask(attention_mask)
            scores = scores.masked_fill(attention_mask == 0, -1e9)  # expect: MC501 diffusion
        probs = scores.softmax(dim=-1).to(value.dtype)
        out = self.batch_to_head_dim(torch.bmm(probs, value))
        return self.to_out[1](self.to_out[0](out))


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim: int, cross_dim: int, dim_head: int) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim, None, dim_head)
        self.attn2 = Attention(dim, cross_dim, dim_head)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, encoder_hidden_states, encoder_attention_mask=None):
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), encoder_hidden_states, encoder_attention_mask)
        return x + self.ff(self.norm3(x))


class Transformer2DModel(nn.Module):
    def __init__(self, channels: int, cross_dim: int, dim_head: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, channels)
        self.proj_in = nn.Linear(channels, channels)
        block = BasicTransformerBlock(channels, cross_dim, dim_head)
        self.transformer_blocks = nn.ModuleList([block])
        self.proj_out = nn.Linear(channels, channels)

    def forward(self, sample, encoder_hidden_states, encoder_attention_mask=None):
        b, c, h, w = sample.shape
        x = self.proj_in(self.norm(sample).permute(0, 2, 3, 1).reshape(b, h * w, c))
        for block in self.transformer_blocks:
            x = block(x, encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        x = self.proj_out(x).reshape(b, h, w, c).permute(0, 3, 1, 2)
        return x + sample


class ResnetBlock2D(nn.Module):
    def __init__(self, channels: int, temb_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_dim, channels)
        self.norm2 = nn.GroupNorm(8, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        return x + self.conv2(F.silu(self.norm2(h)))


def timestep_embedding(timesteps: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = timesteps.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class UNet2DConditionModel(nn.Module):
    def __init__(self, cfg: PipelineConfig) -> None:
        super().__init__()
        ch = cfg.block_channels
        self.time_embedding = nn.Sequential(
            nn.Linear(ch, 4 * ch), nn.SiLU(), nn.Linear(4 * ch, 4 * ch)
        )
        self.conv_in = nn.Conv2d(cfg.latent_channels, ch, 3, padding=1)
        self.resnets = nn.ModuleList(ResnetBlock2D(ch, 4 * ch) for _ in range(2))
        self.attentions = nn.ModuleList(
            Transformer2DModel(ch, cfg.text_dim, cfg.attention_head_dim) for _ in range(2)
        )
        self.conv_norm_out = nn.GroupNorm(8, ch)
        self.conv_out = nn.Conv2d(ch, cfg.latent_channels, 3, padding=1)
        self.channels = ch

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask=None):
        temb = self.time_embedding(timestep_embedding(timestep, self.channels).to(sample.dtype))
        x = self.conv_in(sample)
        for resnet, attn in zip(self.resnets, self.attentions, strict=True):
            x = resnet(x, temb)
            x = attn(x, encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class DDPMScheduler:
    def __init__(self, num_train_timesteps: int) -> None:
        self.betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)

    def add_noise(self, x0, noise, t):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1).to(x0.dtype)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def step(self, eps, t: int, x):
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[t - 1] if t > 0 else torch.tensor(1.0)
        x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps


class TextToLatentPipeline:
    def __init__(self, cfg, tokenizer, text_encoder, unet, scheduler) -> None:
        self.cfg, self.tokenizer, self.text_encoder = cfg, tokenizer, text_encoder
        self.unet, self.scheduler, self.dtype = unet, scheduler, torch.float32

    def to(self, dtype: torch.dtype) -> TextToLatentPipeline:
        self.text_encoder.to(dtype)
        self.unet.to(dtype)
        self.dtype = dtype
        return self

    @torch.no_grad()
    def encode_prompt(self, prompts, negative_prompt=""):
        text = self.tokenizer(prompts + [negative_prompt] * len(prompts))
        embeds = self.text_encoder(text["input_ids"], text["attention_mask"])
        return embeds.to(self.dtype), text["attention_mask"]

    @torch.no_grad()
    def __call__(self, prompts: list[str], num_inference_steps: int = 10, seed: int = 0):
        cfg = self.cfg
        prompt_embeds, prompt_attention_mask = self.encode_prompt(prompts)
        gen = torch.Generator().manual_seed(seed)
        shape = (len(prompts), cfg.latent_channels, cfg.sample_size, cfg.sample_size)
        latents = torch.randn(shape, generator=gen).to(self.dtype)
        steps = torch.linspace(cfg.num_train_timesteps - 1, 0, num_inference_steps).long()
        for t in steps.tolist():
            latent_in = torch.cat([latents, latents])
            timestep = torch.full((latent_in.shape[0],), t)
            eps = self.unet(
                latent_in, timestep, prompt_embeds, encoder_attention_mask=prompt_attention_mask
            )
            eps_text, eps_uncond = eps.chunk(2)
            eps = eps_uncond + cfg.guidance_scale * (eps_text - eps_uncond)
            latents = self.scheduler.step(eps.float(), t, latents.float()).to(self.dtype)
        return latents


def make_dataset(cfg: PipelineConfig, n: int = 64):
    prompts, latents = [], []
    for i in range(n):
        c, s = ["red", "green", "blue", "yellow"][i % 4], ["square", "disc"][(i // 4) % 2]
        prompts.append(f"a small {c} {s} on a plain background" if i % 3 else f"{c} {s}")
        z = torch.zeros(cfg.latent_channels, cfg.sample_size, cfg.sample_size)
        z[i % 4] = 1.0 if s == "square" else -1.0
        latents.append(z + 0.05 * torch.randn_like(z))
    return prompts, torch.stack(latents)


def train(cfg: PipelineConfig, steps: int = 60):
    torch.manual_seed(0)
    tokenizer, text_encoder = PromptTokenizer(cfg), PromptEncoder(cfg)
    unet, scheduler = UNet2DConditionModel(cfg), DDPMScheduler(cfg.num_train_timesteps)
    prompts, latents = make_dataset(cfg)
    opt = torch.optim.AdamW(list(unet.parameters()) + list(text_encoder.parameters()), lr=3e-4)
    for step in range(steps):
        idx = torch.randint(0, len(prompts), (16,))
        batch = tokenizer([prompts[i] for i in idx.tolist()])
        drop = torch.rand(16) < 0.1
        batch["input_ids"][drop] = cfg.pad_token_id
        batch["input_ids"][drop, 0] = cfg.eos_token_id
        batch["attention_mask"][drop] = (batch["input_ids"][drop] != cfg.pad_token_id).long()
        cond = text_encoder(batch["input_ids"], batch["attention_mask"])
        noise, t = torch.randn_like(latents[idx]), torch.randint(0, cfg.num_train_timesteps, (16,))
        noisy = scheduler.add_noise(latents[idx], noise, t)
        pred = unet(noisy, t, cond, encoder_attention_mask=batch["attention_mask"])
        loss = F.mse_loss(pred, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    return TextToLatentPipeline(cfg, tokenizer, text_encoder.eval(), unet.eval(), scheduler)


if __name__ == "__main__":
    config = PipelineConfig()
    pipe = train(config)
    eval_prompts = ["red square", "a small blue disc on a plain background"]
    out32 = pipe(eval_prompts)
    print("float32 latents", out32.mean(dim=(2, 3)))
    out16 = pipe.to(torch.float16)(eval_prompts)
    print("float16 vs float32", (out16.float() - out32).abs().max().item())
