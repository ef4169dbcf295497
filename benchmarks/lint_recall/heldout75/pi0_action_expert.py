"""pi0-style vision-language-action policy with a flow-matching action expert.

The prefix (image patch tokens and the tokenized instruction, both padded) is
run through the VLM weights; the suffix (one proprioceptive state token and a
chunk of noisy actions with the flow time) through a smaller action expert.
Both share one attention per layer: the prefix attends bidirectionally within
itself, the state token sees the prefix, and the action chunk sees everything
before it.  At inference the prefix is cached once and the action chunk is
integrated over ten Euler steps.

Source: huggingface/lerobot PR #710 (conventions.md section 3 item 19); NVIDIA/apex#1052
(section 3 item 18); conventions.md section 2.3.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PI0Config:
    width: int = 64
    expert_width: int = 64
    n_heads: int = 4
    n_layers: int = 2
    vocab_size: int = 128
    patch_dim: int = 48
    state_dim: int = 8
    action_dim: int = 8
    chunk_size: int = 6
    num_steps: int = 10
    dtype: torch.dtype = torch.bfloat16


def make_att_2d_masks(pad_masks, att_masks):
    cumsum = torch.cumsum(att_masks, dim=1)
    att_2d_masks = cumsum[:, None, :] <= cumsum[:, :, None]
    pad_2d_masks = pad_masks[:, None, :] & pad_masks[:, :, None]
    return att_2d_masks & pad_2d_masks


class MixedAttentionLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.ModuleList([nn.Linear(cfg.width, 3 * cfg.width), nn.Linear(cfg.expert_width, 3 * cfg.width)])
        self.out = nn.ModuleList([nn.Linear(cfg.width, cfg.width), nn.Linear(cfg.width, cfg.expert_width)])
        self.norm = nn.ModuleList([nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.expert_width)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(w, 2 * w), nn.GELU(), nn.Linear(2 * w, w))
                                  for w in (cfg.width, cfg.expert_width)])

    def forward(self, streams, attention_mask, past_kv=None):
        parts, lens = [], []
        for i, x in enumerate(streams):
            if x is None:
                continue
            parts.append(self.qkv[i](self.norm[i](x)).unflatten(-1, (3, self.n_heads, -1)).permute(2, 0, 3, 1, 4))
            lens.append((i, x.size(1)))
        q, k, v = torch.cat(parts, dim=3)
        if past_kv is not None:
            k, v = torch.cat([past_kv[0], k], 2), torch.cat([past_kv[1], v], 2)
        att_weights = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        masked = torch.where(attention_mask[:, None], att_weights, torch.finfo(torch.float32).min)  # expect: MC517 bigneg
        probs = F.softmax(masked, dim=-1).to(v.dtype)
        ctx = (probs @ v).transpose(1, 2).flatten(2)
        outs, start = list(streams), 0
        for i, n in lens:
            h = streams[i] + self.out[i](ctx[:, start:start + n])
            outs[i] = h + self.mlp[i](h)
            start += n
        return outs, (k, v)


class PI0Policy(nn.Module):
    def __init__(self, cfg=PI0Config()):
        super().__init__()
        self.cfg = cfg
        self.patch_proj = nn.Linear(cfg.patch_dim, cfg.width)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.width)
        self.state_proj = nn.Linear(cfg.state_dim, cfg.expert_width)
        self.action_in = nn.Linear(cfg.action_dim, cfg.expert_width)
        self.time_mlp = nn.Sequential(nn.Linear(2 * cfg.expert_width, cfg.expert_width), nn.SiLU())
        self.layers = nn.ModuleList([MixedAttentionLayer(cfg) for _ in range(cfg.n_layers)])
        self.action_out = nn.Linear(cfg.expert_width, cfg.action_dim)

    def embed_prefix(self, patches, img_masks, lang_tokens, lang_masks):
        embs = torch.cat([self.patch_proj(patches), self.tok_emb(lang_tokens) * math.sqrt(self.cfg.width)], dim=1)
        pad_masks = torch.cat([img_masks, lang_masks], dim=1)
        att_masks = torch.zeros_like(pad_masks, dtype=torch.long)
        return embs, pad_masks, att_masks

    def embed_suffix(self, state, noisy_actions, timestep):
        B = state.size(0)
        freqs = torch.exp(-math.log(1000.0) * torch.arange(self.cfg.expert_width // 2, device=state.device) / (self.cfg.expert_width // 2))
        t_emb = torch.cat([torch.sin(timestep[:, None] * freqs), torch.cos(timestep[:, None] * freqs)], dim=-1).to(state.dtype)
        action_time = self.time_mlp(torch.cat([self.action_in(noisy_actions), t_emb[:, None].expand(-1, self.cfg.chunk_size, -1)], -1))
        embs = torch.cat([self.state_proj(state)[:, None], action_time], dim=1)
        pad_masks = torch.ones(B, 1 + self.cfg.chunk_size, dtype=torch.bool, device=state.device)
        att_masks = torch.zeros(B, 1 + self.cfg.chunk_size, dtype=torch.long, device=state.device)
        att_masks[:, :2] = 1
        return embs, pad_masks, att_masks

    def forward(self, batch, noise, time):
        x_t = time[:, None, None] * noise + (1 - time[:, None, None]) * batch["actions"]
        u_t = noise - batch["actions"]
        prefix, prefix_pad, prefix_att = self.embed_prefix(batch["patches"], batch["img_masks"], batch["lang_tokens"], batch["lang_masks"])
        suffix, suffix_pad, suffix_att = self.embed_suffix(batch["state"], x_t, time)
        att_2d = make_att_2d_masks(torch.cat([prefix_pad, suffix_pad], 1), torch.cat([prefix_att, suffix_att], 1))
        streams = [prefix, suffix]
        for layer in self.layers:
            streams, _ = layer(streams, att_2d)
        v_t = self.action_out(streams[1][:, 1:])
        return F.mse_loss(v_t.float(), u_t.float(), reduction="none").mean(-1)

    @torch.no_grad()
    def sample_actions(self, batch):
        B, cfg = batch["state"].size(0), self.cfg
        prefix, prefix_pad, prefix_att = self.embed_prefix(batch["patches"], batch["img_masks"], batch["lang_tokens"], batch["lang_masks"])
        prefix_2d = make_att_2d_masks(prefix_pad, prefix_att)
        cache, streams = [], [prefix, None]
        for layer in self.layers:
            streams, kv = layer(streams, prefix_2d)
            cache.append(kv)
        x_t = torch.randn(B, cfg.chunk_size, cfg.action_dim, dtype=prefix.dtype)
        dt = -1.0 / cfg.num_steps
        for step in range(cfg.num_steps):
            time = torch.full((B,), 1.0 + step * dt, dtype=prefix.dtype)
            suffix, suffix_pad, suffix_att = self.embed_suffix(batch["state"], x_t, time)
            suffix_2d = make_att_2d_masks(suffix_pad, suffix_att)
            prefix_cols = prefix_pad[:, None, :].expand(B, suffix.size(1), prefix_pad.size(1))
            full_2d = torch.cat([prefix_cols, suffix_2d], dim=2)
            streams = [None, suffix]
            for layer, kv in zip(self.layers, cache):
                streams, _ = layer(streams, full_2d, past_kv=kv)
            x_t = x_t + dt * self.action_out(streams[1][:, 1:])
        return x_t


def make_batch(cfg, B=3, n_patches=4, max_lang=5):
    lang_lens = torch.tensor([5, 2, 3])
    return {"patches": torch.randn(B, n_patches, cfg.patch_dim), "img_masks": torch.ones(B, n_patches, dtype=torch.bool),
            "lang_tokens": torch.randint(1, cfg.vocab_size, (B, max_lang)),
            "lang_masks": torch.arange(max_lang)[None] < lang_lens[:, None],
            "state": torch.randn(B, cfg.state_dim), "actions": torch.randn(B, cfg.chunk_size, cfg.action_dim)}


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = PI0Config()
    policy = PI0Policy(cfg).to(cfg.dtype)
    batch = {k: v.to(cfg.dtype) if v.is_floating_point() else v for k, v in make_batch(cfg).items()}
    losses = policy(batch, torch.randn_like(batch["actions"]), torch.rand(3, dtype=cfg.dtype) * 0.999 + 0.001)
    losses.mean().backward()
    actions = policy.sample_actions(batch)
    print("flow loss", round(losses.mean().item(), 4), "actions finite", bool(torch.isfinite(actions).all()))
