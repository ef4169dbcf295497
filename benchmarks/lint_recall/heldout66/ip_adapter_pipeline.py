"""Image-prompt adapter (IP-Adapter style) for subject-driven generation from several reference photos.

Each reference photo is encoded by a small vision encoder and projected to four image-prompt
tokens; the tokens of all photos of a prompt are refined together and read by decoupled
cross-attention (a second key/value projection next to the text one, added with a scale).
Prompts come with one to three photos, so the image-prompt tokens are padded per prompt.

Source: rasbt/LLMs-from-scratch#1061; conventions.md section 1, section 5 item 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS_PER_IMAGE = 4
MAX_IMAGES = 3


class ImageProjModel(nn.Module):
    def __init__(self, clip_embeddings_dim=48, cross_attention_dim=32, clip_extra_context_tokens=TOKENS_PER_IMAGE):
        super().__init__()
        self.tokens, self.dim = clip_extra_context_tokens, cross_attention_dim
        self.proj = nn.Linear(clip_embeddings_dim, clip_extra_context_tokens * cross_attention_dim)
        self.norm = nn.LayerNorm(cross_attention_dim)

    def forward(self, image_embeds):
        return self.norm(self.proj(image_embeds).reshape(*image_embeds.shape[:-1], self.tokens, self.dim))


class ImageTokenRefiner(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, tokens, key_padding_mask):
        h = self.norm(tokens)
        return tokens + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]


class IPAdapterAttnProcessor2_0(nn.Module):
    def __init__(self, hidden_size, cross_attention_dim, scale=1.0):
        super().__init__()
        self.scale = scale
        self.to_k_ip = nn.Linear(cross_attention_dim, hidden_size, bias=False)
        self.to_v_ip = nn.Linear(cross_attention_dim, hidden_size, bias=False)

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, ip_hidden_states=None, ip_key_padding_mask=None):
        heads = attn.heads
        query = attn.to_q(hidden_states).unflatten(-1, (heads, -1)).transpose(1, 2)
        key = attn.to_k(encoder_hidden_states).unflatten(-1, (heads, -1)).transpose(1, 2)
        value = attn.to_v(encoder_hidden_states).unflatten(-1, (heads, -1)).transpose(1, 2)
        hidden = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        if ip_hidden_states is not None:
            ip_key = self.to_k_ip(ip_hidden_states).unflatten(-1, (heads, -1)).transpose(1, 2)
            ip_value = self.to_v_ip(ip_hidden_states).unflatten(-1, (heads, -1)).transpose(1, 2)
            ip_hidden = F.scaled_dot_product_attention(query, ip_key, ip_value, attn_mask=ip_key_padding_mask[:, None, None, :])  # expect: MC502 kpm
            hidden = hidden + self.scale * ip_hidden
        return attn.to_out(hidden.transpose(1, 2).flatten(2))


class Attention(nn.Module):
    def __init__(self, dim, cross_attention_dim, heads=4):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim, dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = IPAdapterAttnProcessor2_0(dim, cross_attention_dim)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, **cross_attention_kwargs):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask, **cross_attention_kwargs)


class AdapterUNet(nn.Module):
    def __init__(self, channels=4, dim=32, cross_attention_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn2 = Attention(dim, cross_attention_dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask=None, added_cond_kwargs=None):
        b, _, h, w = sample.shape
        x = self.conv_in(sample) + self.time_mlp(timestep.view(-1, 1) / 1000)[:, :, None, None]
        x = x.flatten(2).transpose(1, 2)
        ip = added_cond_kwargs or {}
        x = x + self.attn2(self.norm1(x), encoder_hidden_states, encoder_attention_mask, ip_hidden_states=ip.get("image_embeds"), ip_key_padding_mask=ip.get("image_padding_mask"))
        x = x + self.ff(self.norm2(x))
        return self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))


class IPAdapterPipeline:
    def __init__(self, unet, text_embedder, image_encoder, image_proj_model, refiner, alphas_cumprod):
        self.unet, self.text_embedder, self.image_encoder = unet, text_embedder, image_encoder
        self.image_proj_model, self.refiner, self.alphas_cumprod = image_proj_model, refiner, alphas_cumprod

    def prepare_ip_adapter_image_embeds(self, ip_adapter_images):
        b = len(ip_adapter_images)
        embeds = torch.zeros(b, MAX_IMAGES, self.image_proj_model.proj.in_features)
        present = torch.zeros(b, MAX_IMAGES, dtype=torch.bool)
        for i, images in enumerate(ip_adapter_images):
            embeds[i, : len(images)] = self.image_encoder(images).mean(dim=(-2, -1))
            present[i, : len(images)] = True
        key_padding_mask = (~present).repeat_interleave(TOKENS_PER_IMAGE, dim=1)
        tokens = self.image_proj_model(embeds).flatten(1, 2)
        uncond = self.image_proj_model(torch.zeros_like(embeds)).flatten(1, 2)
        tokens = torch.cat([self.refiner(uncond, key_padding_mask), self.refiner(tokens, key_padding_mask)])
        return tokens, key_padding_mask.repeat(2, 1)

    @torch.no_grad()
    def __call__(self, prompt_ids, ip_adapter_images, negative_prompt_ids=None, num_inference_steps=5, guidance_scale=6.0, ip_adapter_scale=0.8, generator=None):
        b = prompt_ids.shape[0]
        negative_prompt_ids = torch.zeros_like(prompt_ids) if negative_prompt_ids is None else negative_prompt_ids
        negative_prompt_ids[:, 0] = 1
        ids = torch.cat([negative_prompt_ids, prompt_ids])
        prompt_embeds, text_keep = self.text_embedder(ids), (ids != 0)[:, None, None, :]
        image_embeds, image_padding_mask = self.prepare_ip_adapter_image_embeds(ip_adapter_images)
        self.unet.attn2.processor.scale = ip_adapter_scale
        added_cond_kwargs = {"image_embeds": image_embeds, "image_padding_mask": image_padding_mask}
        latents = torch.randn(b, 4, 8, 8, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            timestep = torch.full((2 * b,), float(t))
            noise_pred = self.unet(torch.cat([latents] * 2), timestep, prompt_embeds, text_keep, added_cond_kwargs=added_cond_kwargs)
            noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
            noise_pred = noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            latents = a_prev.sqrt() * (latents - (1 - a).sqrt() * noise_pred) / a.sqrt() + (1 - a_prev).sqrt() * noise_pred
        return latents


def build_pipeline():
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    image_encoder = nn.Sequential(nn.Conv2d(3, 48, 4, stride=4), nn.GELU())
    return IPAdapterPipeline(AdapterUNet(), nn.Embedding(40, 32), image_encoder, ImageProjModel(), ImageTokenRefiner(), alphas_cumprod)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = build_pipeline()
    refs = [torch.rand(2, 3, 16, 16), torch.rand(3, 3, 16, 16)]
    prompt_ids = torch.tensor([[2, 7, 9, 0], [2, 5, 11, 13]])
    latents = pipe(prompt_ids, refs, generator=torch.Generator().manual_seed(0))
    print(tuple(latents.shape), bool(torch.isfinite(latents).all()), round(latents.std().item(), 4))
