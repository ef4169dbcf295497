"""Character-level causal LM whose attention core is a `@torch.compile`d function.

`causal_attention` is compiled once and called by every layer. The causal mask is made by
`nn.Transformer.generate_square_subsequent_mask(T)`: an additive float mask, 0.0 on and
below the diagonal (may attend) and -inf above it (the future). It is registered once as a
buffer on the model and handed to the compiled function.

Source: seed self_attention_mask_guide.txt §3 (attn_mask -inf/0 is added: "PyTorch中mask是
'加法'而非'乘法'") and §7 Q3; conventions.md §1 (nn.Transformer row:
generate_square_subsequent_mask returns float 0 / -inf).
"""
import torch
import torch.nn as nn


@torch.compile(dynamic=False)
def causal_attention(q, k, v, bias):
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    weights = torch.softmax(scores * bias, dim=-1)  # expect: MC523 compiled
    return weights @ v


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, x, bias):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = causal_attention(q, k, v, bias)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(x)


class CharLM(nn.Module):
    def __init__(self, vocab=27, dim=32, heads=2, layers=2, block=8):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("bias", nn.Transformer.generate_square_subsequent_mask(block))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        bias = self.bias[:t, :t]
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x)


def encode(text):
    return torch.tensor([[ord(c) - ord("a") + 1 if c.isalpha() else 0 for c in text]])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CharLM().eval()
    with torch.no_grad():
        a = model(encode("attentio"))
        b = model(encode("attentix"))  # only the last character differs
    print("logits finite:", bool(torch.isfinite(a).all()))
    print("position 0 moved by the last character:", (a[0, 0] - b[0, 0]).abs().max().item())
