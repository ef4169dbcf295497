"""Decision Transformer in the style of kzl/decision-transformer (gym experiment).

Returns-to-go, states and actions are embedded separately, a timestep embedding
is added to each, and the three are interleaved as (R_1, s_1, a_1, R_2, ...)
into a GPT-2 without position embeddings whose blocks keep a lower-triangular
``bias`` buffer. Trajectory segments shorter than ``max_length`` are left-padded,
with an ``attention_mask`` of 0 for the padding, in ``get_batch`` and in
``get_action``.

Source: pytorch/pytorch#103963, huggingface/transformers#32195, conventions.md §2.9 and §1 (HF 2-D attention_mask row)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DTConfig:
    state_dim: int = 11
    act_dim: int = 3
    hidden_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    max_length: int = 10
    max_ep_len: int = 200
    n_positions: int = 1024
    dropout: float = 0.1
    scale: float = 100.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        n = cfg.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.n_head = cfg.n_head
        self.head_dim = cfg.hidden_size // cfg.n_head
        self.c_attn = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.c_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(value.size(-1))
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        attn_weights = torch.where(causal_mask, attn_weights, self.masked_bias.to(attn_weights.dtype))
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = self.attn_dropout(F.softmax(attn_weights, dim=-1))
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, attention_mask=None):
        b, t, d = hidden_states.shape
        q, k, v = self.c_attn(hidden_states).split(d, dim=2)
        q, k, v = (x.view(b, t, self.n_head, self.head_dim).transpose(1, 2) for x in (q, k, v))
        out = self._attn(q, k, v, attention_mask).transpose(1, 2).reshape(b, t, d)
        return self.resid_dropout(self.c_proj(out))


class Block(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_size)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden_size, cfg.hidden_size), nn.Dropout(cfg.dropout))

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), attention_mask=attention_mask)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.hidden_size)

    def forward(self, inputs_embeds, attention_mask=None):
        hidden_states = inputs_embeds
        if attention_mask is not None:
            attention_mask = attention_mask.view(inputs_embeds.size(0), -1)
            attention_mask = attention_mask[:, None, None, :]
            extended_attention_mask = attention_mask.to(dtype=hidden_states.dtype)  # expect: MC508 dectransformer
        else:
            extended_attention_mask = None
        hidden_states = self.drop(hidden_states)
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask=extended_attention_mask)
        return {"last_hidden_state": self.ln_f(hidden_states)}


class DecisionTransformer(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = GPT2Model(cfg)
        self.embed_timestep = nn.Embedding(cfg.max_ep_len, cfg.hidden_size)
        self.embed_return = nn.Linear(1, cfg.hidden_size)
        self.embed_state = nn.Linear(cfg.state_dim, cfg.hidden_size)
        self.embed_action = nn.Linear(cfg.act_dim, cfg.hidden_size)
        self.embed_ln = nn.LayerNorm(cfg.hidden_size)
        self.predict_state = nn.Linear(cfg.hidden_size, cfg.state_dim)
        self.predict_action = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.act_dim), nn.Tanh())
        self.predict_return = nn.Linear(cfg.hidden_size, 1)

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask=None):
        batch_size, seq_length = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)
        time_embeddings = self.embed_timestep(timesteps)
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_return(returns_to_go) + time_embeddings

        stacked_inputs = torch.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1)
        stacked_inputs = stacked_inputs.permute(0, 2, 1, 3).reshape(batch_size, 3 * seq_length, -1)
        stacked_inputs = self.embed_ln(stacked_inputs)
        stacked_attention_mask = torch.stack((attention_mask, attention_mask, attention_mask), dim=1)
        stacked_attention_mask = stacked_attention_mask.permute(0, 2, 1).reshape(batch_size, 3 * seq_length)

        x = self.transformer(inputs_embeds=stacked_inputs, attention_mask=stacked_attention_mask)["last_hidden_state"]
        x = x.reshape(batch_size, seq_length, 3, -1).permute(0, 2, 1, 3)
        return self.predict_state(x[:, 2]), self.predict_action(x[:, 1]), self.predict_return(x[:, 2])

    @torch.no_grad()
    def get_action(self, states, actions, returns_to_go, timesteps):
        cfg = self.cfg
        states = states.reshape(1, -1, cfg.state_dim)[:, -cfg.max_length:]
        actions = actions.reshape(1, -1, cfg.act_dim)[:, -cfg.max_length:]
        returns_to_go = returns_to_go.reshape(1, -1, 1)[:, -cfg.max_length:]
        timesteps = timesteps.reshape(1, -1)[:, -cfg.max_length:]
        pad = cfg.max_length - states.shape[1]
        attention_mask = torch.cat([torch.zeros(pad), torch.ones(states.shape[1])]).to(torch.long).reshape(1, -1)
        states = torch.cat([torch.zeros((1, pad, cfg.state_dim)), states], dim=1)
        actions = torch.cat([torch.zeros((1, pad, cfg.act_dim)), actions], dim=1)
        returns_to_go = torch.cat([torch.zeros((1, pad, 1)), returns_to_go], dim=1)
        timesteps = torch.cat([torch.zeros((1, pad), dtype=torch.long), timesteps], dim=1)
        _, action_preds, _ = self.forward(states, actions, returns_to_go, timesteps, attention_mask=attention_mask)
        return action_preds[0, -1]


def discount_cumsum(x, gamma):
    out = np.zeros_like(x)
    out[-1] = x[-1]
    for t in reversed(range(x.shape[0] - 1)):
        out[t] = x[t] + gamma * out[t + 1]
    return out


def get_batch(trajectories, cfg: DTConfig, batch_size, rng):
    s, a, rtg, ts, mask, target = [], [], [], [], [], []
    for i in rng.integers(0, len(trajectories), size=batch_size):
        traj = trajectories[i]
        si = rng.integers(0, traj["rewards"].shape[0] - 1)
        obs = traj["observations"][si: si + cfg.max_length]
        act = traj["actions"][si: si + cfg.max_length]
        tlen = obs.shape[0]
        ret = discount_cumsum(traj["rewards"][si:], 1.0)[:tlen].reshape(-1, 1) / cfg.scale
        steps = np.arange(si, si + tlen)
        pad = cfg.max_length - tlen
        s.append(np.concatenate([np.zeros((pad, cfg.state_dim)), obs]))
        a.append(np.concatenate([np.ones((pad, cfg.act_dim)) * -10.0, act]))
        target.append(np.concatenate([np.zeros((pad, cfg.act_dim)), act]))
        rtg.append(np.concatenate([np.zeros((pad, 1)), ret]))
        ts.append(np.concatenate([np.zeros(pad, dtype=np.int64), steps]))
        mask.append(np.concatenate([np.zeros(pad), np.ones(tlen)]))
    f = lambda x: torch.from_numpy(np.stack(x)).float()
    return f(s), f(a), f(rtg), torch.from_numpy(np.stack(ts)), torch.from_numpy(np.stack(mask)).long(), f(target)


def synthetic_trajectories(cfg: DTConfig, n=20, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(4, 40))
        obs = np.cumsum(rng.normal(size=(length, cfg.state_dim)) * 0.1, axis=0)
        act = np.tanh(obs[:, : cfg.act_dim])
        out.append({"observations": obs, "actions": act, "rewards": obs[:, 0] + 1.0})
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = DTConfig()
    rng = np.random.default_rng(0)
    trajectories = synthetic_trajectories(cfg)
    model = DecisionTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for step in range(40):
        model.train()
        states, actions, rtg, timesteps, attention_mask, action_target = get_batch(trajectories, cfg, 16, rng)
        _, action_preds, _ = model(states, actions, rtg, timesteps, attention_mask=attention_mask)
        keep = attention_mask.reshape(-1) > 0
        loss = F.mse_loss(action_preds.reshape(-1, cfg.act_dim)[keep], action_target.reshape(-1, cfg.act_dim)[keep])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("action mse", round(loss.item(), 4))

    model.eval()
    traj = trajectories[0]
    n = 4
    s = torch.tensor(traj["observations"][:n]).float()
    a = torch.tensor(traj["actions"][:n]).float()
    r = torch.tensor(discount_cumsum(traj["rewards"], 1.0)[:n]).float() / cfg.scale
    t = torch.arange(n)
    padded = model.get_action(s, a, r, t)
    with torch.no_grad():
        _, unpadded, _ = model(s[None], a[None], r[None, :, None], t[None])
    print("get_action (padded) vs unpadded:", (padded - unpadded[0, -1]).abs().max().item())
