"""Genie-style action-conditioned video dynamics model over VQ tokens.

Written after 1x-technologies/1xgpt (genie/st_transformer.py: STBlock with spatial
attention inside each frame and temporal attention across frames at every spatial
position, STTransformerDecoder; genie/config.py GenieConfig) and the Genie paper's
ST-transformer with latent actions added to the frame tokens. The tokenizer is a frozen
stub that already gives one VQ code per 4x4 patch; episodes of different lengths are
padded and their padded frames are hidden from the temporal attention.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §1 (nn.MultiheadAttention row, direction cheat-sheet).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

ACTIONS = {0: (0, 0), 1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}


def temporal_causal_mask(num_frames, device=None):
    return torch.triu(torch.ones(num_frames, num_frames, dtype=torch.bool, device=device), diagonal=1)


@dataclass
class GenieConfig:
    image_vocab_size: int = 16
    num_actions: int = len(ACTIONS)
    T: int = 8
    S: int = 16
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 3
    mlp_ratio: float = 4.0


class STBlock(nn.Module):
    def __init__(self, num_heads, d_model, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, eps=1e-05)
        self.spatial_attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.norm_t = nn.LayerNorm(d_model, eps=1e-05)
        self.temporal_attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-05)
        self.mlp = nn.Sequential(nn.Linear(d_model, int(d_model * mlp_ratio)), nn.GELU(), nn.Linear(int(d_model * mlp_ratio), d_model))

    def forward(self, x_TSC, attn_mask=None, frame_padding_mask=None):
        B, T, S, C = x_TSC.shape
        # 'B T S C -> (B T) S C'
        x_SC = x_TSC.reshape(B * T, S, C)
        h = self.norm1(x_SC)
        x_SC = x_SC + self.spatial_attn(h, h, h, need_weights=False)[0]
        # '(B T) S C -> (B S) T C'
        x_TC = x_SC.reshape(B, T, S, C).transpose(1, 2).reshape(B * S, T, C)
        h = self.norm_t(x_TC)
        key_padding_mask = frame_padding_mask.repeat_interleave(S, dim=0) if frame_padding_mask is not None else None
        x_TC = x_TC + self.temporal_attn(h, h, h, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]
        x_TC = x_TC + self.mlp(self.norm2(x_TC))
        # '(B S) T C -> B T S C'
        return x_TC.reshape(B, S, T, C).transpose(1, 2)


class STTransformerDecoder(nn.Module):
    def __init__(self, cfg: GenieConfig):
        super().__init__()
        self.layers = nn.ModuleList(STBlock(cfg.num_heads, cfg.d_model, cfg.mlp_ratio) for _ in range(cfg.num_layers))

    def forward(self, tgt, causal_mask=None, frame_padding_mask=None):
        x = tgt
        for layer in self.layers:
            x = layer(x, attn_mask=causal_mask, frame_padding_mask=frame_padding_mask)
        return x


class GenieDynamics(nn.Module):
    def __init__(self, cfg: GenieConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embed = nn.Embedding(cfg.image_vocab_size, cfg.d_model)
        self.action_embed = nn.Embedding(cfg.num_actions, cfg.d_model)
        self.pos_embed_TSC = nn.Parameter(torch.randn(1, cfg.T, cfg.S, cfg.d_model) * 0.02)
        self.decoder = STTransformerDecoder(cfg)
        self.out_x_proj = nn.Linear(cfg.d_model, cfg.image_vocab_size)

    def forward(self, input_ids, actions, frame_padding_mask=None):
        B, T, S = input_ids.shape
        x = self.token_embed(input_ids) + self.action_embed(actions)[:, :, None, :] + self.pos_embed_TSC[:, :T, :S]
        causal_mask = temporal_causal_mask(T, device=input_ids.device)
        x = self.decoder(x, causal_mask=causal_mask, frame_padding_mask=frame_padding_mask)
        return self.out_x_proj(x)

    def compute_loss(self, batch):
        logits = self.forward(batch["input_ids"][:, :-1], batch["actions"][:, :-1], batch["frame_padding_mask"][:, :-1])
        target = batch["input_ids"][:, 1:].masked_fill(batch["frame_padding_mask"][:, 1:, None], -100)
        return F.cross_entropy(logits.reshape(-1, self.cfg.image_vocab_size), target.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def rollout(self, first_frame, actions):
        frames = first_frame[:, None]
        for t in range(actions.shape[1] - 1):
            logits = self.forward(frames, actions[:, : t + 1])
            frames = torch.cat([frames, logits[:, -1].argmax(-1)[:, None]], dim=1)
        return frames


def play_episode(num_frames, generator, grid=4):
    background = torch.randint(2, 16, (grid, grid), generator=generator)
    pos = [int(v) for v in torch.randint(0, grid, (2,), generator=generator)]
    frames, actions = [], []
    for _ in range(num_frames):
        frame = background.clone()
        frame[pos[0], pos[1]] = 1
        frames.append(frame.flatten())
        a = int(torch.randint(0, len(ACTIONS), (1,), generator=generator))
        actions.append(a)
        pos = [min(max(pos[0] + ACTIONS[a][0], 0), grid - 1), min(max(pos[1] + ACTIONS[a][1], 0), grid - 1)]
    return {"input_ids": torch.stack(frames), "actions": torch.tensor(actions)}


def collate_episodes(episodes):
    T = max(e["input_ids"].shape[0] for e in episodes)
    batch = {"input_ids": [], "actions": [], "frame_padding_mask": []}
    for e in episodes:
        pad = T - e["input_ids"].shape[0]
        batch["input_ids"].append(F.pad(e["input_ids"], (0, 0, 0, pad)))
        batch["actions"].append(F.pad(e["actions"], (0, pad)))
        batch["frame_padding_mask"].append(torch.arange(T) >= e["input_ids"].shape[0])
    return {k: torch.stack(v) for k, v in batch.items()}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    episodes = [play_episode(int(torch.randint(5, 9, (1,), generator=g)), g) for _ in range(256)]
    model = GenieDynamics(GenieConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(150):
        loss = model.compute_loss(collate_episodes(episodes[(step * 16) % 224 : (step * 16) % 224 + 16]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} next-frame loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        test = collate_episodes([e for e in episodes[224:] if e["input_ids"].shape[0] == 8])
        frames = model.rollout(test["input_ids"][:, 0], test["actions"])
        print("rollout token accuracy:", (frames[:, 1:] == test["input_ids"][:, 1:]).float().mean().item())
        ids, acts = test["input_ids"][:1, :-1], test["actions"][:1, :-1]
        changed = ids.clone()
        changed[:, 4:] = torch.randint(2, 16, changed[:, 4:].shape, generator=g)
        leak = (model(ids, acts)[:, :4] - model(changed, acts)[:, :4]).abs().max().item()
        print("frames 4+ changed, logits of frames 0-3 move by", leak)
