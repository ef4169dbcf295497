"""Causal RNA language model with batched, left-padded sequence completion.

Prompts (partial RNA sequences over ACGU) are left-padded so that the next nucleotide of every
row is predicted from the last column. The eager attention adds a float bias of 0 / finfo.min
laid out (batch, 1, query, key), made from a causal part and a key-padding part.

Source: huggingface/transformers PR #27114 and PR #26421, NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3 and §3 items 15-16
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

NUC = {"A": 2, "C": 3, "G": 4, "U": 5}
PAD, BOS = 0, 1
VOCAB = 6


def causal_bias(n, dtype, device=None):
    return torch.triu(torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=device), diagonal=1)


def padding_bias(attention_mask, dtype):
    bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill(attention_mask == 0, torch.finfo(dtype).min)[:, None, None, :]


def build_bias(attention_mask, dtype):
    n = attention_mask.size(1)
    return torch.minimum(causal_bias(n, dtype, attention_mask.device), padding_bias(attention_mask, dtype))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x, bias):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        weights = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5 + bias
        x = x + self.o((weights.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class RnaLM(nn.Module):
    def __init__(self, dim=32, heads=4, depth=2, max_len=64):
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(depth))
        self.lm_head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids, attention_mask):
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.embed(input_ids) + self.pos(positions)
        bias = build_bias(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return self.lm_head(x)


def left_pad(seqs):
    width = max(len(s) for s in seqs) + 1
    ids = torch.full((len(seqs), width), PAD)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) - 1 :] = torch.tensor([BOS] + [NUC[c] for c in s])
    return ids, (ids != PAD).long()


@torch.no_grad()
def complete(model, prompts, steps=6):
    ids, attention_mask = left_pad(prompts)
    for _ in range(steps):
        nxt = model(ids, attention_mask)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)
    return ids


if __name__ == "__main__":
    torch.manual_seed(0)
    ids, attention_mask = left_pad(["GGGAAACUCC", "AUGGCU", "CCGUA", "GAUUACAGAU"])
    model = RnaLM()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(20):
        logits = model(ids[:, :-1], attention_mask[:, :-1])
        target = ids[:, 1:].masked_fill(attention_mask[:, :-1] == 0, -100)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"train loss {loss.item():.3f}")
    print(complete(model.eval(), ["GGGA", "AUGGCUAC"]).tolist())
