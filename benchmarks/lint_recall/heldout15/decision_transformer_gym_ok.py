"""Held-out 15 (correct twin): a Decision Transformer for offline RL on continuous-control (Gym / D4RL) data, in
the style of the minimal PyTorch re-implementations: returns-to-go, states and actions are
embedded and interleaved as (R_1, s_1, a_1, R_2, ...), a GPT block with a registered causal mask
buffer, and the action predicted from each state token. Contexts shorter than K at the start of
an episode are left-padded and masked with `traj_mask`.

Source: lucidrains/flamingo-pytorch#10 ("you are not using the inplace version of the function
... this line does not have an effect"), QwenLM/Qwen#933 (`attention_mask.masked_fill(...)`
without assignment, so the mask was never causal), seed article `masked_fill_` (masked_fill
returns a new tensor and leaves the original unchanged), `maskcheck explain MC525`. The causal
fill is a statement: its result is discarded and every token sees the whole context.
Twin: the causal fill is assigned: `weights = weights.masked_fill(...)`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class MaskedCausalAttention(nn.Module):
    def __init__(self, h_dim: int, max_T: int, n_heads: int, drop_p: float):
        super().__init__()
        self.n_heads = n_heads
        self.max_T = max_T
        self.q_net, self.k_net, self.v_net = nn.Linear(h_dim, h_dim), nn.Linear(h_dim, h_dim), nn.Linear(h_dim, h_dim)
        self.proj_net = nn.Linear(h_dim, h_dim)
        self.att_drop, self.proj_drop = nn.Dropout(drop_p), nn.Dropout(drop_p)
        mask = torch.tril(torch.ones((max_T, max_T))).view(1, 1, max_T, max_T)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # x: (B, T, C); keep: (B, T) bool, False at the left padding
        B, T, C = x.shape
        N, D = self.n_heads, C // self.n_heads
        q = self.q_net(x).view(B, T, N, D).transpose(1, 2)
        k = self.k_net(x).view(B, T, N, D).transpose(1, 2)
        v = self.v_net(x).view(B, T, N, D).transpose(1, 2)
        weights = q @ k.transpose(2, 3) / math.sqrt(D)
        weights = weights.masked_fill(self.mask[..., :T, :T] == 0, float("-inf"))
        # finite minimum for padding, so the (padded) rows that see only padding stay finite
        weights = weights.masked_fill(~keep[:, None, None, :], torch.finfo(weights.dtype).min)
        normalized_weights = self.att_drop(F.softmax(weights, dim=-1))
        attention = (normalized_weights @ v).transpose(1, 2).contiguous().view(B, T, N * D)
        return self.proj_drop(self.proj_net(attention))


class Block(nn.Module):
    def __init__(self, h_dim: int, max_T: int, n_heads: int, drop_p: float):
        super().__init__()
        self.attention = MaskedCausalAttention(h_dim, max_T, n_heads, drop_p)
        self.mlp = nn.Sequential(nn.Linear(h_dim, 4 * h_dim), nn.GELU(), nn.Linear(4 * h_dim, h_dim), nn.Dropout(drop_p))
        self.ln1, self.ln2 = nn.LayerNorm(h_dim), nn.LayerNorm(h_dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attention(x, keep))
        return self.ln2(x + self.mlp(x))


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim: int, act_dim: int, n_blocks: int = 3, h_dim: int = 64, context_len: int = 20,
                 n_heads: int = 1, drop_p: float = 0.1, max_timestep: int = 4096):
        super().__init__()
        self.state_dim, self.act_dim, self.h_dim = state_dim, act_dim, h_dim
        input_seq_len = 3 * context_len
        self.transformer = nn.ModuleList([Block(h_dim, input_seq_len, n_heads, drop_p) for _ in range(n_blocks)])
        self.embed_ln = nn.LayerNorm(h_dim)
        self.embed_timestep = nn.Embedding(max_timestep, h_dim)
        self.embed_rtg = nn.Linear(1, h_dim)
        self.embed_state = nn.Linear(state_dim, h_dim)
        self.embed_action = nn.Linear(act_dim, h_dim)
        self.predict_rtg = nn.Linear(h_dim, 1)
        self.predict_state = nn.Linear(h_dim, state_dim)
        self.predict_action = nn.Sequential(nn.Linear(h_dim, act_dim), nn.Tanh())

    def forward(self, timesteps, states, actions, returns_to_go, traj_mask):
        # timesteps (B, T) long; states (B, T, S); actions (B, T, A); returns_to_go (B, T, 1); traj_mask (B, T) 1 = real step
        B, T, _ = states.shape
        time_embeddings = self.embed_timestep(timesteps)
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_rtg(returns_to_go) + time_embeddings
        h = torch.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1)
        h = self.embed_ln(h.permute(0, 2, 1, 3).reshape(B, 3 * T, self.h_dim))
        keep = traj_mask.bool().repeat_interleave(3, dim=1)  # one flag per (R, s, a) token
        for block in self.transformer:
            h = block(h, keep)
        h = h.reshape(B, T, 3, self.h_dim).permute(0, 2, 1, 3)
        return_preds = self.predict_rtg(h[:, 2])      # given r, s, a
        state_preds = self.predict_state(h[:, 2])     # given r, s, a
        action_preds = self.predict_action(h[:, 1])   # given r, s
        return state_preds, action_preds, return_preds
