"""Token world model for Atari imagination (IRIS layout).

Each frame is encoded by a discrete autoencoder into ``tokens_per_frame`` codes,
followed by one action token; the GPT predicts the next frame's tokens, the
reward and the episode end.  Imagination runs the model step by step on a
key/value cache, as the actor-critic trains inside it.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask);
pytorch/pytorch#103749 (conventions.md section 3 item 5); conventions.md section 2.3.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TransformerConfig:
    tokens_per_frame: int = 4
    max_blocks: int = 6
    num_layers: int = 2
    num_heads: int = 2
    embed_dim: int = 32
    obs_vocab_size: int = 16
    act_vocab_size: int = 4

    @property
    def tokens_per_block(self):
        return self.tokens_per_frame + 1

    @property
    def max_tokens(self):
        return self.tokens_per_block * self.max_blocks


class KVCache:
    def __init__(self, n, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers
        self.size = 0

    def update(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class SelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.embed_dim, 3 * config.embed_dim)
        self.proj = nn.Linear(config.embed_dim, config.embed_dim)
        causal = torch.triu(torch.full((config.max_tokens, config.max_tokens), float("-inf")))  # expect: MC503 diagonal
        self.register_buffer("causal_bias", causal, persistent=False)

    def forward(self, x, cache=None):
        B, T, C = x.shape
        L = cache.size if cache is not None else 0
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att + self.causal_bias[L:L + T, :L + T]
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.embed_dim)
        self.ln2 = nn.LayerNorm(config.embed_dim)
        self.attn = SelfAttention(config, layer_idx)
        self.mlp = nn.Sequential(nn.Linear(config.embed_dim, 4 * config.embed_dim), nn.GELU(),
                                 nn.Linear(4 * config.embed_dim, config.embed_dim))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


def block_pattern(config, kind):
    pattern = torch.zeros(config.tokens_per_block, dtype=torch.bool)
    if kind == "obs":
        pattern[:-1] = True
        pattern[-2] = False
        pattern[-1] = True
    else:
        pattern[-1] = True
    return pattern


class WorldModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.obs_emb = nn.Embedding(config.obs_vocab_size, config.embed_dim)
        self.act_emb = nn.Embedding(config.act_vocab_size, config.embed_dim)
        self.pos_emb = nn.Embedding(config.max_tokens, config.embed_dim)
        self.blocks = nn.ModuleList([Block(config, i) for i in range(config.num_layers)])
        self.ln_f = nn.LayerNorm(config.embed_dim)
        self.head_obs = nn.Linear(config.embed_dim, config.obs_vocab_size)
        self.head_rew = nn.Linear(config.embed_dim, 3)
        self.head_end = nn.Linear(config.embed_dim, 2)
        self.slices = {"obs": block_pattern(config, "obs"), "act": block_pattern(config, "act")}

    def embed(self, tokens, start):
        kinds = (torch.arange(start, start + tokens.size(1)) % self.config.tokens_per_block) == self.config.tokens_per_frame
        emb = torch.where(kinds[None, :, None], self.act_emb(tokens.clamp(max=self.config.act_vocab_size - 1)),
                          self.obs_emb(tokens))
        return emb + self.pos_emb(torch.arange(start, start + tokens.size(1)))

    def forward(self, tokens, cache=None):
        start = cache.size if cache is not None else 0
        x = self.embed(tokens, start)
        for block in self.blocks:
            x = block(x, cache)
        if cache is not None:
            cache.size += tokens.size(1)
        x = self.ln_f(x)
        positions = torch.arange(start, start + tokens.size(1)) % self.config.tokens_per_block
        obs_sel = self.slices["obs"][positions]
        act_sel = self.slices["act"][positions]
        return self.head_obs(x[:, obs_sel]), self.head_rew(x[:, act_sel]), self.head_end(x[:, act_sel])

    def compute_loss(self, obs_tokens, actions, rewards, ends, mask_padding):
        tokens = torch.cat([obs_tokens, actions.unsqueeze(-1)], dim=-1).flatten(1)
        logits_obs, logits_rew, logits_end = self(tokens)
        mask_fill = ~mask_padding
        labels_obs = obs_tokens.masked_fill(mask_fill.unsqueeze(-1), -100).flatten(1)[:, 1:]
        labels_rew = (rewards.sign() + 1).long().masked_fill(mask_fill, -100)
        labels_end = ends.long().masked_fill(mask_fill, -100)
        loss_obs = F.cross_entropy(logits_obs[:, :-1].flatten(0, 1), labels_obs.flatten(), ignore_index=-100)
        loss_rew = F.cross_entropy(logits_rew.flatten(0, 1), labels_rew.flatten(), ignore_index=-100)
        loss_end = F.cross_entropy(logits_end.flatten(0, 1), labels_end.flatten(), ignore_index=-100)
        return loss_obs + loss_rew + loss_end


@torch.no_grad()
def imagine(world_model, first_obs_tokens, policy_actions):
    cfg = world_model.config
    cache = KVCache(first_obs_tokens.size(0), cfg.num_layers)
    world_model(first_obs_tokens, cache)
    frames, rewards = [first_obs_tokens], []
    for action in policy_actions:
        token, next_tokens = action.unsqueeze(-1), []
        for k in range(1 + cfg.tokens_per_frame):
            logits_obs, logits_rew, _ = world_model(token, cache)
            if k == 0:
                rewards.append(logits_rew.argmax(-1).squeeze(-1) - 1)
            if k < cfg.tokens_per_frame:
                token = logits_obs[:, -1].argmax(-1, keepdim=True)
                next_tokens.append(token)
        frames.append(torch.cat(next_tokens, dim=1))
    return torch.stack(frames, 1), torch.stack(rewards, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = TransformerConfig()
    wm = WorldModel(cfg)
    B, T = 3, cfg.max_blocks
    obs_tokens = torch.randint(cfg.obs_vocab_size, (B, T, cfg.tokens_per_frame))
    actions = torch.randint(cfg.act_vocab_size, (B, T))
    rewards = torch.randn(B, T)
    ends = torch.zeros(B, T, dtype=torch.bool)
    mask_padding = torch.ones(B, T, dtype=torch.bool)
    mask_padding[0, :2] = False
    loss = wm.compute_loss(obs_tokens, actions, rewards, ends, mask_padding)
    loss.backward()
    frames, imagined_rewards = imagine(wm, obs_tokens[:, 0], [torch.randint(cfg.act_vocab_size, (B,)) for _ in range(3)])
    print("loss", round(loss.item(), 4), "imagined", tuple(frames.shape), imagined_rewards.tolist())
