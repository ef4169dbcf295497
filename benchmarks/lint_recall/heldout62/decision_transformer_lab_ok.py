"""Deep Reinforcement Learning, Lab 9: offline RL as sequence modelling (Decision Transformer).

We collect an offline data set on a small corridor world with a mixture of good and
bad behaviour policies, then train a Decision Transformer (Chen et al., 2021) that
reads interleaved (return-to-go, state, action) tokens and predicts the action.
As in the reference implementation, contexts shorter than ``K`` steps are padded on
the left and carry an ``attention_mask`` of zeros there. At test time we condition
on the best return in the data set and roll the policy out.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

N_STATES = 10
N_ACTIONS = 3
PAD_ACTION = N_ACTIONS
MAX_STEPS = 20
K = 8


def step(state, action):
    nxt = min(max(state + action - 1, 0), N_STATES - 1)
    done = nxt == N_STATES - 1
    return nxt, (1.0 if done else -0.1), done


def collect(n_episodes, rng):
    episodes = []
    for _ in range(n_episodes):
        eps = rng.choice([0.05, 0.3, 0.7, 1.0])
        s, traj = 0, []
        for _ in range(MAX_STEPS):
            a = rng.randrange(N_ACTIONS) if rng.random() < eps else 2
            s2, r, done = step(s, a)
            traj.append((s, a, r))
            s = s2
            if done:
                break
        rewards = [r for _, _, r in traj]
        rtg = [sum(rewards[i:]) for i in range(len(rewards))]
        episodes.append([(s, a, g) for (s, a, _), g in zip(traj, rtg)])
    return episodes


def pad_context(window, start_t):
    n = len(window)
    states = torch.zeros(K, dtype=torch.long)
    actions = torch.full((K,), PAD_ACTION, dtype=torch.long)
    rtg = torch.zeros(K, 1)
    timesteps = torch.zeros(K, dtype=torch.long)
    attention_mask = torch.zeros(K, dtype=torch.long)
    states[K - n :] = torch.tensor([s for s, _, _ in window])
    actions[K - n :] = torch.tensor([a for _, a, _ in window])
    rtg[K - n :, 0] = torch.tensor([g for _, _, g in window])
    timesteps[K - n :] = torch.arange(start_t, start_t + n)
    attention_mask[K - n :] = 1
    return states, actions, rtg, timesteps, attention_mask


def get_batch(episodes, batch_size, rng):
    items = []
    for _ in range(batch_size):
        ep = rng.choice(episodes)
        end = rng.randint(1, len(ep))
        start = max(0, end - K)
        items.append(pad_context(ep[start:end], start))
    return [torch.stack(x) for x in zip(*items)]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, keep):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] & torch.ones(T, T, dtype=torch.bool, device=x.device).tril())
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class DecisionTransformer(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2, dropout=0.1):
        super().__init__()
        self.d = d_model
        self.embed_t = nn.Embedding(MAX_STEPS + 1, d_model)
        self.embed_s = nn.Linear(N_STATES, d_model)
        self.embed_a = nn.Embedding(N_ACTIONS + 1, d_model, padding_idx=PAD_ACTION)
        self.embed_r = nn.Linear(1, d_model)
        self.ln = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.predict_a = nn.Linear(d_model, N_ACTIONS)

    def forward(self, states, actions, rtg, timesteps, attention_mask):
        B, T = states.shape
        t_emb = self.embed_t(timesteps)
        s = self.embed_s(F.one_hot(states, N_STATES).float()) + t_emb
        a = self.embed_a(actions) + t_emb
        r = self.embed_r(rtg) + t_emb
        x = torch.stack((r, s, a), dim=1).permute(0, 2, 1, 3).reshape(B, 3 * T, self.d)
        x = self.drop(self.ln(x))
        keep = torch.stack((attention_mask,) * 3, dim=1).permute(0, 2, 1).reshape(B, 3 * T).bool()
        for block in self.blocks:
            x = block(x, keep)
        x = x.reshape(B, T, 3, self.d).permute(0, 2, 1, 3)
        return self.predict_a(x[:, 1])


@torch.no_grad()
def rollout(model, target_return):
    model.eval()
    s, history, total = 0, [], 0.0
    for t in range(MAX_STEPS):
        history.append([s, PAD_ACTION, target_return - total])
        start = max(0, len(history) - K)
        batch = [x[None] for x in pad_context([tuple(h) for h in history[start:]], start)]
        a = model(*batch)[0, -1].argmax().item()
        history[-1][1] = a
        s, r, done = step(s, a)
        total += r
        if done:
            return total, t + 1
    return total, MAX_STEPS


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    episodes = collect(300, rng)
    returns = [ep[0][2] for ep in episodes]
    print(f"{len(episodes)} episodes, return mean {sum(returns) / len(returns):.2f}, best {max(returns):.2f}")

    states, actions, rtg, timesteps, mask = get_batch(episodes, 4, rng)
    print("attention_mask of a batch:\n", mask)
    assert mask[:, -1].all() and states.shape == (4, K)

    model = DecisionTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for it in range(400):
        model.train()
        states, actions, rtg, timesteps, mask = get_batch(episodes, 64, rng)
        logits = model(states, actions, rtg, timesteps, mask)
        loss = F.cross_entropy(logits[mask.bool()], actions[mask.bool()])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        if it % 100 == 0:
            print(f"iter {it:3d}  action loss {loss.item():.4f}")

    for target in [max(returns), 0.0, -1.0]:
        ret, length = rollout(model, target)
        print(f"target return {target:5.2f}: achieved {ret:5.2f} in {length} steps")


if __name__ == "__main__":
    main()
