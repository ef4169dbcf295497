"""Storyboard generation with a consistent character across panels (StoryDiffusion style).

All panels of a story are denoised as one batch; in self-attention every panel also reads a
random sample of the tokens of the other panels ("consistent self-attention"), which keeps the
character's identity. Each panel has its own prompt; a pooled prompt embedding (an attention
pooler over the prompt tokens) is added to the timestep embedding, SDXL-style.

Source: conventions.md section 1 (Hugging Face attention_mask row), section 2.4, section 5 item 7
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class PanelTokenizer:
    def __init__(self, vocab=80, model_max_length=8):
        self.vocab, self.model_max_length = vocab, model_max_length

    def __call__(self, texts, padding="max_length", truncation=True, return_tensors="pt"):
        n = self.model_max_length
        rows = [([1] + [3 + sum(map(ord, w)) % (self.vocab - 3) for w in t.split()])[: n - 1] + [2] for t in texts]
        return {
            "input_ids": torch.tensor([r + [0] * (n - len(r)) for r in rows]),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows]),
        }


class ConsistentSelfAttnProcessor:
    def __init__(self, sampling_rate=0.5, generator=None):
        self.sampling_rate, self.generator = sampling_rate, generator

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, num_panels=1):
        bp, n, c = hidden_states.shape
        stories = bp // num_panels
        x = hidden_states.reshape(stories, num_panels * n, c)
        sampled = torch.rand(stories, num_panels * n, generator=self.generator) < self.sampling_rate
        panel_of = torch.arange(num_panels).repeat_interleave(n)
        own_panel = panel_of[:, None] == panel_of[None, :]
        keep = own_panel[None] | sampled[:, None, :]
        q, k, v = (t.unflatten(-1, (attn.heads, -1)).transpose(1, 2) for t in (attn.to_q(x), attn.to_k(x), attn.to_v(x)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None])
        return attn.to_out(out.transpose(1, 2).reshape(bp, n, c))


class Attention(nn.Module):
    def __init__(self, dim, context_dim=None, heads=4, processor=None):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = processor

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, **kwargs):
        if self.processor is not None:
            return self.processor(self, hidden_states, encoder_hidden_states, attention_mask, **kwargs)
        q = self.to_q(hidden_states).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        k = self.to_k(encoder_hidden_states).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        v = self.to_v(encoder_hidden_states).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        return self.to_out(F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask).transpose(1, 2).flatten(2))


class PromptPooler(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.query = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, prompt_embeds, prompt_pad):
        q = self.query.expand(prompt_embeds.shape[0], -1, -1)
        return self.attn(q, prompt_embeds, prompt_embeds, key_padding_mask=prompt_pad, need_weights=False)[0][:, 0]


class StoryUNet(nn.Module):
    def __init__(self, channels=4, dim=32, context_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.add_embedding = nn.Linear(context_dim, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim, processor=ConsistentSelfAttnProcessor())
        self.attn2 = Attention(dim, context_dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)

    def forward(self, sample, t, encoder_hidden_states, encoder_pad, text_embeds, num_panels):
        b, _, h, w = sample.shape
        emb = self.time_mlp(t.view(-1, 1) / 1000) + self.add_embedding(text_embeds)
        x = (self.conv_in(sample) + emb[:, :, None, None]).flatten(2).transpose(1, 2)
        x = x + self.attn1(self.norm1(x), num_panels=num_panels)
        x = x + self.attn2(self.norm2(x), encoder_hidden_states, attention_mask=~encoder_pad[:, None, None, :])
        x = x + self.ff(self.norm3(x))
        return self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))


class StoryDiffusionPipeline:
    def __init__(self, tokenizer, text_encoder, pooler, unet, alphas_cumprod):
        self.tokenizer, self.text_encoder, self.pooler = tokenizer, text_encoder, pooler
        self.unet, self.alphas_cumprod = unet, alphas_cumprod

    def encode_prompts(self, prompts, device=torch.device("cpu")):
        text_inputs = self.tokenizer(prompts, padding="max_length", return_tensors="pt")
        prompt_pad = (text_inputs["attention_mask"] == 0).to(device, torch.bool)
        prompt_embeds = self.text_encoder(text_inputs["input_ids"].to(device))
        pooled = self.pooler(prompt_embeds, prompt_pad)
        return prompt_embeds, prompt_pad, pooled

    @torch.no_grad()
    def __call__(self, character, panel_prompts, num_inference_steps=5, guidance_scale=5.0, generator=None):
        panels = len(panel_prompts)
        prompts = [f"{character} {p}" for p in panel_prompts]
        embeds, pad, pooled = self.encode_prompts([""] * panels + prompts)
        self.unet.attn1.processor.generator = generator
        latents = torch.randn(panels, 4, 8, 8, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            eps = self.unet(torch.cat([latents] * 2), torch.full((2 * panels,), float(t)), embeds, pad, pooled, num_panels=panels)
            eps_uncond, eps_text = eps.chunk(2)
            eps = eps_uncond + guidance_scale * (eps_text - eps_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            latents = a_prev.sqrt() * (latents - (1 - a).sqrt() * eps) / a.sqrt() + (1 - a_prev).sqrt() * eps
        return latents


def build_pipeline():
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    text_encoder = nn.Sequential(nn.Embedding(80, 32), nn.LayerNorm(32))
    return StoryDiffusionPipeline(PanelTokenizer(), text_encoder, PromptPooler(), StoryUNet(), alphas_cumprod)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = build_pipeline()
    panels = ["wakes up in a tiny flat", "rides a bicycle to the market", "buys oranges", "waves goodbye at the station"]
    latents = pipe("a girl with a yellow raincoat", panels, generator=torch.Generator().manual_seed(0))
    print(tuple(latents.shape), bool(torch.isfinite(latents).all()), round(latents.std().item(), 4))
