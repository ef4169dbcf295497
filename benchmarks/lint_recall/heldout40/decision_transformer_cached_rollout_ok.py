"""Decision Transformer on a 2-D point-mass reaching task, with cached online rollouts.

Trajectories are (return-to-go, state, action) triples interleaved into one token stream with a
timestep embedding and no position embedding, as in kzl/decision-transformer
(``DecisionTransformer.forward``, ``get_action`` with left padding to ``max_length``,
``get_batch`` and ``evaluate_episode_rtg``). The GPT-2 trunk is written out on
``F.scaled_dot_product_attention`` with ``past_key_values`` so that ``CachedRolloutPolicy`` can
append each environment step (previous action, return-to-go, state) to the cache instead of
re-encoding the whole context.

Source: conventions.md §1 (SDPA is_causal row) and §2.7, pytorch/pytorch PR #111007
(conventions.md §1), conventions.md §5 item 8
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STATE_DIM, ACT_DIM, EP_LEN = 4, 2, 20


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop=0.1):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.attn_pdrop = attn_pdrop

    def forward(self, x, attn_mask=None, layer_past=None, use_cache=False):
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, 2)
        )
        if layer_past is not None:
            past_key, past_value = layer_past
            k = torch.cat((past_key, k), dim=-2)
            v = torch.cat((past_value, v), dim=-2)
        present = (k, v) if use_cache else None
        if attn_mask is not None:
            dropout_p = self.attn_pdrop if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(diagonal=k.size(-2) - q.size(-2)))
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), present


class GPT2Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x, attn_mask=None, layer_past=None, use_cache=False):
        a, present = self.attn(self.ln_1(x), attn_mask, layer_past, use_cache)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class GPT2Model(nn.Module):
    def __init__(self, n_embd, n_layer, n_head):
        super().__init__()
        self.h = nn.ModuleList([GPT2Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, inputs_embeds, attention_mask=None, past_key_values=None, use_cache=False):
        T = inputs_embeds.shape[1]
        attn_mask = None
        if attention_mask is not None:
            causal = torch.ones(T, T, dtype=torch.bool, device=inputs_embeds.device).tril()
            attn_mask = attention_mask.bool()[:, None, None, :] & causal
        past_key_values = past_key_values or [None] * len(self.h)
        presents = []
        x = inputs_embeds
        for block, layer_past in zip(self.h, past_key_values):
            x, present = block(x, attn_mask, layer_past, use_cache)
            presents.append(present)
        return self.ln_f(x), (presents if use_cache else None)


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim, act_dim, hidden_size=64, max_length=20, max_ep_len=EP_LEN):
        super().__init__()
        self.state_dim, self.act_dim, self.max_length = state_dim, act_dim, max_length
        self.hidden_size = hidden_size
        self.transformer = GPT2Model(hidden_size, n_layer=2, n_head=4)
        self.embed_timestep = nn.Embedding(max_ep_len, hidden_size)
        self.embed_return = nn.Linear(1, hidden_size)
        self.embed_state = nn.Linear(state_dim, hidden_size)
        self.embed_action = nn.Linear(act_dim, hidden_size)
        self.embed_ln = nn.LayerNorm(hidden_size)
        self.predict_state = nn.Linear(hidden_size, state_dim)
        self.predict_action = nn.Sequential(nn.Linear(hidden_size, act_dim), nn.Tanh())
        self.predict_return = nn.Linear(hidden_size, 1)

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask=None):
        batch_size, seq_length = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)
        time_embeddings = self.embed_timestep(timesteps)
        stacked_inputs = torch.stack(
            (
                self.embed_return(returns_to_go) + time_embeddings,
                self.embed_state(states) + time_embeddings,
                self.embed_action(actions) + time_embeddings,
            ),
            dim=1,
        ).permute(0, 2, 1, 3)
        stacked_inputs = self.embed_ln(stacked_inputs.reshape(batch_size, 3 * seq_length, -1))
        stacked_attention_mask = torch.stack((attention_mask,) * 3, dim=1).permute(0, 2, 1)
        stacked_attention_mask = stacked_attention_mask.reshape(batch_size, 3 * seq_length)
        x, _ = self.transformer(stacked_inputs, attention_mask=stacked_attention_mask)
        x = x.reshape(batch_size, seq_length, 3, self.hidden_size).permute(0, 2, 1, 3)
        return (
            self.predict_state(x[:, 2]),
            self.predict_action(x[:, 1]),
            self.predict_return(x[:, 2]),
        )

    def get_action(self, states, actions, returns_to_go, timesteps):
        states, actions = states[-self.max_length :], actions[-self.max_length :]
        returns_to_go, timesteps = returns_to_go[-self.max_length :], timesteps[-self.max_length :]
        pad = self.max_length - states.shape[0]
        attention_mask = torch.cat([torch.zeros(pad), torch.ones(states.shape[0])]).long()[None]
        states = torch.cat([torch.zeros(pad, self.state_dim), states])[None]
        actions = torch.cat([torch.zeros(pad, self.act_dim), actions])[None]
        returns_to_go = torch.cat([torch.zeros(pad, 1), returns_to_go])[None]
        timesteps = torch.cat([torch.zeros(pad, dtype=torch.long), timesteps])[None]
        _, action_preds, _ = self.forward(states, actions, returns_to_go, timesteps, attention_mask)
        return action_preds[0, -1]


class CachedRolloutPolicy:
    def __init__(self, model: DecisionTransformer):
        self.model = model
        self.past_key_values = None

    @torch.no_grad()
    def step(self, state, prev_action, rtg, t):
        m = self.model
        time_emb = m.embed_timestep(torch.tensor([t]))
        tokens = [m.embed_return(rtg.view(1, 1)) + time_emb, m.embed_state(state[None]) + time_emb]
        if t > 0:
            tokens.insert(
                0, m.embed_action(prev_action[None]) + m.embed_timestep(torch.tensor([t - 1]))
            )
        x = m.embed_ln(torch.cat(tokens)[None])
        x, self.past_key_values = m.transformer(
            x, past_key_values=self.past_key_values, use_cache=True
        )
        return m.predict_action(x[0, -1])


def rollout_expert(rng, skill):
    state = np.concatenate([rng.uniform(-1, 1, 2), rng.uniform(-1, 1, 2)]).astype(np.float32)
    states, actions, rewards = [], [], []
    for _ in range(EP_LEN):
        action = np.clip(2.0 * (state[2:] - state[:2]) + rng.normal(0, 1 - skill, 2), -1, 1)
        states.append(state.copy())
        actions.append(action.astype(np.float32))
        state[:2] = state[:2] + 0.2 * action
        rewards.append(-float(np.linalg.norm(state[:2] - state[2:])))
    return np.stack(states), np.stack(actions), np.array(rewards, dtype=np.float32)


def get_batch(trajectories, rng, batch_size, K, scale=10.0):
    s, a, rtg, ts, mask = [], [], [], [], []
    for idx in rng.integers(0, len(trajectories), batch_size):
        states, actions, rewards = trajectories[idx]
        end = int(rng.integers(1, EP_LEN + 1))
        start = max(0, end - K)
        tlen, pad = end - start, K - (end - start)
        returns = np.cumsum(rewards[::-1])[::-1][start:end, None] / scale
        s.append(np.concatenate([np.zeros((pad, STATE_DIM)), states[start:end]]))
        a.append(np.concatenate([np.zeros((pad, ACT_DIM)), actions[start:end]]))
        rtg.append(np.concatenate([np.zeros((pad, 1)), returns]))
        ts.append(np.concatenate([np.zeros(pad), np.arange(start, end)]))
        mask.append(np.concatenate([np.zeros(pad), np.ones(tlen)]))

    def to_tensor(x):
        return torch.tensor(np.stack(x), dtype=torch.float32)

    timesteps, mask = torch.tensor(np.stack(ts)).long(), torch.tensor(np.stack(mask)).long()
    return to_tensor(s), to_tensor(a), to_tensor(rtg), timesteps, mask


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    trajectories = [rollout_expert(rng, skill=rng.uniform(0.2, 1.0)) for _ in range(400)]
    model = DecisionTransformer(STATE_DIM, ACT_DIM)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for it in range(200):
        states, actions, rtg, timesteps, mask = get_batch(trajectories, rng, 32, K=EP_LEN)
        _, action_preds, _ = model(states, actions, rtg, timesteps, attention_mask=mask)
        loss = ((action_preds - actions) ** 2)[mask > 0].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"final action MSE {loss.item():.4f}")
    model.eval()
    env_rng = np.random.default_rng(1)
    state = torch.tensor(np.concatenate([env_rng.uniform(-1, 1, 2), env_rng.uniform(-1, 1, 2)]))
    state, rtg = state.float(), torch.tensor(-2.0)
    policy = CachedRolloutPolicy(model)
    history_s, history_a, history_r = [], [], []
    action, gap, episode_return = torch.zeros(ACT_DIM), 0.0, 0.0
    for t in range(EP_LEN):
        action = policy.step(state, action, rtg, t)
        history_s.append(state)
        history_a.append(action)
        history_r.append(rtg.view(1))
        with torch.no_grad():
            ref = model.get_action(
                torch.stack(history_s),
                torch.stack(history_a),
                torch.stack(history_r),
                torch.arange(t + 1),
            )
        gap = max(gap, (ref - action).abs().max().item())
        state = state.clone()
        state[:2] = state[:2] + 0.2 * action
        reward = -state[:2].sub(state[2:]).norm().item()
        episode_return += reward
        rtg = rtg - reward / 10.0
    print(f"episode return {episode_return:.3f}, cached vs full-context action gap {gap:.2e}")
