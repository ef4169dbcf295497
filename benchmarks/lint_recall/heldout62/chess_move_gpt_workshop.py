"""Chess club x ML society workshop: a tiny GPT that predicts the next move.

Exported from the workshop notebook ("build a GPT in an afternoon"). Games are
written as sequences of UCI moves (``e2e4 e7e5 g1f3 ...``), one token per move.
Instead of downloading a PGN database we sample games from a small opening book
(the main lines of eight openings, leaving the book at a random ply) followed by a
few random moves, so the model can at best learn the book. The notebook builds the
vocabulary, a character-free move tokenizer, a two-block GPT with a causal mask
kept as a buffer, trains it, and asks it to continue a few openings.

Source: conventions.md §1 (direction cheat-sheet: additive masks), §5 item 4; seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

BOOK = {
    "Ruy Lopez": "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1 f8e7",
    "Italian": "e2e4 e7e5 g1f3 b8c6 f1c4 f8c5 c2c3 g8f6 d2d3 d7d6",
    "Sicilian Najdorf": "e2e4 c7c5 g1f3 d7d6 d2d4 c5d4 f3d4 g8f6 b1c3 a7a6",
    "French": "e2e4 e7e6 d2d4 d7d5 b1c3 g8f6 c1g5 f8e7 e4e5 f6d7",
    "Caro-Kann": "e2e4 c7c6 d2d4 d7d5 b1c3 d5e4 c3e4 c8f5 e4g3 f5g6",
    "Queen's Gambit Declined": "d2d4 d7d5 c2c4 e7e6 b1c3 g8f6 c1g5 f8e7 e2e3 e8g8",
    "King's Indian": "d2d4 g8f6 c2c4 g7g6 b1c3 f8g7 e2e4 d7d6 g1f3 e8g8",
    "English": "c2c4 e7e5 b1c3 g8f6 g1f3 b8c6 g2g3 d7d5 c4d5 f6d5",
}
RANDOM_MOVES = "a2a3 h2h3 a7a6 h7h6 b2b3 g7g6 d1e2 d8e7 f1e1 f8e8 a1b1 a8b8 g1h1 g8h8".split()
MAX_PLIES = 16


def sample_game(rng):
    line = rng.choice(list(BOOK.values())).split()
    leave = rng.randint(4, len(line))
    return line[:leave] + [rng.choice(RANDOM_MOVES) for _ in range(rng.randint(0, MAX_PLIES - leave))]


class MoveTokenizer:
    def __init__(self):
        moves = sorted({m for line in BOOK.values() for m in line.split()} | set(RANDOM_MOVES))
        self.itos = ["<pad>", "<game>"] + moves
        self.stoi = {m: i for i, m in enumerate(self.itos)}

    def encode(self, games):
        ids = torch.zeros(len(games), MAX_PLIES + 1, dtype=torch.long)
        for i, g in enumerate(games):
            ids[i, : len(g) + 1] = torch.tensor([1] + [self.stoi[m] for m in g])
        return ids


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, block_size):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.register_buffer("causal", torch.triu(torch.full((block_size, block_size), float("-inf")), diagonal=1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att * self.causal[:T, :T]  # expect: MC523 multiply
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, block_size)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class MoveGPT(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, block_size=MAX_PLIES + 1):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, block_size) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))[None]
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=0)
        return logits, loss

    @torch.no_grad()
    def continue_game(self, idx, n_moves):
        for _ in range(n_moves):
            logits, _ = self(idx[:, -MAX_PLIES:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx


def book_accuracy(model, tok):
    hits = total = 0
    model.eval()
    for line in BOOK.values():
        moves = line.split()
        ids = tok.encode([moves])
        logits, _ = model(ids[:, :-1])
        pred = logits.argmax(-1)[0]
        for ply in range(2, len(moves)):
            total += 1
            hits += int(pred[ply].item() == ids[0, ply + 1].item())
    return hits / total


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    tok = MoveTokenizer()
    games = [sample_game(rng) for _ in range(4000)]
    print("vocabulary:", len(tok.itos), "moves; a sample game:", " ".join(games[0]))
    data = tok.encode(games)
    print("encoded:", data[0].tolist())
    assert (data[:, 0] == 1).all()

    model = MoveGPT(len(tok.itos))
    print("causal mask buffer (first 4x4):\n", model.blocks[0].attn.causal[:4, :4])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    for it in range(400):
        model.train()
        batch = data[torch.randint(0, len(data), (64,))]
        _, loss = model(batch[:, :-1], batch[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it % 100 == 0:
            print(f"iter {it:3d}  loss {loss.item():.4f}")

    print("book-move accuracy after ply 2: %.3f" % book_accuracy(model, tok))
    for opening in ["e2e4 c7c5", "d2d4 d7d5 c2c4", "c2c4"]:
        ids = tok.encode([opening.split()])[:, : len(opening.split()) + 1]
        out = model.continue_game(ids, 4)[0, 1:].tolist()
        print(f"{opening:16s} -> {' '.join(tok.itos[i] for i in out)}")


if __name__ == "__main__":
    main()
