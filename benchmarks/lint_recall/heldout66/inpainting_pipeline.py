"""Text-guided inpainting pipeline in the Stable-Diffusion-inpainting layout, on a tiny latent UNet.

The UNet reads nine channels: the noisy latents, the inpainting mask resized to the latent grid
and the latents of the masked image. The prompt comes from a small CLIP-like text encoder.

Source: pytorch/pytorch#103963; huggingface/transformers#32195
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConfigMixin:
    def register_to_config(self, **kwargs):
        self.config = SimpleNamespace(**kwargs)


class ModelMixin(nn.Module):
    @property
    def device(self):
        return next(self.parameters()).device


class CLIPLikeTokenizer:
    def __init__(self, vocab_size=64, model_max_length=10, pad_token_id=0):
        self.vocab_size, self.model_max_length, self.pad_token_id = vocab_size, model_max_length, pad_token_id

    def __call__(self, prompts, padding="max_length", max_length=None, return_tensors="pt"):
        max_length = max_length or self.model_max_length
        ids, mask = [], []
        for text in [prompts] if isinstance(prompts, str) else prompts:
            toks = [1] + [3 + sum(map(ord, w)) % (self.vocab_size - 3) for w in text.lower().split()]
            toks = toks[: max_length - 1] + [2]
            ids.append(toks + [self.pad_token_id] * (max_length - len(toks)))
            mask.append([1] * len(toks) + [0] * (max_length - len(toks)))
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=64, dim=32, heads=4, max_len=16):
        super().__init__()
        self.heads = heads
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.ln_1, self.ln_2, self.final_layer_norm = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, input_ids, attention_mask=None):
        (b, n), x = input_ids.shape, self.token_embedding(input_ids) + self.position_embedding[: input_ids.shape[1]]
        q, k, v = self.qkv(self.ln_1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        if attention_mask is not None:
            causal = causal & attention_mask.bool()[:, None, None, :]
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        x = x + self.out_proj(h.transpose(1, 2).reshape(b, n, -1))
        x = x + self.mlp(self.ln_2(x))
        return self.final_layer_norm(x)


class AttnProcessor2_0:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        batch_size, sequence_length, _ = context.shape
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1, attention_mask.shape[-1])
        query, key, value = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        head_dim = key.shape[-1] // attn.heads
        query, key, value = (t.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2) for t in (query, key, value))
        hidden_states = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)
        return attn.to_out[1](attn.to_out[0](hidden_states))


class Attention(nn.Module):
    def __init__(self, query_dim, cross_attention_dim=None, heads=4, dim_head=8):
        super().__init__()
        inner_dim, self.heads = heads * dim_head, heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k, self.to_v = (nn.Linear(cross_attention_dim or query_dim, inner_dim, bias=False) for _ in "kv")
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim), nn.Dropout(0.0)])
        self.processor = AttnProcessor2_0()

    def prepare_attention_mask(self, attention_mask, target_length, batch_size):
        if attention_mask.shape[-1] != target_length:
            attention_mask = F.pad(attention_mask, (0, target_length - attention_mask.shape[-1]), value=0.0)
        if attention_mask.shape[0] < batch_size * self.heads:
            attention_mask = attention_mask.repeat_interleave(self.heads, dim=0)
        return attention_mask

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask)


class InpaintUNet(ModelMixin, ConfigMixin):
    def __init__(self, in_channels=9, out_channels=4, width=32, cross_attention_dim=32):
        super().__init__()
        self.register_to_config(in_channels=in_channels, out_channels=out_channels, width=width)
        self.conv_in = nn.Conv2d(in_channels, width, 3, padding=1)
        self.time_embedding = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn1 = Attention(width)
        self.attn2 = Attention(width, cross_attention_dim=cross_attention_dim)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        self.conv_norm_out = nn.GroupNorm(8, width)
        self.conv_out = nn.Conv2d(width, out_channels, 3, padding=1)

    def time_proj(self, timesteps, dim):
        freqs = torch.exp(-math.log(10000) * torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))
        args = timesteps.float()[:, None] * freqs[None]
        return torch.cat([args.cos(), args.sin()], dim=-1)

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask=None):
        if encoder_attention_mask is not None:
            encoder_attention_mask = encoder_attention_mask.to(sample.dtype)  # expect: MC508 additive
            encoder_attention_mask = encoder_attention_mask.unsqueeze(1)
        b, _, h, w = sample.shape
        timesteps = torch.as_tensor(timestep, device=self.device).expand(b)
        emb = self.time_embedding(self.time_proj(timesteps, self.config.width).to(sample.dtype))
        x = self.conv_in(sample) + emb[:, :, None, None]
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens + self.attn1(self.norm1(tokens))
        tokens = tokens + self.attn2(self.norm2(tokens), encoder_hidden_states, attention_mask=encoder_attention_mask)
        tokens = tokens + self.ff(self.norm3(tokens))
        x = tokens.transpose(1, 2).reshape(b, -1, h, w)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class DDIMScheduler(ConfigMixin):
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012):
        self.register_to_config(num_train_timesteps=num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps) ** 2, 0)

    def set_timesteps(self, num_inference_steps):
        self.step_ratio = self.config.num_train_timesteps // num_inference_steps
        self.timesteps = torch.arange(0, num_inference_steps).flip(0) * self.step_ratio + 1

    def step(self, model_output, timestep, sample):
        prev_t = timestep - self.step_ratio
        alpha_t = self.alphas_cumprod[timestep]
        alpha_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else torch.tensor(1.0)
        pred_x0 = (sample - (1 - alpha_t).sqrt() * model_output) / alpha_t.sqrt()
        return alpha_prev.sqrt() * pred_x0 + (1 - alpha_prev).sqrt() * model_output


class StableDiffusionInpaintPipeline:
    vae_scale_factor = 2

    def __init__(self, tokenizer, text_encoder, unet, scheduler):
        self.tokenizer, self.text_encoder, self.unet, self.scheduler = tokenizer, text_encoder, unet, scheduler
        self.vae_encode = nn.Conv2d(3, 4, 2, stride=2)
        self.vae_decode = nn.ConvTranspose2d(4, 3, 2, stride=2)

    def encode_prompt(self, prompt, negative_prompt, do_classifier_free_guidance):
        texts = prompt + (negative_prompt if do_classifier_free_guidance else [])
        text_inputs = self.tokenizer(texts, padding="max_length", return_tensors="pt")
        embeds = self.text_encoder(text_inputs["input_ids"], attention_mask=text_inputs["attention_mask"])
        attention_mask = text_inputs["attention_mask"]
        if do_classifier_free_guidance:
            n = len(prompt)
            embeds, attention_mask = embeds.roll(-n, dims=0), attention_mask.roll(-n, dims=0)
        return embeds, attention_mask

    def prepare_mask_latents(self, image, mask_image):
        mask = F.interpolate(mask_image, scale_factor=1 / self.vae_scale_factor)
        return mask, self.vae_encode(image * (mask_image < 0.5))

    @torch.no_grad()
    def __call__(self, prompt, image, mask_image, negative_prompt=None, num_inference_steps=4, guidance_scale=7.5, generator=None):
        prompt = [prompt] if isinstance(prompt, str) else prompt
        do_cfg, negative_prompt = guidance_scale > 1.0, negative_prompt or [""] * len(prompt)
        prompt_embeds, prompt_mask = self.encode_prompt(prompt, negative_prompt, do_cfg)
        mask, masked_image_latents = self.prepare_mask_latents(image, mask_image)
        latents = torch.randn(masked_image_latents.shape, generator=generator)
        self.scheduler.set_timesteps(num_inference_steps)
        for t in self.scheduler.timesteps:
            latent_model_input = torch.cat([latents, mask, masked_image_latents], dim=1)
            latent_model_input = torch.cat([latent_model_input] * 2) if do_cfg else latent_model_input
            noise_pred = self.unet(latent_model_input, t, prompt_embeds, encoder_attention_mask=prompt_mask)
            if do_cfg:
                noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
                noise_pred = noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)
            latents = self.scheduler.step(noise_pred, t, latents)
        decoded = self.vae_decode(latents).clamp(-1, 1)
        return SimpleNamespace(images=decoded * mask_image + image * (1 - mask_image))


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = StableDiffusionInpaintPipeline(CLIPLikeTokenizer(), TextEncoder(), InpaintUNet(), DDIMScheduler())
    image = torch.rand(2, 3, 16, 16) * 2 - 1
    mask_image = torch.zeros(2, 1, 16, 16)
    mask_image[:, :, 4:12, 6:14] = 1.0
    out = pipe(["a red sofa in a bright room", "a cat"], image, mask_image, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out.images * (1 - mask_image), image * (1 - mask_image))
    print(tuple(out.images.shape), round(out.images.abs().mean().item(), 4))
