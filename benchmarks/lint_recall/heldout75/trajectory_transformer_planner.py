"""Trajectory Transformer planning for D4RL locomotion (hopper-medium layout).

Every dimension of a transition (observation, action, reward, value-to-go) is
discretised into ``n_bins`` uniform bins and becomes one token; a GPT with one
output head per token position models the token stream.  Planning is beam
search in token space: the prefix is encoded once, then actions, rewards and
values are sampled token by token on a key/value cache, and beams are
re-ranked by predicted return.

Source: conventions.md section 1 (SDPA is_causal row), sections 2.7 and 5 item 8;
pytorch/pytorch PR #111007.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    observation_dim = 3
    action_dim = 2
    n_bins = 20
    block_size = 60
    n_layer = 2
    n_head = 2
    n_embd = 32

    @property
    def transition_dim(self):
        return self.observation_dim + self.action_dim + 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        keep = torch.ones(config.block_size, config.block_size, dtype=torch.bool).tril()
        keep[:, config.transition_dim - 1::config.transition_dim] = False
        keep.fill_diagonal_(True)
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, x, layer_past=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if layer_past is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep[:T, :T])
        else:
            k = torch.cat([layer_past[0], k], dim=-2)
            v = torch.cat([layer_past[1], v], dim=-2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        return self.proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.n_embd), nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x, layer_past=None):
        h, present = self.attn(self.ln1(x), layer_past)
        x = x + h
        return x + self.mlp(self.ln2(x)), present


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transition_dim = config.transition_dim
        self.tok_emb = nn.Embedding(config.transition_dim * config.n_bins + 1, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Parameter(torch.randn(config.transition_dim, config.n_embd, config.n_bins + 1) * 0.02)

    def offset_tokens(self, idx, start):
        dims = (torch.arange(start, start + idx.size(1)) % self.transition_dim)
        return idx + dims[None] * self.config.n_bins

    def forward(self, idx, past=None, start=0):
        T = idx.size(1)
        x = self.tok_emb(self.offset_tokens(idx, start)) + self.pos_emb[:, start:start + T]
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, None if past is None else past[i])
            presents.append(present)
        x = self.ln_f(x)
        dims = torch.arange(start, start + T) % self.transition_dim
        logits = torch.einsum("btc,tcv->btv", x, self.head[dims])
        return logits, presents


class Discretizer:
    def __init__(self, low, high, n_bins):
        self.low, self.high, self.n_bins = low, high, n_bins

    def discretize(self, x):
        frac = (x - self.low) / (self.high - self.low)
        return (frac * self.n_bins).long().clamp(0, self.n_bins - 1)

    def reconstruct(self, idx):
        return self.low + (idx.float() + 0.5) / self.n_bins * (self.high - self.low)


@torch.no_grad()
def beam_plan(model, discretizer, prefix, horizon, beam_width, discount=0.99):
    cfg = model.config
    logits, past = model(prefix)
    n_tokens = prefix.size(1)
    beams = prefix.repeat(beam_width, 1)
    past = [(k.repeat(beam_width, 1, 1, 1), v.repeat(beam_width, 1, 1, 1)) for k, v in past]
    next_logits = logits[:, -1].repeat(beam_width, 1)
    scores = torch.zeros(beam_width)
    for t in range(horizon):
        for d in range(cfg.transition_dim):
            probs = F.softmax(next_logits[:, : cfg.n_bins], dim=-1)
            token = torch.multinomial(probs, 1) if d < cfg.transition_dim - 2 else probs.argmax(-1, keepdim=True)
            beams = torch.cat([beams, token], dim=1)
            logits, past = model(token, past=past, start=n_tokens)
            n_tokens += 1
            next_logits = logits[:, -1]
        transition = discretizer.reconstruct(beams[:, -cfg.transition_dim:])
        scores = scores + discount ** t * transition[:, -2] + discount ** (t + 1) * transition[:, -1]
        order = scores.argsort(descending=True)
        beams, scores, next_logits = beams[order], scores[order], next_logits[order]
        past = [(k[order], v[order]) for k, v in past]
    first_action = beams[0, prefix.size(1) + cfg.observation_dim: prefix.size(1) + cfg.observation_dim + cfg.action_dim]
    return discretizer.reconstruct(first_action), scores[0]


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = Config()
    model = GPT(cfg)
    discretizer = Discretizer(-1.0, 1.0, cfg.n_bins)
    trajectories = torch.tanh(torch.randn(4, 3, cfg.transition_dim))
    tokens = discretizer.discretize(trajectories).flatten(1)
    logits, _ = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, cfg.n_bins + 1), tokens[:, 1:].reshape(-1))
    loss.backward()
    model.eval()
    obs = discretizer.discretize(torch.tanh(torch.randn(1, cfg.observation_dim)))
    action, value = beam_plan(model, discretizer, obs, horizon=2, beam_width=3)
    print("loss", round(loss.item(), 4), "action", action.tolist(), "value", round(value.item(), 4))
