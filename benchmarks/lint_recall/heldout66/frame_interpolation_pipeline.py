"""Generative in-betweening: a video diffusion model fills the frames between two keyframes.

Clips in a batch ask for different numbers of in-between frames, so the frame axis is padded.
The denoiser alternates spatial attention inside each frame with local temporal attention
across frames; the two keyframes are re-imposed after every step, as temporal inpainting.
Sampling uses Karras sigmas with EDM preconditioning and an Euler solver; the decoded frames
of the padded positions are zeroed before they are returned.

Source: huggingface/transformers PR #27114; NVIDIA-NeMo/Automodel PR #2658
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def karras_sigmas(n, sigma_min=0.002, sigma_max=80.0, rho=7.0):
    ramp = torch.linspace(0, 1, n)
    sigmas = (sigma_max ** (1 / rho) + ramp * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    return torch.cat([sigmas, torch.zeros(1)])


def temporal_window_bias(num_frames, window, dtype):
    idx = torch.arange(num_frames)
    far = (idx[:, None] - idx[None, :]).abs() > window
    return torch.zeros(num_frames, num_frames, dtype=dtype).masked_fill(far, torch.finfo(dtype).min)


class TemporalAttention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, temporal_bias):
        q, k, v = self.to_qkv(self.norm(x)).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale + temporal_bias
        attn = scores.softmax(dim=-1)
        return x + self.to_out(torch.einsum("bhij,bhjd->bhid", attn, v).transpose(1, 2).flatten(2))


class InbetweenDenoiser(nn.Module):
    def __init__(self, channels=4, dim=32, heads=4, window=2):
        super().__init__()
        self.window, self.heads = window, heads
        self.conv_in = nn.Conv2d(2 * channels, dim, 3, padding=1)
        self.sigma_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.spatial_norm = nn.LayerNorm(dim)
        self.spatial_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.temporal = TemporalAttention(dim, heads)
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)

    def forward(self, x, c_noise, keyframe_cond, frame_keep):
        b, f, c, h, w = x.shape
        hs = self.conv_in(torch.cat([x, keyframe_cond], dim=2).flatten(0, 1))
        hs = hs + self.sigma_mlp(c_noise.repeat_interleave(f).view(-1, 1))[:, :, None, None]
        tokens = hs.flatten(2).transpose(1, 2)
        q, k, v = self.spatial_qkv(self.spatial_norm(tokens)).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        tokens = tokens + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        window_bias = temporal_window_bias(f, self.window, tokens.dtype)
        pad_bias = torch.zeros(b, f, dtype=tokens.dtype).masked_fill(~frame_keep, torch.finfo(tokens.dtype).min)
        temporal_bias = window_bias[None, None] + pad_bias[:, None, None, :]  # expect: MC513 sum
        temporal_bias = temporal_bias.repeat_interleave(h * w, dim=0)
        seq = tokens.unflatten(0, (b, f)).permute(0, 2, 1, 3).flatten(0, 1)
        seq = self.temporal(seq, temporal_bias)
        tokens = seq.unflatten(0, (b, h * w)).permute(0, 2, 1, 3).flatten(0, 1)
        return self.conv_out(tokens.transpose(1, 2).reshape(b * f, -1, h, w)).unflatten(0, (b, f))


class EDMPreconditioner(nn.Module):
    def __init__(self, model, sigma_data=0.5):
        super().__init__()
        self.model, self.sigma_data = model, sigma_data

    def forward(self, x, sigma, keyframe_cond, frame_keep):
        sd2 = self.sigma_data**2
        c_skip = sd2 / (sigma**2 + sd2)
        c_out = sigma * self.sigma_data / (sigma**2 + sd2).sqrt()
        c_in = 1 / (sigma**2 + sd2).sqrt()
        c_noise = sigma.log() / 4
        return c_skip * x + c_out * self.model(c_in * x, c_noise.expand(x.shape[0]), keyframe_cond, frame_keep)


class FrameInterpolationPipeline:
    def __init__(self, denoiser, encode, decode):
        self.denoiser, self.encode, self.decode = denoiser, encode, decode

    def prepare_keyframes(self, start_frames, end_frames, num_inbetween):
        b, max_frames = len(num_inbetween), max(num_inbetween) + 2
        start, end = self.encode(start_frames), self.encode(end_frames)
        cond = torch.zeros(b, max_frames, *start.shape[1:])
        known = torch.zeros(b, max_frames, 1, 1, 1)
        frame_keep = torch.zeros(b, max_frames, dtype=torch.bool)
        for i, n in enumerate(num_inbetween):
            cond[i, 0], cond[i, n + 1] = start[i], end[i]
            known[i, 0], known[i, n + 1] = 1.0, 1.0
            frame_keep[i, : n + 2] = True
        return cond, known, frame_keep

    @torch.no_grad()
    def __call__(self, start_frames, end_frames, num_inbetween, num_inference_steps=6, generator=None):
        cond, known, frame_keep = self.prepare_keyframes(start_frames, end_frames, num_inbetween)
        sigmas = karras_sigmas(num_inference_steps)
        x = torch.randn(cond.shape, generator=generator) * sigmas[0]
        for sigma, sigma_next in zip(sigmas[:-1], sigmas[1:]):
            x = known * (cond + sigma * torch.randn(cond.shape, generator=generator)) + (1 - known) * x
            denoised = self.denoiser(x, sigma, cond, frame_keep)
            x = x + (x - denoised) / sigma * (sigma_next - sigma)
        x = known * cond + (1 - known) * x
        frames = self.decode(x.flatten(0, 1)).unflatten(0, x.shape[:2])
        return frames * frame_keep[:, :, None, None, None], frame_keep


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = FrameInterpolationPipeline(EDMPreconditioner(InbetweenDenoiser()), nn.Conv2d(3, 4, 2, stride=2), nn.ConvTranspose2d(4, 3, 2, stride=2))
    start, end = torch.rand(2, 3, 12, 12), torch.rand(2, 3, 12, 12)
    frames, keep = pipe(start, end, num_inbetween=[6, 1], generator=torch.Generator().manual_seed(0))
    print(tuple(frames.shape), keep.sum(1).tolist(), bool(torch.isfinite(frames).all()))
