"""Small ESM-style protein language model trained with masked residue prediction.

Sequences of different lengths are right-padded with PAD and batched. The top module builds
the padding mask once from the token ids and hands it down through the encoder stack to the
einsum attention of every layer, which fills the masked logits with -inf as ESM does.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

AMINO = "ACDEFGHIKLMNPQRSTVWY"
PAD, MASK = 0, 1
VOCAB = len(AMINO) + 2


def tokenize(seqs):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor([AMINO.index(a) + 2 for a in s])
    return ids


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, pad_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        logits = torch.einsum("bihd,bjhd->bhij", q, k) / (d // self.heads) ** 0.5
        logits = logits.masked_fill(pad_mask == 0, float("-inf"))
        attn = logits.softmax(dim=-1)
        return self.out(torch.einsum("bhij,bjhd->bihd", attn, v).reshape(b, n, d))


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pad_mask):
        x = x + self.attn(self.ln1(x), pad_mask)
        return x + self.ffn(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self, dim, heads, depth):
        super().__init__()
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(depth))

    def forward(self, x, pad_mask):
        for layer in self.layers:
            x = layer(x, pad_mask)
        return x


class ProteinLM(nn.Module):
    def __init__(self, dim=32, heads=4, depth=2, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, dim)
        self.encoder = Encoder(dim, heads, depth)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, ids):
        pad_mask = (ids != PAD).unsqueeze(1).unsqueeze(2)
        x = self.embed(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        return self.head(self.encoder(x, pad_mask))


def mask_residues(ids, p=0.15, generator=None):
    real = ids != PAD
    pick = (torch.rand(ids.shape, generator=generator) < p) & real
    pick[:, 0] |= ~pick.any(dim=1)
    inputs = ids.masked_fill(pick, MASK)
    labels = ids.masked_fill(~pick, -100)
    return inputs, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ids = tokenize(["MKTAYIAKQR", "GSHMLE", "MVLSPADKTNVKAAW", "ACDE"])
    model = ProteinLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        inputs, labels = mask_residues(ids, generator=g)
        logits = model(inputs)
        loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")
