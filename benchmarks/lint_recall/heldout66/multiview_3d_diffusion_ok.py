"""Text-to-multi-view diffusion for 3-D asset generation (MVDream style).

Four camera views of one object are denoised together: the self-attention of every block runs
over the tokens of all views of the object at once ("3-D attention"), cameras enter through the
timestep embedding, and the prompt through cross-attention. Objects in the training set with
fewer rendered views are padded with empty views.

Source: pytorch/pytorch#103749; Biohub/esm#299
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_VIEWS = 4


def orbit_cameras(num_views, elevation=15.0, radius=2.0):
    cams = []
    for i in range(num_views):
        az, el = math.radians(360.0 * i / num_views), math.radians(elevation)
        eye = torch.tensor([radius * math.cos(el) * math.cos(az), radius * math.cos(el) * math.sin(az), radius * math.sin(el)])
        c2w = torch.eye(4)
        c2w[:3, 3] = eye
        cams.append(c2w.flatten())
    return torch.stack(cams)


class MultiViewAttnProcessor:
    def __init__(self, num_views=NUM_VIEWS):
        self.num_views = num_views

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        bv, n, c = hidden_states.shape
        x = hidden_states.reshape(bv // self.num_views, self.num_views * n, c)
        q, k, v = (t.unflatten(-1, (attn.heads, -1)).transpose(1, 2) for t in (attn.to_q(x), attn.to_k(x), attn.to_v(x)))
        scores = q @ k.transpose(-1, -2) * attn.scale
        if attention_mask is not None:
            token_keep = attention_mask.repeat_interleave(n, dim=1)
            pair = token_keep[:, :, None] & token_keep[:, None, :]
            scores = scores.masked_fill(~token_keep[:, None, None, :], float("-inf"))
        probs = scores.softmax(dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(bv // self.num_views, self.num_views * n, c)
        return attn.to_out(out.reshape(bv, n, c))


class CrossAttnProcessor:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        k, v = (t.unflatten(-1, (attn.heads, -1)).transpose(1, 2) for t in (attn.to_k(encoder_hidden_states), attn.to_v(encoder_hidden_states)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return attn.to_out(out.transpose(1, 2).flatten(2))


class Attention(nn.Module):
    def __init__(self, dim, context_dim=None, heads=4, processor=None):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = processor

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask)


class MultiViewBlock(nn.Module):
    def __init__(self, dim, context_dim):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim, processor=MultiViewAttnProcessor())
        self.attn2 = Attention(dim, context_dim, processor=CrossAttnProcessor())
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, context, context_keep, view_keep):
        x = x + self.attn1(self.norm1(x), attention_mask=view_keep)
        x = x + self.attn2(self.norm2(x), context, attention_mask=context_keep[:, None, None, :])
        return x + self.ff(self.norm3(x))


class MultiViewUNet(nn.Module):
    def __init__(self, in_channels=4, dim=32, context_dim=32, depth=2):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, dim, 3, padding=1)
        self.time_embed = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.camera_embed = nn.Sequential(nn.Linear(16, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(MultiViewBlock(dim, context_dim) for _ in range(depth))
        self.conv_out = nn.Conv2d(dim, in_channels, 3, padding=1)

    def forward(self, x, timesteps, context, context_keep, camera, view_keep=None):
        bv, _, h, w = x.shape
        emb = self.time_embed(timesteps[:, None].float() / 1000) + self.camera_embed(camera)
        tokens = (self.conv_in(x) + emb[:, :, None, None]).flatten(2).transpose(1, 2)
        for block in self.blocks:
            tokens = block(tokens, context, context_keep, view_keep)
        return self.conv_out(tokens.transpose(1, 2).reshape(bv, -1, h, w))


def cosine_alphas_cumprod(num_train_timesteps=1000):
    t = torch.linspace(0, 1, num_train_timesteps + 1)
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return (f[1:] / f[0]).clamp(min=1e-4)


class MVDreamPipeline:
    def __init__(self, unet, text_embedder, alphas_cumprod):
        self.unet, self.text_embedder, self.alphas_cumprod = unet, text_embedder, alphas_cumprod

    def encode_prompt(self, token_ids, pad_id=0):
        keep = token_ids != pad_id
        context = self.text_embedder(token_ids)
        return context.repeat_interleave(NUM_VIEWS, 0), keep.repeat_interleave(NUM_VIEWS, 0)

    def training_step(self, views, token_ids, view_keep):
        b = views.shape[0]
        context, context_keep = self.encode_prompt(token_ids)
        t = torch.randint(0, len(self.alphas_cumprod), (b,)).repeat_interleave(NUM_VIEWS)
        a = self.alphas_cumprod[t][:, None, None, None]
        x0 = views.flatten(0, 1)
        noise = torch.randn_like(x0)
        eps = self.unet(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, context, context_keep, orbit_cameras(NUM_VIEWS).repeat(b, 1), view_keep)
        per_view = F.mse_loss(eps, noise, reduction="none").mean(dim=(1, 2, 3))
        return per_view[view_keep.flatten()].mean()

    @torch.no_grad()
    def __call__(self, token_ids, num_inference_steps=5, guidance_scale=5.0, height=8, width=8, generator=None):
        b = token_ids.shape[0]
        context, context_keep = self.encode_prompt(torch.cat([token_ids, torch.zeros_like(token_ids)]))
        context_keep[b * NUM_VIEWS :, 0] = True
        cameras = orbit_cameras(NUM_VIEWS).repeat(2 * b, 1)
        x = torch.randn(b * NUM_VIEWS, 4, height, width, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            eps = self.unet(torch.cat([x, x]), torch.full((2 * b * NUM_VIEWS,), t), context, context_keep, cameras)
            eps_text, eps_uncond = eps.chunk(2)
            eps = eps_uncond + guidance_scale * (eps_text - eps_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            x = a_prev.sqrt() * (x - (1 - a).sqrt() * eps) / a.sqrt() + (1 - a_prev).sqrt() * eps
        return x.unflatten(0, (b, NUM_VIEWS))


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = MVDreamPipeline(MultiViewUNet(), nn.Embedding(50, 32), cosine_alphas_cumprod())
    token_ids = torch.tensor([[5, 9, 14, 3, 0, 0], [7, 22, 0, 0, 0, 0]])
    views = torch.randn(2, NUM_VIEWS, 4, 8, 8)
    view_keep = torch.tensor([[True, True, True, True], [True, True, True, False]])
    optimizer = torch.optim.AdamW(pipe.unet.parameters(), lr=1e-4)
    for _ in range(2):
        loss = pipe.training_step(views, token_ids, view_keep)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("loss", round(loss.item(), 4))
    print(tuple(pipe(token_ids[:1], generator=torch.Generator().manual_seed(0)).shape))
