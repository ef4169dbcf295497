"""Layout-to-image generation with grounding tokens (GLIGEN style).

Every box with its phrase becomes a grounding token (Fourier features of the box plus the pooled
phrase embedding). A gated self-attention layer, inserted between the self- and cross-attention
of each transformer block, lets the visual tokens read the grounding tokens; unused object slots
are padded. Grounding is applied only for the first part of the schedule (scheduled sampling).

Source: conventions.md section 2.9; pytorch/pytorch#103963; seed self_attention_mask_guide.txt section 3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_OBJS = 6


def fourier_embed(boxes, num_freqs=8):
    freqs = 2.0 ** torch.arange(num_freqs, dtype=boxes.dtype, device=boxes.device) * math.pi
    x = boxes[..., None] * freqs
    return torch.cat([x.sin(), x.cos()], dim=-1).flatten(-2)


class PositionNet(nn.Module):
    def __init__(self, phrase_dim=32, out_dim=32, num_freqs=8):
        super().__init__()
        self.linears = nn.Sequential(nn.Linear(phrase_dim + 4 * 2 * num_freqs, 64), nn.SiLU(), nn.Linear(64, out_dim))
        self.null_positive_feature = nn.Parameter(torch.zeros(phrase_dim))
        self.null_position_feature = nn.Parameter(torch.zeros(4 * 2 * num_freqs))

    def forward(self, boxes, masks, positive_embeddings):
        m = masks.unsqueeze(-1)
        xyxy = fourier_embed(boxes) * m + (1 - m) * self.null_position_feature
        phrases = positive_embeddings * m + (1 - m) * self.null_positive_feature
        return self.linears(torch.cat([phrases, xyxy], dim=-1))


class GatedSelfAttentionDense(nn.Module):
    def __init__(self, query_dim, context_dim, n_heads=4):
        super().__init__()
        self.linear = nn.Linear(context_dim, query_dim)
        self.norm1, self.norm2 = nn.LayerNorm(query_dim), nn.LayerNorm(query_dim)
        self.qkv = nn.Linear(query_dim, 3 * query_dim, bias=False)
        self.out = nn.Linear(query_dim, query_dim)
        self.ff = nn.Sequential(nn.Linear(query_dim, 4 * query_dim), nn.GELU(), nn.Linear(4 * query_dim, query_dim))
        self.n_heads, self.scale = n_heads, (query_dim // n_heads) ** -0.5
        self.register_parameter("alpha_attn", nn.Parameter(torch.tensor(0.5)))
        self.register_parameter("alpha_dense", nn.Parameter(torch.tensor(0.5)))

    def forward(self, x, objs, obj_keep):
        n_visual = x.shape[1]
        objs = self.linear(objs)
        h = self.norm1(torch.cat([x, objs], dim=1))
        keep = torch.cat([torch.ones(x.shape[:2], dtype=torch.bool, device=x.device), obj_keep], dim=1)
        q, k, v = self.qkv(h).unflatten(-1, (3, self.n_heads, -1)).permute(2, 0, 3, 1, 4)
        sim = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        sim = sim.masked_fill(~keep[:, None, None, :], float("-inf"))
        attn = torch.einsum("bhij,bhjd->bhid", sim.softmax(dim=-1), v).transpose(1, 2).flatten(2)
        x = x + self.alpha_attn.tanh() * self.out(attn)[:, :n_visual]
        return x + self.alpha_dense.tanh() * self.ff(self.norm2(x))


class CrossAttention(nn.Module):
    def __init__(self, dim, context_dim, heads=4):
        super().__init__()
        self.heads = heads
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, dim, bias=False), nn.Linear(context_dim, dim, bias=False), nn.Linear(context_dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, context=None, attention_mask=None):
        context = x if context is None else context
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (self.to_q(x), self.to_k(context), self.to_v(context)))
        return self.to_out(F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask).transpose(1, 2).flatten(2))


class GroundedTransformerBlock(nn.Module):
    def __init__(self, dim, context_dim):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = CrossAttention(dim, dim)
        self.fuser = GatedSelfAttentionDense(dim, context_dim)
        self.attn2 = CrossAttention(dim, context_dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, encoder_hidden_states, encoder_attention_mask, gligen=None):
        x = x + self.attn1(self.norm1(x))
        if gligen is not None:
            x = self.fuser(x, gligen["objs"], gligen["obj_keep"])
        x = x + self.attn2(self.norm2(x), encoder_hidden_states, attention_mask=encoder_attention_mask)
        return x + self.ff(self.norm3(x))


class GligenUNet(nn.Module):
    def __init__(self, channels=4, dim=32, context_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.position_net = PositionNet(context_dim, context_dim)
        self.block = GroundedTransformerBlock(dim, context_dim)
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)

    def forward(self, sample, t, encoder_hidden_states, encoder_attention_mask, cross_attention_kwargs=None):
        b, _, h, w = sample.shape
        x = (self.conv_in(sample) + self.time_mlp(t.view(-1, 1) / 1000)[:, :, None, None]).flatten(2).transpose(1, 2)
        gligen = None
        if cross_attention_kwargs and "gligen" in cross_attention_kwargs:
            g = cross_attention_kwargs["gligen"]
            gligen = {"objs": self.position_net(g["boxes"], g["masks"], g["positive_embeddings"]), "obj_keep": g["masks"].bool()}
        x = self.block(x, encoder_hidden_states, encoder_attention_mask, gligen)
        return self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))


class StableDiffusionGLIGENPipeline:
    def __init__(self, unet, text_embedder, alphas_cumprod):
        self.unet, self.text_embedder, self.alphas_cumprod = unet, text_embedder, alphas_cumprod

    def encode_phrases(self, phrase_ids):
        keep = (phrase_ids != 0).float()
        return (self.text_embedder(phrase_ids) * keep[..., None]).sum(-2) / keep.sum(-1, keepdim=True).clamp(min=1)

    @torch.no_grad()
    def __call__(self, prompt_ids, boxes_per_image, phrase_ids_per_image, num_inference_steps=6, guidance_scale=7.5, gligen_scheduled_sampling_beta=0.5, generator=None):
        b = prompt_ids.shape[0]
        boxes = torch.zeros(b, MAX_OBJS, 4)
        masks = torch.zeros(b, MAX_OBJS)
        phrase_embeds = torch.zeros(b, MAX_OBJS, self.text_embedder.embedding_dim)
        for i, (bx, ph) in enumerate(zip(boxes_per_image, phrase_ids_per_image)):
            n = min(len(bx), MAX_OBJS)
            boxes[i, :n], masks[i, :n], phrase_embeds[i, :n] = bx[:n], 1.0, self.encode_phrases(ph[:n])
        ids = torch.cat([torch.zeros_like(prompt_ids), prompt_ids])
        ids[:b, 0] = 49
        context = self.text_embedder(ids)
        context_keep = (ids != 0)[:, None, None, :]
        gligen = {"boxes": boxes.repeat(2, 1, 1), "masks": masks.repeat(2, 1), "positive_embeddings": phrase_embeds.repeat(2, 1, 1)}
        latents = torch.randn(b, 4, 8, 8, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        num_grounding_steps = int(gligen_scheduled_sampling_beta * num_inference_steps)
        for i, (t, t_prev) in enumerate(zip(ts, ts[1:] + [-1])):
            kwargs = {"gligen": gligen} if i < num_grounding_steps else None
            eps = self.unet(torch.cat([latents] * 2), torch.full((2 * b,), float(t)), context, context_keep, cross_attention_kwargs=kwargs)
            eps_uncond, eps_text = eps.chunk(2)
            eps = eps_uncond + guidance_scale * (eps_text - eps_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            latents = a_prev.sqrt() * (latents - (1 - a).sqrt() * eps) / a.sqrt() + (1 - a_prev).sqrt() * eps
        return latents


if __name__ == "__main__":
    torch.manual_seed(0)
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    pipe = StableDiffusionGLIGENPipeline(GligenUNet(), nn.Embedding(50, 32), alphas_cumprod)
    prompt_ids = torch.tensor([[3, 8, 11, 0, 0], [4, 9, 2, 17, 0]])
    boxes = [torch.tensor([[0.1, 0.1, 0.5, 0.6], [0.5, 0.4, 0.9, 0.9]]), torch.tensor([[0.2, 0.2, 0.8, 0.7]])]
    phrases = [torch.tensor([[5, 6, 0], [7, 0, 0]]), torch.tensor([[12, 13, 14]])]
    latents = pipe(prompt_ids, boxes, phrases, generator=torch.Generator().manual_seed(0))
    print(tuple(latents.shape), bool(torch.isfinite(latents).all()), round(latents.std().item(), 4))
