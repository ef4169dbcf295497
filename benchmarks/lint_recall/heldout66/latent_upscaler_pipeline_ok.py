"""Diffusion super-resolution (x2 latent upscaler in the Stable Diffusion upscaler layout).

The low-resolution image is noise-augmented, concatenated with the latents and its noise level
is given as a class label; the denoiser uses Swin-style window attention, padding the latent grid
up to a multiple of the window and masking the padded keys. The pipeline loads in float16 when
asked, as `torch_dtype=torch.float16` does in diffusers.

Source: NVIDIA/apex#1052; huggingface/lerobot PR #710
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def window_partition(x, window_size):
    b, h, w, c = x.shape
    x = x.view(b, h // window_size, window_size, w // window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window_size * window_size, c)


def window_reverse(windows, window_size, h, w):
    b = windows.shape[0] // ((h // window_size) * (w // window_size))
    x = windows.view(b, h // window_size, w // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, -1)


def window_key_bias(keep, dtype):
    bias = torch.full(keep.shape, torch.finfo(dtype).min, dtype=dtype, device=keep.device)
    return bias.masked_fill(keep, 0.0)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size=4, num_heads=4):
        super().__init__()
        self.window_size, self.num_heads, self.scale = window_size, num_heads, (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window_size - 1
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window_size - 1) + rel[..., 1], persistent=False)

    def forward(self, x, key_bias):
        bw, n, c = x.shape
        q, k, v = self.qkv(x).reshape(bw, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        rpb = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + rpb.permute(2, 0, 1).to(attn.dtype)[None] + key_bias[:, None, None, :]
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class UpscalerUNet(nn.Module):
    def __init__(self, latent_channels=4, image_channels=3, dim=32, window_size=4, num_noise_levels=350):
        super().__init__()
        self.window_size = window_size
        self.conv_in = nn.Conv2d(latent_channels + image_channels, dim, 3, padding=1)
        self.time_embedding = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.class_embedding = nn.Embedding(num_noise_levels + 1, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.conv_out = nn.Conv2d(dim, latent_channels, 3, padding=1)

    def forward(self, sample, timestep, class_labels):
        b, _, h, w = sample.shape
        emb = self.time_embedding(timestep.to(sample.dtype).view(-1, 1) / 1000) + self.class_embedding(class_labels)
        x = (self.conv_in(sample) + emb[:, :, None, None]).permute(0, 2, 3, 1)
        ws = self.window_size
        pad_h, pad_w = (-h) % ws, (-w) % ws
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
        valid = F.pad(torch.ones(b, h, w, 1, dtype=torch.bool, device=x.device), (0, 0, 0, pad_w, 0, pad_h), value=False)
        key_bias = window_key_bias(window_partition(valid, ws).squeeze(-1), x.dtype)
        windows = window_partition(x, ws)
        windows = windows + self.attn(self.norm1(windows), key_bias)
        windows = windows + self.mlp(self.norm2(windows))
        x = window_reverse(windows, ws, h + pad_h, w + pad_w)[:, :h, :w]
        return self.conv_out(x.permute(0, 3, 1, 2))


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000, prediction_type="v_prediction"):
        betas = torch.linspace(0.0001, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1 - betas, 0)
        self.num_train_timesteps, self.prediction_type = num_train_timesteps, prediction_type

    def add_noise(self, x, noise, t):
        a = self.alphas_cumprod[t].view(-1, *[1] * (x.dim() - 1)).to(x.dtype)
        return a.sqrt() * x + (1 - a).sqrt() * noise

    def step(self, model_output, t, t_prev, sample):
        a = self.alphas_cumprod[t].to(sample.dtype)
        a_prev = self.alphas_cumprod[t_prev].to(sample.dtype) if t_prev >= 0 else torch.ones((), dtype=sample.dtype)
        if self.prediction_type == "v_prediction":
            x0 = a.sqrt() * sample - (1 - a).sqrt() * model_output
            eps = a.sqrt() * model_output + (1 - a).sqrt() * sample
        else:
            eps = model_output
            x0 = (sample - (1 - a).sqrt() * eps) / a.sqrt()
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps


class LatentUpscalePipeline:
    def __init__(self, unet, low_res_scheduler, scheduler, vae_decoder, torch_dtype=torch.float32):
        self.unet, self.low_res_scheduler, self.scheduler, self.vae_decoder = unet, low_res_scheduler, scheduler, vae_decoder
        self.dtype = torch_dtype
        self.unet.to(torch_dtype)
        self.vae_decoder.to(torch_dtype)

    @torch.no_grad()
    def __call__(self, image, num_inference_steps=5, noise_level=20, generator=None):
        image = F.interpolate(image, scale_factor=2, mode="bilinear").to(self.dtype)
        b, _, h, w = image.shape
        noise_level = torch.full((b,), noise_level, dtype=torch.long)
        noise = torch.randn(image.shape, generator=generator).to(self.dtype)
        image = self.low_res_scheduler.add_noise(image, noise, noise_level)
        latents = torch.randn(b, 4, h, w, generator=generator).to(self.dtype)
        ts = torch.linspace(self.scheduler.num_train_timesteps - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            model_input = torch.cat([latents, image], dim=1)
            model_output = self.unet(model_input, torch.full((b,), t), class_labels=noise_level)
            latents = self.scheduler.step(model_output, t, t_prev, latents)
        return self.vae_decoder(latents).float().clamp(-1, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = LatentUpscalePipeline(UpscalerUNet(), DDPMScheduler(), DDPMScheduler(), nn.Conv2d(4, 3, 1))
    low_res = torch.rand(2, 3, 5, 7) * 2 - 1
    upscaled = pipe(low_res, generator=torch.Generator().manual_seed(0))
    print(tuple(upscaled.shape), bool(torch.isfinite(upscaled).all()), round(upscaled.mean().item(), 4))
