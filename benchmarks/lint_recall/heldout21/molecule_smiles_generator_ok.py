"""Character-level SMILES generator that completes left-padded scaffold prompts.

Trained in float32, then cast with `model.half()` for batched sampling. Prompts are left-padded
so that every row ends at the last column; position ids count real tokens only, and the
attention keeps a key when it is real and not in the future of the query.

Source: huggingface/lerobot PR #710, conventions.md §3 item 19
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CHARS = "CNOFcnos()=#123[]+-H"
PAD, BOS, EOS = 0, 1, 2
STOI = {c: i + 3 for i, c in enumerate(CHARS)}
VOCAB = len(CHARS) + 3


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class SmilesGPT(nn.Module):
    def __init__(self, dim=48, heads=4, depth=2, max_len=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(max_len, dim)
        self.attn = nn.ModuleList(Attention(dim, heads) for _ in range(depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
                                 for _ in range(depth))
        self.ln = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * depth))
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, ids):
        real = ids != PAD
        n = ids.size(1)
        causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        keep = causal & real[:, None, None, :]
        positions = (real.cumsum(-1) - 1).clamp(min=0)
        x = self.tok(ids) + self.pos(positions)
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
            x = x + attn(self.ln[2 * i](x), keep)
            x = x + mlp(self.ln[2 * i + 1](x))
        return self.head(x)


def encode(smiles, left_pad_to=None):
    ids = [BOS] + [STOI[c] for c in smiles]
    if left_pad_to is not None:
        ids = [PAD] * (left_pad_to - len(ids)) + ids
    return ids


@torch.no_grad()
def complete(model, prompts, steps=8):
    width = max(len(p) for p in prompts) + 1
    ids = torch.tensor([encode(p, width) for p in prompts])
    for _ in range(steps):
        logits = model(ids)[:, -1].float()
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


if __name__ == "__main__":
    torch.manual_seed(0)
    corpus = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CN1C=NC2=C1C(=O)N(C)C(=O)N2C", "OCC(O)CO"]
    batch = nn.utils.rnn.pad_sequence([torch.tensor(encode(s) + [EOS]) for s in corpus],
                                      batch_first=True, padding_value=PAD)
    model = SmilesGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(30):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"train loss {loss.item():.3f}")
    model = model.half().eval()
    out = complete(model, ["CC(=O)", "c1ccc", "OCC"])
    print(out.tolist())
