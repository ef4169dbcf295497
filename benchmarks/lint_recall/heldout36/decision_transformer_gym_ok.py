"""Decision Transformer: return-conditioned behaviour cloning on offline trajectories.

Written in the layout of kzl/decision-transformer (gym/): a `TrajectoryModel` base, the
`DecisionTransformer` with timestep / return / state / action embeddings interleaved as
(R, s, a) tokens for a GPT-2 without position embeddings, `get_batch` with left padding
(`-10.` for missing actions) and its `attention_mask`, a `SequenceTrainer`-style step
with the masked action MSE, and `evaluate_episode_rtg` calling `get_action`. The GPT-2
attention uses SDPA, as transformers' `GPT2SdpaAttention` does. The offline data are noisy
expert trajectories of a 2-D point-reaching task.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); huggingface/transformers#32195
(conventions.md §3 item 25); tools.md §0 P1; conventions.md §1 (SDPA row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPT2Config:
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_positions: int = 1024
    n_inner: int = 256
    resid_pdrop: float = 0.1
    attn_pdrop: float = 0.1


class GPT2Attention(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        n_pos = config.n_positions
        bias = torch.tril(torch.ones((n_pos, n_pos), dtype=torch.bool)).view(1, 1, n_pos, n_pos)
        self.register_buffer("bias", bias, persistent=False)
        self.embed_dim, self.num_heads = config.n_embd, config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = nn.Linear(self.embed_dim, 3 * self.embed_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.attn_dropout = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.num_heads * self.head_dim,))

    def forward(self, hidden_states, attention_mask=None):
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        causal_mask = self.bias[:, :, : q.size(-2), : k.size(-2)]
        if attention_mask is not None:
            causal_mask = causal_mask & attention_mask
        p = self.attn_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask, dropout_p=p)
        return self.resid_dropout(self.c_proj(self._merge_heads(out)))


class GPT2Block(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, config.n_inner),
            nn.ReLU(),
            nn.Linear(config.n_inner, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), attention_mask)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.drop = nn.Dropout(config.resid_pdrop)
        self.h = nn.ModuleList(GPT2Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)

    def forward(self, inputs_embeds, attention_mask=None):
        batch_size = inputs_embeds.shape[0]
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :].bool()
        hidden_states = self.drop(inputs_embeds)
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask=attention_mask)
        return {"last_hidden_state": self.ln_f(hidden_states)}


class TrajectoryModel(nn.Module):
    def __init__(self, state_dim, act_dim, max_length=None):
        super().__init__()
        self.state_dim, self.act_dim, self.max_length = state_dim, act_dim, max_length


class DecisionTransformer(TrajectoryModel):
    def __init__(self, state_dim, act_dim, hidden_size, max_length=None, max_ep_len=64, **kwargs):
        super().__init__(state_dim, act_dim, max_length=max_length)
        self.hidden_size = hidden_size
        self.transformer = GPT2Model(GPT2Config(n_embd=hidden_size, **kwargs))
        self.embed_timestep = nn.Embedding(max_ep_len, hidden_size)
        self.embed_return = nn.Linear(1, hidden_size)
        self.embed_state = nn.Linear(self.state_dim, hidden_size)
        self.embed_action = nn.Linear(self.act_dim, hidden_size)
        self.embed_ln = nn.LayerNorm(hidden_size)
        self.predict_state = nn.Linear(hidden_size, self.state_dim)
        self.predict_action = nn.Sequential(nn.Linear(hidden_size, self.act_dim), nn.Tanh())
        self.predict_return = nn.Linear(hidden_size, 1)

    def forward(self, states, actions, rewards, returns_to_go, timesteps, attention_mask=None):
        batch_size, seq_length = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)

        time_embeddings = self.embed_timestep(timesteps)
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_return(returns_to_go) + time_embeddings

        stacked_inputs = (
            torch.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1)
            .permute(0, 2, 1, 3)
            .reshape(batch_size, 3 * seq_length, self.hidden_size)
        )
        stacked_inputs = self.embed_ln(stacked_inputs)
        stacked_attention_mask = (
            torch.stack((attention_mask, attention_mask, attention_mask), dim=1)
            .permute(0, 2, 1)
            .reshape(batch_size, 3 * seq_length)
        )
        transformer_outputs = self.transformer(
            inputs_embeds=stacked_inputs, attention_mask=stacked_attention_mask
        )
        x = transformer_outputs["last_hidden_state"]
        x = x.reshape(batch_size, seq_length, 3, self.hidden_size).permute(0, 2, 1, 3)
        return_preds = self.predict_return(x[:, 2])
        state_preds = self.predict_state(x[:, 2])
        action_preds = self.predict_action(x[:, 1])
        return state_preds, action_preds, return_preds

    def get_action(self, states, actions, rewards, returns_to_go, timesteps):
        states = states.reshape(1, -1, self.state_dim)[:, -self.max_length :]
        actions = actions.reshape(1, -1, self.act_dim)[:, -self.max_length :]
        returns_to_go = returns_to_go.reshape(1, -1, 1)[:, -self.max_length :]
        timesteps = timesteps.reshape(1, -1)[:, -self.max_length :]
        pad = self.max_length - states.shape[1]
        attention_mask = torch.cat([torch.zeros(pad), torch.ones(states.shape[1])])
        attention_mask = attention_mask.to(dtype=torch.long).reshape(1, -1)
        states = torch.cat([torch.zeros((1, pad, self.state_dim)), states], dim=1)
        actions = torch.cat([torch.zeros((1, pad, self.act_dim)), actions], dim=1)
        returns_to_go = torch.cat([torch.zeros((1, pad, 1)), returns_to_go], dim=1)
        timesteps = torch.cat([torch.zeros((1, pad), dtype=torch.long), timesteps], dim=1)
        _, action_preds, _ = self.forward(
            states, actions, None, returns_to_go, timesteps, attention_mask=attention_mask
        )
        return action_preds[0, -1]


class PointReach:
    state_dim, act_dim, max_ep_len = 4, 2, 40

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, 2)
        self.goal = self.rng.uniform(-1, 1, 2)
        return np.concatenate([self.pos, self.goal])

    def step(self, action):
        self.pos = self.pos + 0.15 * np.clip(action, -1, 1)
        dist = float(np.linalg.norm(self.goal - self.pos))
        return np.concatenate([self.pos, self.goal]), -dist, dist < 0.1


def collect_trajectories(n, seed=0):
    env, rng, trajectories = PointReach(seed), np.random.default_rng(seed + 1), []
    for _ in range(n):
        obs, traj = env.reset(), {"observations": [], "actions": [], "rewards": []}
        for _ in range(env.max_ep_len):
            act = np.clip(4 * (obs[2:] - obs[:2]) + rng.normal(0, 0.3, 2), -1, 1)
            nxt, rew, done = env.step(act)
            for key, value in zip(traj, (obs, act, rew), strict=True):
                traj[key].append(value)
            obs = nxt
            if done:
                break
        trajectories.append({k: np.array(v, dtype=np.float32) for k, v in traj.items()})
    return trajectories


def discount_cumsum(x, gamma):
    out = np.zeros_like(x)
    out[-1] = x[-1]
    for t in reversed(range(x.shape[0] - 1)):
        out[t] = x[t] + gamma * out[t + 1]
    return out


def get_batch(trajectories, state_mean, state_std, batch_size, max_len, scale, rng):
    s, a, r, rtg, timesteps, mask = [], [], [], [], [], []
    for i in rng.integers(0, len(trajectories), size=batch_size):
        traj = trajectories[i]
        si = rng.integers(0, traj["rewards"].shape[0])
        obs = traj["observations"][si : si + max_len]
        tlen = obs.shape[0]
        pad = max_len - tlen
        s.append(np.concatenate([np.zeros((pad, 4)), (obs - state_mean) / state_std]))
        a.append(np.concatenate([np.ones((pad, 2)) * -10.0, traj["actions"][si : si + max_len]]))
        r.append(np.concatenate([np.zeros((pad, 1)), traj["rewards"][si : si + max_len, None]]))
        ret = discount_cumsum(traj["rewards"][si:], gamma=1.0)[:tlen, None]
        rtg.append(np.concatenate([np.zeros((pad, 1)), ret]) / scale)
        timesteps.append(np.concatenate([np.zeros(pad), np.arange(si, si + tlen)]))
        mask.append(np.concatenate([np.zeros(pad), np.ones(tlen)]))
    return {
        "states": torch.from_numpy(np.stack(s)).to(dtype=torch.float32),
        "actions": torch.from_numpy(np.stack(a)).to(dtype=torch.float32),
        "rewards": torch.from_numpy(np.stack(r)).to(dtype=torch.float32),
        "returns_to_go": torch.from_numpy(np.stack(rtg)).to(dtype=torch.float32),
        "timesteps": torch.from_numpy(np.stack(timesteps)).long(),
        "attention_mask": torch.from_numpy(np.stack(mask)).long(),
    }


def evaluate_episode_rtg(model, state_mean, state_std, target_return, scale, seed):
    env = PointReach(seed)
    state, episode_return = env.reset(), 0.0
    states = torch.from_numpy((state - state_mean) / state_std).float().reshape(1, 4)
    actions, rewards = torch.zeros((0, 2)), torch.zeros(0)
    target = torch.tensor(target_return / scale).reshape(1, 1)
    timesteps = torch.zeros((1, 1), dtype=torch.long)
    for t in range(env.max_ep_len):
        actions = torch.cat([actions, torch.zeros((1, 2))], dim=0)
        rewards = torch.cat([rewards, torch.zeros(1)])
        action = model.get_action(states, actions, rewards, target, timesteps)
        actions[-1] = action
        state, reward, done = env.step(action.detach().numpy())
        cur = torch.from_numpy((state - state_mean) / state_std).float().reshape(1, 4)
        states = torch.cat([states, cur], dim=0)
        target = torch.cat([target, (target[0, -1] - reward / scale).reshape(1, 1)], dim=1)
        timesteps = torch.cat([timesteps, torch.full((1, 1), t + 1, dtype=torch.long)], dim=1)
        episode_return += reward
        if done:
            break
    return episode_return


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    trajectories = collect_trajectories(150)
    all_obs = np.concatenate([t["observations"] for t in trajectories])
    state_mean, state_std = all_obs.mean(0), all_obs.std(0) + 1e-6
    scale, max_len = 10.0, 10
    model = DecisionTransformer(4, 2, hidden_size=64, max_length=max_len, max_ep_len=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    model.train()
    for step in range(150):
        batch = get_batch(trajectories, state_mean, state_std, 32, max_len, scale, rng)
        action_target = torch.clone(batch["actions"])
        _, action_preds, _ = model(**batch)
        keep = batch["attention_mask"].reshape(-1) > 0
        action_preds = action_preds.reshape(-1, 2)[keep]
        loss = torch.mean((action_preds - action_target.reshape(-1, 2)[keep]) ** 2)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} action mse {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        returns = [
            evaluate_episode_rtg(model, state_mean, state_std, -3.0, scale, seed=100 + i)
            for i in range(4)
        ]
    data_return = np.mean([t["rewards"].sum() for t in trajectories])
    print(f"eval return {np.mean(returns):.2f}, offline data {data_return:.2f}")


if __name__ == "__main__":
    main()
