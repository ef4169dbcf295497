"""Decision Transformer for offline RL, ported from a JAX implementation to PyTorch.

The JAX code interleaves (return-to-go, state, action) tokens per timestep, left-pads short
trajectories with a timestep mask, and calls `jax.nn.dot_product_attention(query, key, value,
bias=None, mask=None)` in the [batch, seq, heads, head_dim] layout; the port re-implements that
function with the same keyword arguments and a `big_neg` constant, and keeps the `einsum`
strings ("BTNH,BSNH->BNTS") of the original.

Source: conventions.md §1 (JAX / Flax row, HF 4-D masks row), §2.9 and §5 item 7.
"""
import torch
import torch.nn as nn


def dot_product_attention(query, key, value, bias=None, mask=None):
    logits = torch.einsum("BTNH,BSNH->BNTS", query, key) / query.shape[-1] ** 0.5
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        big_neg = torch.finfo(logits.dtype).min
        logits = torch.where(mask, logits, big_neg)
    probs = torch.softmax(logits, dim=-1)
    return torch.einsum("BNTS,BSNH->BTNH", probs, value)


def make_causal_mask(length):
    return torch.tril(torch.ones(length, length, dtype=torch.bool))[None, None]


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.num_heads, -1).unbind(2)
        y = dot_product_attention(q, k, v, bias=attn_mask)  # expect: MC509 jaxbias
        x = x + self.proj(y.reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim=4, act_dim=2, dim=16, num_heads=2, num_layers=2, max_ep_len=32):
        super().__init__()
        self.embed_timestep = nn.Embedding(max_ep_len, dim)
        self.embed_return = nn.Linear(1, dim)
        self.embed_state = nn.Linear(state_dim, dim)
        self.embed_action = nn.Linear(act_dim, dim)
        self.embed_ln = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList([Block(dim, num_heads) for _ in range(num_layers)])
        self.predict_action = nn.Sequential(nn.Linear(dim, act_dim), nn.Tanh())

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask):
        b, t = states.shape[:2]
        time_emb = self.embed_timestep(timesteps)
        tokens = torch.stack([
            self.embed_return(returns_to_go) + time_emb,
            self.embed_state(states) + time_emb,
            self.embed_action(actions) + time_emb,
        ], dim=2).reshape(b, 3 * t, -1)
        x = self.embed_ln(tokens)
        stacked_mask = attention_mask.repeat_interleave(3, dim=1).bool()
        attn_mask = make_causal_mask(3 * t) & stacked_mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, attn_mask)
        x = x.reshape(b, t, 3, -1)
        return self.predict_action(x[:, :, 1])


def left_pad(trajs, length, state_dim=4, act_dim=2):
    out = {
        "states": torch.zeros(len(trajs), length, state_dim),
        "actions": torch.zeros(len(trajs), length, act_dim),
        "returns_to_go": torch.zeros(len(trajs), length, 1),
        "timesteps": torch.zeros(len(trajs), length, dtype=torch.long),
        "attention_mask": torch.zeros(len(trajs), length, dtype=torch.long),
    }
    for i, tr in enumerate(trajs):
        n = tr["states"].shape[0]
        for key in ("states", "actions", "returns_to_go"):
            out[key][i, length - n:] = tr[key]
        out["timesteps"][i, length - n:] = torch.arange(n)
        out["attention_mask"][i, length - n:] = 1
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DecisionTransformer().eval()
    trajs = [{"states": torch.randn(n, 4), "actions": torch.rand(n, 2) * 2 - 1,
              "returns_to_go": torch.linspace(10.0, 1.0, n)[:, None]} for n in (6, 4)]
    batch = left_pad(trajs, 6)
    with torch.no_grad():
        pred = model(**batch)
        changed = {k: v.clone() for k, v in batch.items()}
        changed["actions"][:, -1] += 1.0
        moved = (model(**changed) - pred).abs().amax(-1)
        alone = model(**left_pad(trajs[1:], 4))
    valid = batch["attention_mask"].bool()
    leak = moved[:, :-1][valid[:, :-1]].max().item()
    loss = ((pred - batch["actions"]) ** 2).mean(-1)[valid].mean()
    print("earlier real action predictions moved by changing the last action:", leak)
    print("max |batched - alone| on trajectory 2:", (pred[1, 2:] - alone[0]).abs().max().item())
    print("masked action loss:", round(loss.item(), 4))
