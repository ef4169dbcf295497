"""Decision transformer: a causal GPT over interleaved (return-to-go, state, action) tokens.

Training sees whole trajectory windows. During the rollout the keys and values of earlier
tokens are cached per layer, and each environment step feeds only the new return-to-go and
state tokens; the action is read off the state token, then fed back on the next step.

Source: pytorch/pytorch PR #111007, conventions.md §1 (SDPA is_causal row) and §2.7
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CachedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cache=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        L, S = q.size(-2), k.size(-2)
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=S - L)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.proj(out.transpose(1, 2).reshape(b, n, d)), (k, v)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CachedAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cache=None):
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.mlp(self.ln2(x)), cache


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim, act_dim, dim=32, heads=4, depth=2, max_t=64):
        super().__init__()
        self.embed_rtg, self.embed_state = nn.Linear(1, dim), nn.Linear(state_dim, dim)
        self.embed_action, self.embed_t = nn.Linear(act_dim, dim), nn.Embedding(max_t, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.predict_action = nn.Sequential(nn.Linear(dim, act_dim), nn.Tanh())

    def forward(self, rtg, states, actions, timesteps):
        t = self.embed_t(timesteps)
        tokens = torch.stack([self.embed_rtg(rtg) + t, self.embed_state(states) + t,
                              self.embed_action(actions) + t], dim=2).flatten(1, 2)
        h, _ = self._run(tokens, None)
        return self.predict_action(h[:, 1::3])

    @torch.no_grad()
    def act(self, rtg, state, timestep, caches, prev_action=None):
        tokens = self._step_tokens(rtg, state, timestep, prev_action)
        h, caches = self._run(tokens, caches)
        return self.predict_action(h[:, -1]), caches

    def _run(self, tokens, caches):
        caches = caches or [None] * len(self.blocks)
        new = []
        for block, cache in zip(self.blocks, caches):
            tokens, c = block(tokens, cache)
            new.append(c)
        return tokens, new

    def _step_tokens(self, rtg, state, timestep, prev_action):
        t = self.embed_t(timestep)
        toks = [self.embed_rtg(rtg) + t, self.embed_state(state) + t]
        if prev_action is not None:
            toks.insert(0, self.embed_action(prev_action) + self.embed_t(timestep - 1))
        return torch.stack(toks, dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    B, T, S, A = 8, 10, 5, 2
    states, actions = torch.randn(B, T, S), torch.rand(B, T, A) * 2 - 1
    rtg, timesteps = torch.rand(B, T, 1) * 10, torch.arange(T).expand(B, T)
    model = DecisionTransformer(S, A)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(20):
        loss = F.mse_loss(model(rtg, states, actions, timesteps), actions)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    caches, action, target = None, None, torch.full((1, 1), 8.0)
    for t in range(5):
        state = torch.randn(1, S)
        action, caches = model.act(target, state, torch.tensor([t]), caches, action)
        target = target - 1.0
        print(f"t={t} action {action.squeeze(0).tolist()}")
