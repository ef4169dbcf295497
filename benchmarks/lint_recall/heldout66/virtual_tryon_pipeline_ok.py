"""Latent-diffusion virtual try-on with outfitting fusion (OOTDiffusion style).

A garment encoder turns the product photo into garment tokens; in the self-attention of the
denoising UNet the person tokens also read the garment tokens that lie on the garment (the
background of the product photo is left out with the garment parsing map). The person image
enters with its clothing region blanked out (the agnostic image) and a mask channel, as in
inpainting. Guidance drops the garment tokens for the unconditional pass.

Source: seed self_attention_mask_guide.txt sections 3 and 7; pytorch/pytorch#103963
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class OutfittingFusionAttnProcessor:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, garment_states=None, garment_keep=None):
        if garment_states is None:
            context = hidden_states
            key_keep = torch.ones(hidden_states.shape[:2], device=hidden_states.device)
        else:
            context = torch.cat([hidden_states, garment_states], dim=1)
            key_keep = torch.cat([torch.ones(hidden_states.shape[:2], device=hidden_states.device), garment_keep], dim=1)
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        k = attn.to_k(context).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        v = attn.to_v(context).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        sim = (q @ k.transpose(-1, -2)) * attn.scale
        sim = sim.masked_fill(key_keep[:, None, None, :] == 0, float("-inf"))
        probs = sim.softmax(dim=-1)
        return attn.to_out((probs @ v).transpose(1, 2).flatten(2))


class Attention(nn.Module):
    def __init__(self, dim, heads=4, processor=None):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.to_out = nn.Linear(dim, dim)
        self.processor = processor or OutfittingFusionAttnProcessor()

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, **cross_attention_kwargs):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask, **cross_attention_kwargs)


class GarmentEncoder(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, dim, 2, stride=2), nn.SiLU(), nn.Conv2d(dim, dim, 3, padding=1))
        self.norm = nn.LayerNorm(dim)

    def forward(self, garment_image, garment_parse):
        feats = self.conv(garment_image)
        garment_keep = F.interpolate((garment_parse > 0).float(), size=feats.shape[-2:], mode="nearest").flatten(1)
        return self.norm(feats.flatten(2).transpose(1, 2)), garment_keep


class TryOnUNet(nn.Module):
    def __init__(self, latent_channels=4, dim=32, text_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(2 * latent_channels + 1, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim)
        self.to_k_text, self.to_v_text = nn.Linear(text_dim, dim), nn.Linear(text_dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.conv_out = nn.Conv2d(dim, latent_channels, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask, cross_attention_kwargs=None):
        b, _, h, w = sample.shape
        x = self.conv_in(sample) + self.time_mlp(timestep.view(-1, 1) / 1000)[:, :, None, None]
        x = x.flatten(2).transpose(1, 2)
        x = x + self.attn1(self.norm1(x), **(cross_attention_kwargs or {}))
        q = self.norm2(x).unflatten(-1, (4, -1)).transpose(1, 2)
        k = self.to_k_text(encoder_hidden_states).unflatten(-1, (4, -1)).transpose(1, 2)
        v = self.to_v_text(encoder_hidden_states).unflatten(-1, (4, -1)).transpose(1, 2)
        x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=encoder_attention_mask[:, None, None, :].bool()).transpose(1, 2).flatten(2)
        x = x + self.ff(self.norm3(x))
        return self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))


class OOTDiffusionPipeline:
    def __init__(self, unet, garment_encoder, vae_encode, vae_decode, text_embedder, alphas_cumprod):
        self.unet, self.garment_encoder = unet, garment_encoder
        self.vae_encode, self.vae_decode, self.text_embedder = vae_encode, vae_decode, text_embedder
        self.alphas_cumprod = alphas_cumprod

    def prepare_agnostic(self, person, clothing_mask):
        agnostic = person * (1 - clothing_mask) + 0.5 * clothing_mask
        latent_mask = F.interpolate(clothing_mask, scale_factor=0.5, mode="nearest")
        return self.vae_encode(agnostic), latent_mask

    @torch.no_grad()
    def __call__(self, person, clothing_mask, garment_image, garment_parse, category_ids, num_inference_steps=5, guidance_scale=2.0, generator=None):
        b = person.shape[0]
        agnostic_latents, latent_mask = self.prepare_agnostic(person, clothing_mask)
        garment_states, garment_keep = self.garment_encoder(garment_image, garment_parse)
        text_keep = torch.ones_like(category_ids)
        text_embeds = self.text_embedder(category_ids)
        cond = {"garment_states": torch.cat([torch.zeros_like(garment_states), garment_states]), "garment_keep": garment_keep.repeat(2, 1)}
        latents = torch.randn(agnostic_latents.shape, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            model_input = torch.cat([latents, agnostic_latents, latent_mask], dim=1).repeat(2, 1, 1, 1)
            eps = self.unet(model_input, torch.full((2 * b,), float(t)), text_embeds.repeat(2, 1, 1), text_keep.repeat(2, 1), cross_attention_kwargs=cond)
            eps_uncond, eps_garment = eps.chunk(2)
            eps = eps_uncond + guidance_scale * (eps_garment - eps_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            latents = a_prev.sqrt() * (latents - (1 - a).sqrt() * eps) / a.sqrt() + (1 - a_prev).sqrt() * eps
        image = self.vae_decode(latents).clamp(-1, 1)
        return SimpleNamespace(images=image * clothing_mask + person * (1 - clothing_mask))


def build_pipeline():
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    return OOTDiffusionPipeline(
        TryOnUNet(), GarmentEncoder(), nn.Conv2d(3, 4, 2, stride=2), nn.ConvTranspose2d(4, 3, 2, stride=2), nn.Embedding(3, 32), alphas_cumprod
    )


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = build_pipeline()
    person = torch.rand(2, 3, 16, 16) * 2 - 1
    clothing_mask = torch.zeros(2, 1, 16, 16)
    clothing_mask[:, :, 4:12, 3:13] = 1.0
    garment = torch.rand(2, 3, 16, 16) * 2 - 1
    parse = torch.zeros(2, 1, 16, 16, dtype=torch.long)
    parse[:, :, 2:14, 4:12] = 1
    out = pipe(person, clothing_mask, garment, parse, category_ids=torch.tensor([[0], [1]]), generator=torch.Generator().manual_seed(0))
    print(tuple(out.images.shape), bool(torch.isfinite(out.images).all()), round(out.images.abs().mean().item(), 4))
