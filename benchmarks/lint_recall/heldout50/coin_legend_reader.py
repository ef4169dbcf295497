"""Reading the legends of Roman Imperial coins from photographs (numismatics notebook export).

A patch encoder summarises the obverse photograph and a small transformer decoder writes
the legend (IMP CAES TRAIAN AVG ...) letter by letter, for a museum's coin cabinet where
most legends are worn or off-flan.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask)
"""

# %%
import functools
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(11)
torch.manual_seed(11)

LEGENDS = ["IMP CAES TRAIAN AVG", "DIVVS AVGVSTVS", "IMP NERVA CAES AVG", "ANTONINVS PIVS AVG", "HADRIANVS AVGVSTVS"]
itos = ["<pad>", "<s>", "</s>"] + sorted(set("".join(LEGENDS)))
stoi = {c: i for i, c in enumerate(itos)}
MAX_LEN = 24


def causal_mask(n):
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


# %%
def photograph(legend_id, n_patches=16, d=32):
    base = torch.randn(n_patches, d, generator=torch.Generator().manual_seed(legend_id))
    return base + 0.3 * torch.randn(n_patches, d)


def make_batch(size):
    ids = [random.randrange(len(LEGENDS)) for _ in range(size)]
    patches = torch.stack([photograph(i) for i in ids])
    tgt = torch.zeros(size, MAX_LEN, dtype=torch.long)
    for row, i in enumerate(ids):
        seq = [1] + [stoi[c] for c in LEGENDS[i]] + [2]
        tgt[row, : len(seq)] = torch.tensor(seq)
    return patches, tgt


# %%
@functools.lru_cache(maxsize=8)
def causal_mask(n):
    return torch.triu(torch.ones(n, n), diagonal=1) * float("-inf")  # expect: MC522 redefined


class LegendReader(nn.Module):
    def __init__(self, d=32, vocab=len(itos)):
        super().__init__()
        self.patch_proj = nn.Linear(32, d)
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(MAX_LEN, d) * 0.02)
        layer = nn.TransformerDecoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.out = nn.Linear(d, vocab)

    def forward(self, patches, tgt):
        t = tgt.size(1)
        x = self.embed(tgt) + self.pos[:t]
        h = self.decoder(x, self.patch_proj(patches), tgt_mask=causal_mask(t))
        return self.out(h)


reader = LegendReader()
opt = torch.optim.Adam(reader.parameters(), lr=3e-3)

# %%
for step in range(80):
    patches, tgt = make_batch(32)
    logits = reader(patches, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, len(itos)), tgt[:, 1:].reshape(-1), ignore_index=0)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())

# %%
@torch.no_grad()
def read_legend(patches):
    out = torch.tensor([[1]])
    for _ in range(MAX_LEN - 1):
        nxt = reader(patches[None], out)[0, -1].argmax()
        if nxt.item() == 2:
            break
        out = torch.cat([out, nxt.view(1, 1)], 1)
    return "".join(itos[i] for i in out[0, 1:].tolist())


print(read_legend(photograph(2)), "|", LEGENDS[2])
