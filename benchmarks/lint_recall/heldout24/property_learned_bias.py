"""Fixed-context causal LM with a learned per-head attention bias, exposed as a property.

Each layer learns `self.bias`, an nn.Parameter of shape (heads, T, T) added to the scores
(a learned positional bias, trained with the rest of the model). The `attn_bias` property
returns it with the future hidden: -inf above the diagonal, so query i only sees keys <= i.
Every training sequence is exactly `block` tokens long.

Source: seed masked_fill_inplace.txt (section 梯度计算风险: `masked_fill_` on a tensor with
requires_grad=True breaks the gradient; use `masked_fill`, keep `masked_fill_` for tensors
without grad such as buffers and temporary masks).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BiasedCausalAttention(nn.Module):
    def __init__(self, dim: int, heads: int, block: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.zeros(heads, block, block))
        self.register_buffer("future", torch.ones(block, block, dtype=torch.bool).triu(1))

    @property
    def attn_bias(self) -> torch.Tensor:
        """(heads, T, T) additive bias: the learned values, -inf where the key is in the future."""
        bias = self.bias
        bias.masked_fill_(self.future, float("-inf"))  # expect: MC505 property
        return bias

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + self.attn_bias
        y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 32, heads: int = 4, layers: int = 2, block: int = 8):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(BiasedCausalAttention(dim, heads, block) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx)
        for attn, norm in zip(self.blocks, self.norms):
            x = x + attn(norm(x))
        return self.head(x)


def train(model, data, steps: int = 30):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyGPT()
    data = torch.arange(9).repeat(4, 1) % 32  # (4, block + 1): counting sequences
    print("final loss:", round(train(model, data), 4))
    bias = model.blocks[0].bias
    print("learned bias finite:", bool(torch.isfinite(bias).all()))
    with torch.no_grad():
        a = model(data[:1, :-1])
        b = model(torch.cat([data[:1, :-2], torch.tensor([[31]])], dim=1))
    print("position 0 moved by the last token:", (a[0, 0] - b[0, 0]).abs().max().item())
