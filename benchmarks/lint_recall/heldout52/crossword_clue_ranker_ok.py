"""Answer ranking for the clues of quick (non-cryptic) crosswords.

A clue is encoded with nn.TransformerEncoder; the answer is chosen among the
words of the grid's dictionary that fit the slot's length.  The padding helper
is a TorchScript function so that the exported solver can call it too.

Source: seed self_attention_mask_guide.txt (sections 2 and 7).
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import reduce

PAD, UNK = 0, 1
CLUES = {
    "river": ["flowing water", "stream to the sea", "nile for one"],
    "eagle": ["bird of prey", "golf score under birdie", "national bird"],
    "piano": ["keyboard instrument", "soft in music", "grand for one"],
    "oasis": ["desert spring", "green spot in sand", "refuge"],
    "atlas": ["book of maps", "titan holding the sky", "map collection"],
    "tenor": ["singer above baritone", "general drift", "high male voice"],
    "ember": ["glowing coal", "remnant of a fire", "hot ash"],
    "ocean": ["atlantic for one", "deep blue sea", "vast water"],
    "cello": ["bowed instrument", "string player's bass", "instrument in a quartet"],
    "orbit": ["path of a planet", "circle the earth", "sphere of influence"],
    "onion": ["tearful vegetable", "layered bulb", "allium"],
    "seal": ["marine mammal", "close an envelope", "stamp of approval"],
    "nile": ["african river", "egypt's river", "longest river"],
    "harp": ["angel's instrument", "dwell on", "irish emblem"],
}
ANSWERS = sorted(CLUES)
VOCAB = {w: i + 2 for i, w in enumerate(sorted({t for cs in CLUES.values() for c in cs for t in c.split()}))}


@torch.jit.script
def key_padding(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    keep = ids.ne(pad_id)
    return ~keep


def tokenize(clues):
    rows = [[VOCAB.get(t, UNK) for t in c.split()] for c in clues]
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


class ClueEncoder(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(len(VOCAB) + 2, dim, padding_idx=PAD)
        self.pos = nn.Embedding(16, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.answers = nn.Embedding(len(ANSWERS), dim)

    def forward(self, ids, slot_length):
        pad = key_padding(ids, PAD)
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        h = self.encoder(x, src_key_padding_mask=pad)
        w = (~pad).unsqueeze(-1).float()
        clue = reduce(h * w, "b n d -> b d", "sum") / reduce(w, "b n d -> b d", "sum")
        logits = clue @ self.answers.weight.T
        fits = torch.tensor([len(a) for a in ANSWERS])[None, :] == slot_length[:, None]
        return logits.masked_fill(~fits, float("-inf"))


def sample(rng, n):
    picks = [rng.choice(ANSWERS) for _ in range(n)]
    clues = [rng.choice(CLUES[a]) for a in picks]
    return tokenize(clues), torch.tensor([len(a) for a in picks]), torch.tensor([ANSWERS.index(a) for a in picks])


def solve(model, clue, length):
    with torch.no_grad():
        scores = model(tokenize([clue]), torch.tensor([length]))
    return ANSWERS[int(scores.argmax())]


def main():
    rng = random.Random(4)
    torch.manual_seed(4)
    model = ClueEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(120):
        ids, slot, target = sample(rng, 24)
        loss = F.cross_entropy(model(ids, slot), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, slot, target = sample(rng, 200)
    with torch.no_grad():
        acc = (model(ids, slot).argmax(-1) == target).float().mean().item()
    print(f"loss {loss.item():.3f}  answer accuracy {acc:.3f}")
    print(solve(model, "stream to the sea", 5), solve(model, "bowed instrument", 5))


if __name__ == "__main__":
    main()
