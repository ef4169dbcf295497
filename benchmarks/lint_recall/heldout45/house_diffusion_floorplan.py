"""HouseDiffusion-style vector floorplan generation by denoising room corners.

Layout after aminshabani/house_diffusion (Shabani, Hosseini, Furukawa, CVPR 2023): the corner
set with `room_types`, `corner_indices`, `room_indices` and `src_key_padding_mask`, the three
relational masks `door_mask`, `self_mask` and `gen_mask` of the dataset, `TransformerModel` whose
`EncoderLayer` sums door, room and global attention, the module-level `attention()`, a DDPM
trained on the noise and sampled with `p_sample_loop`, and the `use_fp16` sampling path; on
synthetic 2-4 room apartments cut from a square with a door between neighbouring rooms.

Source: NVIDIA/apex#1052, facebookresearch/fairseq#3575 (conventions.md §3 item 18), conventions.md §2.3
"""

import argparse
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_ROOMS, MAX_POINTS = 4, 16


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def attention(q, k, v, d_k, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 1, -1e9)  # expect: MC501 function
    scores = F.softmax(scores, dim=-1)
    return torch.matmul(scores, v)


class MultiHeadAttention(nn.Module):
    def __init__(self, heads, d_model, dropout=0.1):
        super().__init__()
        self.d_model, self.d_k, self.h = d_model, d_model // heads, heads
        self.q_linear = nn.Linear(d_model, d_model)
        self.v_linear = nn.Linear(d_model, d_model)
        self.k_linear = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        bs = q.size(0)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        q = self.q_linear(q).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        scores = attention(q, k, v, self.d_k, mask.unsqueeze(1))
        return self.out(scores.transpose(1, 2).contiguous().view(bs, -1, self.d_model))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, dropout):
        super().__init__()
        self.norm_1, self.norm_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.door_attn = MultiHeadAttention(heads, d_model)
        self.self_attn = MultiHeadAttention(heads, d_model)
        self.gen_attn = MultiHeadAttention(heads, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_model * 2), nn.ReLU(), nn.Linear(d_model * 2, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, door_mask, self_mask, gen_mask):
        x2 = self.norm_1(x)
        x = x + self.dropout(self.door_attn(x2, x2, x2, door_mask)) \
            + self.dropout(self.self_attn(x2, x2, x2, self_mask)) \
            + self.dropout(self.gen_attn(x2, x2, x2, gen_mask))
        return x + self.dropout(self.ff(self.norm_2(x)))


class TransformerModel(nn.Module):
    def __init__(self, in_channels=2, condition_channels=12, model_channels=64, out_channels=2, num_layers=3, heads=4):
        super().__init__()
        self.model_channels = model_channels
        self.time_embed = nn.Sequential(nn.Linear(model_channels, model_channels), nn.SiLU(),
                                        nn.Linear(model_channels, model_channels))
        self.input_emb = nn.Linear(in_channels, model_channels)
        self.condition_emb = nn.Linear(condition_channels, model_channels)
        self.transformer_layers = nn.ModuleList([EncoderLayer(model_channels, heads, 0.1) for _ in range(num_layers)])
        self.output_linear1 = nn.Linear(model_channels, model_channels)
        self.output_linear2 = nn.Linear(model_channels, model_channels // 2)
        self.output_linear3 = nn.Linear(model_channels // 2, out_channels)

    def forward(self, x, timesteps, **kwargs):
        x = x.permute([0, 2, 1])
        time_emb = self.time_embed(timestep_embedding(timesteps, self.model_channels).to(x.dtype)).unsqueeze(1)
        cond = torch.cat([kwargs[key] for key in ["room_types", "corner_indices", "room_indices"]], 2).to(x.dtype)
        out = self.input_emb(x) + self.condition_emb(cond) + time_emb
        for layer in self.transformer_layers:
            out = layer(out, kwargs["door_mask"], kwargs["self_mask"], kwargs["gen_mask"])
        out = F.silu(self.output_linear1(out))
        out = self.output_linear3(F.silu(self.output_linear2(out)))
        return out.permute([0, 2, 1])


class GaussianDiffusion:
    def __init__(self, num_timesteps=50):
        s = 0.008
        steps = torch.arange(num_timesteps + 1, dtype=torch.float64) / num_timesteps
        alphas_cumprod = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
        self.betas = (1 - alphas_cumprod[1:] / alphas_cumprod[:-1]).clamp(max=0.999).float()
        self.alphas_cumprod = torch.cumprod(1 - self.betas, 0)
        self.num_timesteps = num_timesteps

    def q_sample(self, x_start, t, noise):
        a = self.alphas_cumprod[t][:, None, None]
        return a.sqrt() * x_start + (1 - a).sqrt() * noise

    def training_losses(self, model, x_start, t, model_kwargs):
        noise = torch.randn_like(x_start)
        eps = model(self.q_sample(x_start, t, noise), t, **model_kwargs)
        keep = 1.0 - model_kwargs["src_key_padding_mask"].unsqueeze(1)
        return (((eps - noise) ** 2) * keep).sum() / (keep.sum() * 2)

    @torch.no_grad()
    def p_sample_loop(self, model, shape, model_kwargs, dtype=torch.float32):
        x = torch.randn(shape).to(dtype)
        for i in reversed(range(self.num_timesteps)):
            t = torch.full((shape[0],), i)
            eps = model(x, t, **model_kwargs).float()
            beta, a_bar = self.betas[i], self.alphas_cumprod[i]
            mean = (x.float() - beta / (1 - a_bar).sqrt() * eps) / (1 - beta).sqrt()
            x = (mean + (beta.sqrt() * torch.randn(shape) if i > 0 else 0.0)).to(dtype)
        return x.float()


def random_plan(rng):
    n_rooms = int(rng.integers(2, MAX_ROOMS + 1))
    cut = rng.uniform(-0.3, 0.3)
    rooms = [(-1.0, -1.0, cut, 1.0), (cut, -1.0, 1.0, 1.0)]
    while len(rooms) < n_rooms:
        x0, y0, x1, y1 = rooms.pop(0)
        h = rng.uniform(y0 + 0.3 * (y1 - y0), y1 - 0.3 * (y1 - y0))
        rooms += [(x0, y0, x1, h), (x0, h, x1, y1)]
    rooms.sort(key=lambda r: -(r[2] - r[0]) * (r[3] - r[1]))
    corners = np.zeros((2, MAX_POINTS), dtype=np.float32)
    cond = np.zeros((MAX_POINTS, 12), dtype=np.float32)
    pad = np.ones(MAX_POINTS, dtype=np.float32)
    door_mask, self_mask, gen_mask = np.ones((3, MAX_POINTS, MAX_POINTS), dtype=np.float32)
    n = 4 * len(rooms)
    gen_mask[:n, :n] = 0
    for r, (x0, y0, x1, y1) in enumerate(rooms):
        sl = slice(4 * r, 4 * r + 4)
        corners[:, sl] = np.array([[x0, x1, x1, x0], [y0, y0, y1, y1]])
        cond[sl, r] = 1
        cond[sl, 4:8] = np.eye(4)
        cond[sl, 8 + r] = 1
        pad[sl] = 0
        self_mask[sl, sl] = 0
        for s, (u0, v0, u1, v1) in enumerate(rooms):
            touch_x = (abs(x1 - u0) < 1e-6 or abs(u1 - x0) < 1e-6) and min(y1, v1) - max(y0, v0) > 0.1
            touch_y = (abs(y1 - v0) < 1e-6 or abs(v1 - y0) < 1e-6) and min(x1, u1) - max(x0, u0) > 0.1
            if s != r and (touch_x or touch_y):
                door_mask[sl, 4 * s:4 * s + 4] = 0
    return corners, cond, pad, door_mask, self_mask, gen_mask


def make_batch(rng, n):
    cols = list(zip(*[random_plan(rng) for _ in range(n)]))
    corners, cond, pad, door_mask, self_mask, gen_mask = [torch.from_numpy(np.stack(c)) for c in cols]
    kwargs = {"room_types": cond[..., :4], "corner_indices": cond[..., 4:8], "room_indices": cond[..., 8:],
              "src_key_padding_mask": pad, "door_mask": door_mask, "self_mask": self_mask, "gen_mask": gen_mask}
    return corners, kwargs


def rectangularity(samples, kwargs):
    x, y = samples[:, 0].view(-1, MAX_ROOMS, 4), samples[:, 1].view(-1, MAX_ROOMS, 4)
    err = (y[..., 0] - y[..., 1]).abs() + (x[..., 1] - x[..., 2]).abs() + (y[..., 2] - y[..., 3]).abs() + (x[..., 3] - x[..., 0]).abs()
    real = kwargs["src_key_padding_mask"].view(-1, MAX_ROOMS, 4)[..., 0] == 0
    return (err[real] / 4).mean().item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--use_fp16", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model, diffusion = TransformerModel(), GaussianDiffusion()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        model.train()
        corners, kwargs = make_batch(rng, 32)
        t = torch.randint(0, diffusion.num_timesteps, (32,))
        loss = diffusion.training_losses(model, corners, t, kwargs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: noise MSE {loss.item():.4f}")
    model.eval()
    corners, kwargs = make_batch(np.random.default_rng(1), 64)
    samples = diffusion.p_sample_loop(model, corners.shape, kwargs)
    print(f"float32 samples: mean wall misalignment {rectangularity(samples, kwargs):.3f}"
          f" (noise {rectangularity(torch.randn(corners.shape), kwargs):.3f})")
    if args.use_fp16:
        model_fp16 = copy.deepcopy(model).half()
        kwargs16 = {k: v.half() for k, v in kwargs.items()}
        samples = diffusion.p_sample_loop(model_fp16, corners.shape, kwargs16, dtype=torch.float16)
        print(f"float16 samples: mean wall misalignment {rectangularity(samples, kwargs):.3f}")
