"""Next-move prediction for chess games with a nanoGPT decoder over UCI move tokens.

A move-level tokenizer (one token per from-square/to-square pair, promotions included, games
wrapped in <g> ... </g>), a GPT in karpathy/nanoGPT's layout with a hand-written attention and
a registered attention bias, right-padded game batches with ignore_index targets, top-1 accuracy
on the replies and sampling restricted to the moves a position generator allows.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask), pytorch/pytorch#103749 (conventions.md section 3 item 5), conventions.md section 2.3
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

FILES, RANKS = "abcdefgh", "12345678"
SQUARES = [f + r for r in RANKS for f in FILES]


def build_move_vocab():
    moves = ["<pad>", "<g>", "</g>"]
    for i, a in enumerate(SQUARES):
        for j, b in enumerate(SQUARES):
            df, dr = abs(i % 8 - j % 8), abs(i // 8 - j // 8)
            if i != j and (df == 0 or dr == 0 or df == dr or {df, dr} == {1, 2}):
                moves.append(a + b)
    for f in range(8):
        for df in (-1, 0, 1):
            if 0 <= f + df < 8:
                moves.extend(FILES[f] + "7" + FILES[f + df] + "8" + p for p in "qrbn")
    return {m: i for i, m in enumerate(moves)}


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 2048
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0
    bias: bool = True


def causal_attention_bias(block_size):
    return torch.triu(torch.full((block_size, block_size), float("-inf")), diagonal=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x, attn_bias):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att + attn_bias
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, attn_bias):
        x = x + self.attn(self.ln_1(x), attn_bias)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.register_buffer("attn_bias", causal_attention_bias(config.block_size)[None, None], persistent=False)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        attn_bias = self.attn_bias[:, :, :t, :t]
        for block in self.transformer.h:
            x = block(x, attn_bias)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def next_move(self, idx, legal):
        logits, _ = self(idx[:, -self.config.block_size:])
        logits = logits[:, -1, :].masked_fill(~legal, float("-inf"))
        return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)


class OpeningBook:
    def __init__(self, vocab, seed=0):
        rng = random.Random(seed)
        self.moves = [m for m in vocab if len(m) == 4]
        self.candidates = {m: rng.sample(self.moves, 4) for m in self.moves + ["<g>"]}
        self.reply = {m: rng.choice(self.moves) for m in self.moves}

    def game(self, rng, max_plies):
        plies, prev = [], "<g>"
        for _ in range(rng.randint(6, max_plies) // 2):
            white = rng.choice(self.candidates[prev])
            prev = self.reply[white]
            plies += [white, prev]
        return ["<g>"] + plies + ["</g>"]


def get_batch(book, vocab, rng, batch_size, block_size):
    games = [book.game(rng, block_size - 2) for _ in range(batch_size)]
    width = max(len(g) for g in games)
    x = torch.zeros(batch_size, width - 1, dtype=torch.long)
    y = torch.full((batch_size, width - 1), -1, dtype=torch.long)
    for i, g in enumerate(games):
        ids = torch.tensor([vocab[m] for m in g])
        x[i, : len(ids) - 1] = ids[:-1]
        y[i, : len(ids) - 1] = ids[1:]
    return x, y


def main():
    torch.manual_seed(0)
    vocab = build_move_vocab()
    config = GPTConfig(vocab_size=len(vocab))
    book = OpeningBook(vocab)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    rng = random.Random(0)
    for it in range(300):
        x, y = get_batch(book, vocab, rng, 32, config.block_size)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if it % 100 == 0:
            print(f"iter {it}: loss {loss.item():.4f}")
    model.eval()
    x, y = get_batch(book, vocab, random.Random(1), 128, config.block_size)
    with torch.no_grad():
        pred = model(x)[0].argmax(-1)
    reply = (y >= 0) & (torch.arange(y.size(1)) % 2 == 1)
    print(f"reply top-1 accuracy {(pred == y)[reply].float().mean():.3f}")
    legal = torch.zeros(1, len(vocab), dtype=torch.bool)
    legal[0, [vocab[m] for m in book.candidates["<g>"]]] = True
    print("sampled first move:", model.next_move(torch.tensor([[vocab["<g>"]]]), legal).item())


if __name__ == "__main__":
    main()
