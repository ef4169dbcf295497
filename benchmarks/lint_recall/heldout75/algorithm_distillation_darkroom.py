"""Algorithm Distillation on the Dark Room task (in-context RL).

Learning histories of a source PPO agent are cut into long windows that span
several episodes; a causal transformer over (observation, previous action,
previous reward) tokens learns to predict the source agent's next action.  At
evaluation time the model is rolled out for many episodes without weight
updates, its own history filling the context from the left, and the return is
expected to improve from episode to episode.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md
section 3 item 18); conventions.md sections 2.3 and 5 item 5.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOM = 5
N_ACTIONS = 5
MOVES = torch.tensor([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]])


class DarkRoom:
    def __init__(self, goal, horizon=12):
        self.goal, self.horizon = goal, horizon

    def reset(self):
        self.pos, self.t = torch.tensor([ROOM // 2, ROOM // 2]), 0
        return self.pos.clone()

    def step(self, action):
        self.pos = (self.pos + MOVES[action]).clamp(0, ROOM - 1)
        self.t += 1
        reward = float(torch.equal(self.pos, self.goal))
        return self.pos.clone(), reward, self.t >= self.horizon


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, max_len):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x, history_keep):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).transpose(1, 3).unbind(2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_heads)
        allowed = self.causal[:T, :T] & history_keep[:, None, None, :]
        scores = scores.masked_fill(~allowed, -1e9)  # expect: MC501 fp16
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class ADTransformer(nn.Module):
    def __init__(self, d_model=32, n_heads=4, n_layers=2, max_len=48):
        super().__init__()
        self.max_len = max_len
        self.obs_emb = nn.Embedding(ROOM * ROOM, d_model)
        self.act_emb = nn.Embedding(N_ACTIONS + 1, d_model)
        self.rew_emb = nn.Linear(1, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.attn = nn.ModuleList([CausalSelfAttention(d_model, n_heads, max_len) for _ in range(n_layers)])
        self.ln = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2 * n_layers)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                                nn.Linear(4 * d_model, d_model)) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, N_ACTIONS)

    def forward(self, states, prev_actions, prev_rewards, history_keep):
        T = states.size(1)
        cell = states[..., 0] * ROOM + states[..., 1]
        x = self.obs_emb(cell) + self.act_emb(prev_actions) + self.rew_emb(prev_rewards.unsqueeze(-1))
        x = x + self.pos_emb(torch.arange(T))
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
            x = x + attn(self.ln[2 * i](x), history_keep)
            x = x + mlp(self.ln[2 * i + 1](x))
        return self.head(x)


def learning_history_batch(batch_size, seq_len):
    states = torch.randint(0, ROOM, (batch_size, seq_len, 2))
    actions = torch.randint(0, N_ACTIONS, (batch_size, seq_len))
    prev_actions = torch.cat([torch.full((batch_size, 1), N_ACTIONS), actions[:, :-1]], dim=1)
    prev_rewards = (torch.rand(batch_size, seq_len) < 0.1).float()
    return states, prev_actions, prev_rewards, actions


@torch.no_grad()
def in_context_eval(model, env, n_episodes, dtype=torch.float32):
    L = model.max_len
    states = torch.zeros(1, L, 2, dtype=torch.long)
    prev_actions = torch.full((1, L), N_ACTIONS)
    prev_rewards = torch.zeros(1, L, dtype=dtype)
    history_keep = torch.zeros(1, L, dtype=torch.bool)
    last_action, last_reward, returns = N_ACTIONS, 0.0, []
    for _ in range(n_episodes):
        obs, done, ep_return = env.reset(), False, 0.0
        while not done:
            states, prev_actions, prev_rewards, history_keep = (
                states.roll(-1, 1), prev_actions.roll(-1, 1), prev_rewards.roll(-1, 1), history_keep.roll(-1, 1))
            states[0, -1], prev_actions[0, -1], prev_rewards[0, -1], history_keep[0, -1] = obs, last_action, last_reward, True
            logits = model(states, prev_actions, prev_rewards, history_keep)[0, -1]
            last_action = int(torch.distributions.Categorical(logits=logits.float()).sample())
            obs, last_reward, done = env.step(last_action)
            ep_return += last_reward
        returns.append(ep_return)
    return returns


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true", help="run the evaluation rollouts in half precision")
    opt = parser.parse_args()
    torch.manual_seed(0)
    model = ADTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(3):
        states, prev_actions, prev_rewards, actions = learning_history_batch(4, model.max_len)
        keep = torch.ones(4, model.max_len, dtype=torch.bool)
        loss = F.cross_entropy(model(states, prev_actions, prev_rewards, keep).flatten(0, 1), actions.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dtype = torch.float16 if opt.fp16 else torch.float32
    returns = in_context_eval(model.to(dtype).eval(), DarkRoom(goal=torch.tensor([4, 1])), n_episodes=3, dtype=dtype)
    print("train loss", round(loss.item(), 4), "in-context returns", returns)
