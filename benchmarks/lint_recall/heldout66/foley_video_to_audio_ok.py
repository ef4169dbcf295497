"""Video-to-audio Foley generation with a joint-attention (MMDiT) flow transformer.

Audio latent tokens and per-frame video features are projected by separate weights, attend to
each other in one joint attention, and are modulated by the timestep (adaLN-Zero). Clips shorter
than the model's window are padded with empty frames. Guidance runs the conditional and the
unconditional (null video) passes one after the other to save memory.

Source: conventions.md section 2.6, section 5 item 6
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class FoleyConfig:
    audio_channels: int = 8
    video_dim: int = 24
    hidden: int = 32
    heads: int = 4
    depth: int = 2
    max_frames: int = 8
    audio_tokens: int = 12


def pad_clip_features(clips, max_frames):
    feats = torch.zeros(len(clips), max_frames, clips[0].shape[-1])
    frame_keep = torch.zeros(len(clips), max_frames, dtype=torch.bool)
    for i, clip in enumerate(clips):
        n = min(len(clip), max_frames)
        feats[i, :n], frame_keep[i, :n] = clip[:n], True
    return feats, frame_keep


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class JointAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.add_qkv_proj = nn.Linear(dim, 3 * dim)
        self.norm_q, self.norm_k = nn.RMSNorm(dim // heads), nn.RMSNorm(dim // heads)
        self.to_out, self.to_add_out = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, hidden_states, encoder_hidden_states, joint_keep):
        n_audio = hidden_states.shape[1]
        qkv = torch.cat([self.to_qkv(hidden_states), self.add_qkv_proj(encoder_hidden_states)], dim=1)
        q, k, v = qkv.unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        q, k = self.norm_q(q), self.norm_k(k)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=joint_keep[:, None, None, :])
        out = out.transpose(1, 2).flatten(2)
        return self.to_out(out[:, :n_audio]), self.to_add_out(out[:, n_audio:])


class MMDiTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm1_context = nn.LayerNorm(dim, elementwise_affine=False), nn.LayerNorm(dim, elementwise_affine=False)
        self.norm2, self.norm2_context = nn.LayerNorm(dim, elementwise_affine=False), nn.LayerNorm(dim, elementwise_affine=False)
        self.adaLN_modulation = nn.Linear(dim, 6 * dim)
        self.adaLN_modulation_context = nn.Linear(dim, 6 * dim)
        self.attn = JointAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.ff_context = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, c, temb, joint_keep):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(F.silu(temb)).chunk(6, dim=-1)
        c_shift_msa, c_scale_msa, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = self.adaLN_modulation_context(F.silu(temb)).chunk(6, dim=-1)
        attn_out, ctx_out = self.attn(modulate(self.norm1(x), shift_msa, scale_msa), modulate(self.norm1_context(c), c_shift_msa, c_scale_msa), joint_keep)
        x = x + gate_msa[:, None] * attn_out
        c = c + c_gate_msa[:, None] * ctx_out
        x = x + gate_mlp[:, None] * self.ff(modulate(self.norm2(x), shift_mlp, scale_mlp))
        c = c + c_gate_mlp[:, None] * self.ff_context(modulate(self.norm2_context(c), c_shift_mlp, c_scale_mlp))
        return x, c


class FoleyTransformer(nn.Module):
    def __init__(self, config: FoleyConfig):
        super().__init__()
        self.config = config
        self.audio_in = nn.Linear(config.audio_channels, config.hidden)
        self.video_in = nn.Linear(config.video_dim, config.hidden)
        self.null_video = nn.Parameter(torch.zeros(config.max_frames, config.hidden))
        self.frame_pos = nn.Parameter(torch.randn(config.max_frames, config.hidden) * 0.02)
        self.t_embedder = nn.Sequential(nn.Linear(1, config.hidden), nn.SiLU(), nn.Linear(config.hidden, config.hidden))
        self.blocks = nn.ModuleList(MMDiTBlock(config.hidden, config.heads) for _ in range(config.depth))
        self.norm_out = nn.LayerNorm(config.hidden)
        self.proj_out = nn.Linear(config.hidden, config.audio_channels)

    def forward(self, audio_latents, timestep, video_feats, frame_keep, drop_video=False):
        x = self.audio_in(audio_latents)
        if drop_video:
            c = self.null_video.expand(x.shape[0], -1, -1) + self.frame_pos
            frame_keep = torch.ones_like(frame_keep)
        else:
            c = self.video_in(video_feats) + self.frame_pos
        temb = self.t_embedder(timestep.view(-1, 1))
        audio_keep = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        joint_keep = torch.cat([audio_keep, frame_keep], dim=1)
        for block in self.blocks:
            x, c = block(x, c, temb, joint_keep)
        return self.proj_out(self.norm_out(x))


class FlowMatchHeunScheduler:
    def set_timesteps(self, num_inference_steps):
        self.sigmas = torch.linspace(1.0, 0.0, num_inference_steps + 1)

    def sample(self, velocity_fn, latents):
        for s, s_next in zip(self.sigmas[:-1], self.sigmas[1:]):
            v = velocity_fn(latents, s)
            guess = latents + (s_next - s) * v
            if s_next > 0:
                v = 0.5 * (v + velocity_fn(guess, s_next))
            latents = latents + (s_next - s) * v
        return latents


class FoleyPipeline:
    def __init__(self, transformer, scheduler, decoder):
        self.transformer, self.scheduler, self.decoder = transformer, scheduler, decoder

    @torch.no_grad()
    def __call__(self, clips, num_inference_steps=4, guidance_scale=4.5, generator=None):
        cfg = self.transformer.config
        video_feats, frame_keep = pad_clip_features(clips, cfg.max_frames)
        latents = torch.randn(len(clips), cfg.audio_tokens, cfg.audio_channels, generator=generator)

        def velocity_fn(x, sigma):
            t = sigma.expand(x.shape[0])
            v_cond = self.transformer(x, t, video_feats, frame_keep)
            if guidance_scale <= 1.0:
                return v_cond
            v_uncond = self.transformer(x, t, video_feats, frame_keep, drop_video=True)
            return v_uncond + guidance_scale * (v_cond - v_uncond)

        self.scheduler.set_timesteps(num_inference_steps)
        latents = self.scheduler.sample(velocity_fn, latents)
        return self.decoder(latents.transpose(1, 2)).flatten(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    config = FoleyConfig()
    pipe = FoleyPipeline(FoleyTransformer(config), FlowMatchHeunScheduler(), nn.ConvTranspose1d(config.audio_channels, 1, 16, stride=16))
    clip = torch.randn(5, config.video_dim)
    waveform = pipe([clip], generator=torch.Generator().manual_seed(0))
    print(tuple(waveform.shape), bool(torch.isfinite(waveform).all()), round(waveform.std().item(), 4))
