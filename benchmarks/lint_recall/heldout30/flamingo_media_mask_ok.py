"""Flamingo-style interleaved image-text model: Perceiver resampler and gated cross-attention.

Each image is reduced to `n_latents` visual tokens by a Perceiver resampler (images have
different numbers of patches, padded per batch). Text tokens cross-attend only to the image of
the most recent `<image>` tag before them, and text before the first image gets no visual
input.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575; conventions.md §2.3 and
§3 item 18; tools.md §0 P5
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGE_ID, PAD = 1, 0


class PerceiverResampler(nn.Module):
    def __init__(self, dim, heads, n_latents):
        super().__init__()
        self.heads = heads
        self.latents = nn.Parameter(torch.randn(n_latents, dim) * 0.02)
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, patches, patch_keep):
        b, p, d = patches.shape
        lat = self.latents.expand(b, -1, -1)
        x = torch.cat([patches, lat], dim=1)
        keep = torch.cat([patch_keep, patch_keep.new_ones(b, lat.shape[1])], dim=1)
        q = self.q(lat).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.kv(x).view(b, x.shape[1], 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return lat + self.o(out.transpose(1, 2).reshape(b, -1, d))


class GatedCrossAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.gate = nn.Parameter(torch.tensor(0.5))

    def forward(self, x, media, media_locations):
        b, t, d = x.shape
        n_media, n_lat = media.shape[1], media.shape[2]
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv(media.flatten(1, 2)).view(b, n_media * n_lat, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        text_time = media_locations.cumsum(dim=-1)
        media_time = torch.arange(1, n_media + 1).repeat_interleave(n_lat)
        text_to_media = text_time[:, :, None] == media_time[None, None, :]
        sim = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
        sim = sim.masked_fill(~text_to_media[:, None], torch.finfo(sim.dtype).min)
        attn = sim.softmax(dim=-1)
        attn = attn.masked_fill((text_time == 0)[:, None, :, None], 0.0)
        out = torch.einsum("bhij,bhjd->bhid", attn, v).transpose(1, 2).reshape(b, t, d)
        return x + torch.tanh(self.gate) * self.o(out)


class FlamingoLM(nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4, n_latents=3, patch_dim=10):
        super().__init__()
        self.heads = heads
        self.patch_proj = nn.Linear(patch_dim, dim)
        self.resampler = PerceiverResampler(dim, heads, n_latents)
        self.embed = nn.Embedding(vocab, dim)
        self.xattn = GatedCrossAttention(dim, heads)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, images, patch_counts):
        b, n_media, p, _ = images.shape
        patch_keep = torch.arange(p)[None, None, :] < patch_counts[:, :, None]
        media = self.resampler(self.patch_proj(images).flatten(0, 1), patch_keep.flatten(0, 1))
        media = media.view(b, n_media, -1, media.shape[-1])
        h = self.xattn(self.embed(input_ids), media, input_ids == IMAGE_ID)
        t, d = h.shape[1], h.shape[2]
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(h + self.proj(a.transpose(1, 2).reshape(b, t, d)))


if __name__ == "__main__":
    torch.manual_seed(0)
    input_ids = torch.tensor([[5, IMAGE_ID, 6, 7, 8, IMAGE_ID, 9, 10], [11, 12, IMAGE_ID, 13, 14, 15, PAD, PAD]])
    images = torch.randn(2, 2, 5, 10)
    patch_counts = torch.tensor([[5, 3], [4, 0]])
    model = FlamingoLM().eval()
    with torch.no_grad():
        logits = model(input_ids, images, patch_counts)
        print("float32 logits", tuple(logits.shape), "nan", torch.isnan(logits).any().item())
        serving = copy.deepcopy(model).half()
        try:
            half_logits = serving(input_ids, images.half(), patch_counts)
            print("float16 vs float32", (half_logits.float() - logits).abs().max().item())
        except RuntimeError as err:
            print("float16 RuntimeError:", err)
