"""Audio-driven talking-head animation from one portrait (Hallo / EMO style denoising UNet).

Every video frame cross-attends to a window of speech features centred on it (wav2vec-like
frames, padded at the ends of the clip), reference-image features are appended to the keys of
the spatial self-attention, and the audio branch is weighted by a face-region mask. On CUDA the
pipeline runs the denoiser in float16.

Source: NVIDIA/apex#1052; NVIDIA/apex#1105; facebookresearch/fairseq#3575; seed masked_fill_inplace.txt
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

AUDIO_CONTEXT = 2


def audio_windows(audio_feats, num_frames, context=AUDIO_CONTEXT):
    b, t, d = audio_feats.shape
    padded = F.pad(audio_feats, (0, 0, context, context))
    idx = torch.arange(num_frames)[:, None] * t // num_frames + torch.arange(2 * context + 1)[None, :]
    windows = padded[:, idx]
    keep = (idx >= context) & (idx < t + context)
    return windows.reshape(b * num_frames, -1, d), keep[None].expand(b, -1, -1).reshape(b * num_frames, -1)


def face_region_mask(boxes, height, width):
    ys = torch.arange(height)[None, :, None]
    xs = torch.arange(width)[None, None, :]
    x0, y0, x1, y1 = (boxes[:, i, None, None] for i in range(4))
    return ((ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1)).float()


class AudioAttnProcessor:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        k = attn.to_k(encoder_hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        v = attn.to_v(encoder_hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * attn.scale
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask[:, None, None, :], -1e9)  # expect: MC501 literal
        probs = scores.softmax(dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", probs, v).transpose(1, 2).flatten(2)
        return attn.to_out(out)


class RefAttnProcessor:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else torch.cat([hidden_states, encoder_hidden_states], 1)
        q, k, v = (t.unflatten(-1, (attn.heads, -1)).transpose(1, 2) for t in (attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)))
        return attn.to_out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2))


class Attention(nn.Module):
    def __init__(self, dim, cross_dim=None, heads=4, processor=None):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(cross_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(cross_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = processor

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states=encoder_hidden_states, attention_mask=attention_mask)


class AudioDrivenUNet(nn.Module):
    def __init__(self, latent_channels=4, dim=32, audio_dim=24):
        super().__init__()
        self.conv_in = nn.Conv2d(latent_channels, dim, 3, padding=1)
        self.time_proj = nn.Linear(dim, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ref_attn = Attention(dim, processor=RefAttnProcessor())
        self.audio_attn = Attention(dim, cross_dim=audio_dim, processor=AudioAttnProcessor())
        self.temporal_attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.conv_out = nn.Conv2d(dim, latent_channels, 3, padding=1)

    def forward(self, sample, timestep, ref_tokens, audio_embeds, audio_keep, face_mask, num_frames):
        bf, _, h, w = sample.shape
        half = self.conv_in.out_channels // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=sample.device) / half)
        temb = self.time_proj(torch.cat([(timestep * freqs).cos(), (timestep * freqs).sin()]).to(sample.dtype))
        x = (self.conv_in(sample) + temb[None, :, None, None]).flatten(2).transpose(1, 2)
        x = x + self.ref_attn(self.norm1(x), ref_tokens.repeat_interleave(num_frames, dim=0))
        audio_out = self.audio_attn(self.norm2(x), audio_embeds, attention_mask=audio_keep)
        x = x + audio_out * face_mask.flatten(1)[..., None]
        xt = x.unflatten(0, (-1, num_frames)).transpose(1, 2).flatten(0, 1)
        causal = torch.ones(num_frames, num_frames, dtype=torch.bool, device=x.device).triu(1)
        n = self.norm3(xt)
        xt = xt + self.temporal_attn(n, n, n, attn_mask=causal, need_weights=False)[0]
        x = xt.unflatten(0, (-1, h * w)).transpose(1, 2).flatten(0, 1)
        return self.conv_out(x.transpose(1, 2).reshape(bf, -1, h, w))


class DDIMScheduler:
    def __init__(self, num_train_timesteps=1000):
        self.num_train_timesteps = num_train_timesteps
        self.alphas_cumprod = torch.cos(torch.linspace(0, 1, num_train_timesteps + 1)[1:] * math.pi / 2 * 0.98) ** 2

    def set_timesteps(self, n):
        self.timesteps = torch.linspace(self.num_train_timesteps - 1, 0, n).long()

    def step(self, eps, t, prev_t, x):
        a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[prev_t] if prev_t >= 0 else torch.tensor(1.0)
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps


class TalkingHeadPipeline:
    def __init__(self, unet, audio_proj, ref_encoder, scheduler):
        self.unet, self.audio_proj, self.ref_encoder, self.scheduler = unet, audio_proj, ref_encoder, scheduler
        self.dtype = torch.float16 if torch.cuda.is_available() else torch.float32

    def to(self, dtype):
        self.dtype = dtype
        for m in (self.unet, self.audio_proj, self.ref_encoder):
            m.to(dtype=dtype)
        return self

    @torch.no_grad()
    def __call__(self, ref_image, audio_feats, face_boxes, num_frames=6, num_inference_steps=4, generator=None):
        b = ref_image.shape[0]
        ref_tokens = self.ref_encoder(ref_image.to(self.dtype)).flatten(2).transpose(1, 2)
        windows, audio_keep = audio_windows(audio_feats.to(self.dtype), num_frames)
        audio_embeds = self.audio_proj(windows)
        h, w = ref_image.shape[-2] // 2, ref_image.shape[-1] // 2
        face_mask = face_region_mask(face_boxes, h, w).repeat_interleave(num_frames, dim=0).to(self.dtype)
        latents = torch.randn(b * num_frames, 4, h, w, generator=generator).to(self.dtype)
        self.scheduler.set_timesteps(num_inference_steps)
        ts = self.scheduler.timesteps.tolist() + [-1]
        for t, prev_t in zip(ts[:-1], ts[1:]):
            eps = self.unet(latents, torch.tensor(float(t)), ref_tokens, audio_embeds, audio_keep, face_mask, num_frames)
            latents = self.scheduler.step(eps, t, prev_t, latents)
        return latents.unflatten(0, (b, num_frames))


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = TalkingHeadPipeline(AudioDrivenUNet(), nn.Linear(16, 24), nn.Conv2d(3, 32, 2, stride=2), DDIMScheduler())
    ref = torch.rand(2, 3, 16, 16)
    audio = torch.randn(2, 10, 16)
    boxes = torch.tensor([[2, 2, 6, 7], [1, 3, 7, 8]])
    video = pipe(ref, audio, boxes, generator=torch.Generator().manual_seed(0))
    print(tuple(video.shape), bool(torch.isfinite(video).all()))
