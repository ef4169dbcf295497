"""InstructPix2Pix-style image editing: follow a written instruction, keep the input image.

The UNet reads the noisy latents next to the latents of the input image and is guided three
ways (instruction, image, neither), with an Euler scheduler and an attention processor that
works on (batch * heads, tokens, head_dim) tensors as the classic diffusers `AttnProcessor` does.

Source: conventions.md section 1 (Hugging Face attention_mask row); seed masked_fill_inplace.txt
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 96
MAX_LENGTH = 12


class ConfigMixin:
    def register_to_config(self, **kwargs):
        self._internal_dict = dict(kwargs)

    @property
    def config(self):
        return SimpleNamespace(**self._internal_dict)


class InstructionTokenizer:
    model_max_length = MAX_LENGTH

    def __call__(self, texts, padding="max_length", max_length=MAX_LENGTH, truncation=True, return_tensors="pt"):
        rows = [[1] + [4 + sum(map(ord, w)) % (VOCAB - 4) for w in t.split()][: max_length - 2] + [2] for t in texts]
        input_ids = torch.zeros(len(rows), max_length, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), max_length, dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return SimpleNamespace(input_ids=input_ids, attention_mask=attention_mask)


class AttnProcessor:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        key = attn.head_to_batch_dim(attn.to_k(context))
        value = attn.head_to_batch_dim(attn.to_v(context))
        scores = torch.baddbmm(
            torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype, device=query.device),
            query,
            key.transpose(-1, -2),
            beta=0,
            alpha=attn.scale,
        )
        if attention_mask is not None:
            keep = attention_mask.bool().repeat_interleave(attn.heads, dim=0)
            scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        attention_probs = scores.softmax(dim=-1)
        hidden_states = attn.batch_to_head_dim(torch.bmm(attention_probs, value))
        return attn.to_out(hidden_states)


class Attention(nn.Module):
    def __init__(self, query_dim, cross_attention_dim=None, heads=2, dim_head=16):
        super().__init__()
        self.heads, self.scale = heads, dim_head**-0.5
        self.to_q = nn.Linear(query_dim, heads * dim_head, bias=False)
        self.to_k = nn.Linear(cross_attention_dim or query_dim, heads * dim_head, bias=False)
        self.to_v = nn.Linear(cross_attention_dim or query_dim, heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, query_dim)
        self.processor = AttnProcessor()

    def head_to_batch_dim(self, tensor):
        b, n, d = tensor.shape
        return tensor.reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, n, -1)

    def batch_to_head_dim(self, tensor):
        bh, n, d = tensor.shape
        return tensor.reshape(bh // self.heads, self.heads, n, d).permute(0, 2, 1, 3).reshape(bh // self.heads, n, -1)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states=encoder_hidden_states, attention_mask=attention_mask)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, cross_attention_dim):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim)
        self.attn2 = Attention(dim, cross_attention_dim=cross_attention_dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask=None):
        hidden_states = hidden_states + self.attn1(self.norm1(hidden_states))
        hidden_states = hidden_states + self.attn2(
            self.norm2(hidden_states), encoder_hidden_states=encoder_hidden_states, attention_mask=encoder_attention_mask
        )
        return hidden_states + self.ff(self.norm3(hidden_states))


class EditUNet(nn.Module, ConfigMixin):
    def __init__(self, in_channels=8, out_channels=4, block_out_channels=32, cross_attention_dim=32):
        super().__init__()
        self.register_to_config(in_channels=in_channels, block_out_channels=block_out_channels)
        c = block_out_channels
        self.conv_in = nn.Conv2d(in_channels, c, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, c), nn.SiLU(), nn.Linear(c, c))
        self.down = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.mid_block = BasicTransformerBlock(c, cross_attention_dim)
        self.up = nn.ConvTranspose2d(c, c, 2, stride=2)
        self.conv_out = nn.Conv2d(2 * c, out_channels, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask=None):
        temb = self.time_mlp(torch.log(timestep.float().reshape(1, 1)) / 4.0)
        h0 = self.conv_in(sample) + temb[:, :, None, None]
        h = self.down(F.silu(h0))
        b, c, hh, ww = h.shape
        tokens = self.mid_block(h.flatten(2).transpose(1, 2), encoder_hidden_states, encoder_attention_mask)
        h = self.up(tokens.transpose(1, 2).reshape(b, c, hh, ww))
        return self.conv_out(F.silu(torch.cat([h, h0], dim=1)))


class EulerDiscreteScheduler(ConfigMixin):
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012):
        self.register_to_config(num_train_timesteps=num_train_timesteps)
        betas = np.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps) ** 2
        self.alphas_cumprod = np.cumprod(1.0 - betas)

    def set_timesteps(self, num_inference_steps):
        self.timesteps = np.linspace(0, self.config.num_train_timesteps - 1, num_inference_steps)[::-1].copy()
        sigmas = ((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5
        sigmas = np.interp(self.timesteps, np.arange(len(sigmas)), sigmas)
        self.sigmas = torch.from_numpy(np.append(sigmas, 0.0)).float()
        self.timesteps, self.step_index = torch.from_numpy(self.timesteps).float(), 0

    @property
    def init_noise_sigma(self):
        return (self.sigmas.max() ** 2 + 1) ** 0.5

    def scale_model_input(self, sample, timestep):
        return sample / ((self.sigmas[self.step_index] ** 2 + 1) ** 0.5)

    def step(self, model_output, timestep, sample):
        sigma, sigma_next = self.sigmas[self.step_index], self.sigmas[self.step_index + 1]
        derivative = (sample - (sample - sigma * model_output)) / sigma
        self.step_index += 1
        return sample + derivative * (sigma_next - sigma)


class StableDiffusionInstructPix2PixPipeline:
    def __init__(self, tokenizer, text_encoder, unet, scheduler, image_encoder):
        self.tokenizer, self.text_encoder, self.unet = tokenizer, text_encoder, unet
        self.scheduler, self.image_encoder = scheduler, image_encoder

    def _encode_prompt(self, prompt, negative_prompt):
        tokens = self.tokenizer(prompt + negative_prompt, padding="max_length", return_tensors="pt")
        embeds = self.text_encoder(tokens.input_ids)
        n = len(prompt)
        prompt_embeds = torch.cat([embeds[:n], embeds[n:], embeds[n:]])
        return prompt_embeds, torch.cat([tokens.attention_mask[:n], tokens.attention_mask[n:], tokens.attention_mask[n:]])

    @torch.no_grad()
    def __call__(self, prompt, image, num_inference_steps=5, guidance_scale=7.5, image_guidance_scale=1.5, generator=None):
        prompt_embeds, prompt_attention_mask = self._encode_prompt(prompt, [""] * len(prompt))
        image_latents = self.image_encoder(image)
        image_latents = torch.cat([image_latents, image_latents, torch.zeros_like(image_latents)])
        self.scheduler.set_timesteps(num_inference_steps)
        latents = torch.randn(image_latents[: len(prompt)].shape, generator=generator) * self.scheduler.init_noise_sigma
        for t in self.scheduler.timesteps:
            latent_model_input = self.scheduler.scale_model_input(torch.cat([latents] * 3), t)
            latent_model_input = torch.cat([latent_model_input, image_latents], dim=1)
            noise_pred = self.unet(latent_model_input, t + 1, prompt_embeds, encoder_attention_mask=prompt_attention_mask)
            noise_pred_text, noise_pred_image, noise_pred_uncond = noise_pred.chunk(3)
            noise_pred = (
                noise_pred_uncond
                + guidance_scale * (noise_pred_text - noise_pred_image)
                + image_guidance_scale * (noise_pred_image - noise_pred_uncond)
            )
            latents = self.scheduler.step(noise_pred, t, latents)
        return SimpleNamespace(images=latents)


if __name__ == "__main__":
    torch.manual_seed(0)
    text_encoder = nn.Sequential(nn.Embedding(VOCAB, 32), nn.LayerNorm(32))
    pipe = StableDiffusionInstructPix2PixPipeline(
        InstructionTokenizer(), text_encoder, EditUNet(), EulerDiscreteScheduler(), nn.Conv2d(3, 4, 2, stride=2)
    )
    image = torch.rand(2, 3, 16, 16) * 2 - 1
    out = pipe(["make it snow", "turn the car red"], image, generator=torch.Generator().manual_seed(0))
    print(tuple(out.images.shape), round(out.images.std().item(), 4))
