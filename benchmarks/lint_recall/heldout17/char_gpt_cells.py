"""Character-level language model in notebook cells (`# %%`), exported from a Jupyter notebook.

Source: the seed guide's `generate_causal_mask` (`torch.triu(torch.ones(sz, sz) *
float('-inf'), diagonal=1)`) copied without the `diagonal=1` argument, the bug of
pbloem/former#10 and pytorch/tutorials#2250 as `maskcheck explain MC503` describes it: triu's
default diagonal 0 keeps -inf on the diagonal, so every position is hidden from itself and the
first one sees nothing.
"""

# %%
import torch
import torch.nn as nn
from torch.nn import functional as F

torch.manual_seed(1337)
device = "cuda" if torch.cuda.is_available() else "cpu"

# %% [markdown]
# ## Data: a toy corpus, character vocabulary, train / val split

# %%
text = "the quick brown fox jumps over the lazy dog. " * 40 + "pack my box with five dozen jugs. " * 40
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for ch, i in stoi.items()}
encode = lambda s: [stoi[c] for c in s]
decode = lambda ids: "".join(itos[i] for i in ids)

data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]
block_size, batch_size, n_embd, n_head = 32, 16, 64, 4


def get_batch(split):
    src = train_data if split == "train" else val_data
    ix = torch.randint(len(src) - block_size, (batch_size,))
    x = torch.stack([src[i : i + block_size] for i in ix])
    y = torch.stack([src[i + 1 : i + block_size + 1] for i in ix])
    return x.to(device), y.to(device)


# %% [markdown]
# ## Causal mask: 0 where a position may attend, -inf above the diagonal

# %%
def generate_causal_mask(sz):
    mask = torch.triu(torch.ones(sz, sz) * float("-inf"))  # expect: MC503 cells
    return mask


attn_mask = generate_causal_mask(block_size).to(device)
print(attn_mask[:4, :4])

# %%
class CharTransformer(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        x = self.blocks(x, mask=attn_mask[:T, :T])
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


model = CharTransformer(len(chars)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

# %%
for step in range(150):
    xb, yb = get_batch("train")
    _, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step}: train loss {loss.item():.3f}")

# %% [markdown]
# ## Sanity check: first-layer attention weights of one sequence

# %%
model.eval()
with torch.no_grad():
    xv, yv = get_batch("val")
    print("val loss", model(xv, yv)[1].item())
    h = model.tok(xv[:1]) + model.pos(torch.arange(block_size, device=device))
    _, w = model.blocks.layers[0].self_attn(h, h, h, attn_mask=attn_mask, need_weights=True)
    print(w[0, :3, :3])

# %%
idx = torch.tensor([encode("the ")], device=device)
with torch.no_grad():
    for _ in range(40):
        logits, _ = model(idx[:, -block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print(repr(decode(idx[0].tolist())))
