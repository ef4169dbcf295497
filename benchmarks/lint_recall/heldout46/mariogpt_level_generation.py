"""Prompt-conditioned Super Mario Bros. level generation, after MarioGPT.

Imitates shyamsn97/mario-gpt (Sudhakaran et al., "MarioGPT: Open-Ended Text2Level Generation
through Large Language Models"): levels are 14-tile-high strings flattened column by column,
a GPT-2 language model with cross-attention (`add_cross_attention=True`) reads the encoded
prompt, `Prompter` turns a level into its prompt with `count_pipes`, `count_enemies`,
`count_blocks` and `compute_elevation` and the "no / little / some / many" keywords, and
`MarioLM.sample` generates new columns from a seed column. A word tokenizer and a small
encoder stand in for the frozen BART feature extractor, and the prompt keeps one hidden state
per word instead of their mean; the GPT-2 blocks run on SDPA. Levels are synthetic: ground
with gaps, pipes, goombas, brick and question blocks, platforms for the elevation.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md section 3 item 14); conventions.md
section 1 (SDPA row, direction cheat-sheet) and section 5 item 1.
"""

import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HEIGHT = 14
TILES = ["<pad>", "-", "X", "S", "?", "Q", "E", "<", ">", "[", "]", "o"]
KEYWORDS = ["no", "little", "some", "many"]


class MarioLevelTokenizer:
    def __init__(self):
        self.stoi = {t: i for i, t in enumerate(TILES)}
        self.itos = dict(enumerate(TILES))

    def encode(self, flat):
        return torch.tensor([self.stoi[c] for c in flat], dtype=torch.long)

    def decode(self, ids):
        return "".join(self.itos[int(i)] for i in ids)


class PromptTokenizer:
    def __init__(self):
        words = ["<pad>"] + KEYWORDS + ["pipes", "enemies", "blocks", "low", "high", "elevation"]
        self.vocab = {w: i for i, w in enumerate(words)}

    def __call__(self, prompts, return_tensors="pt", padding=True):
        ids = [[self.vocab[w] for w in p.replace(",", " ").split()] for p in prompts]
        width = max(len(x) for x in ids)
        input_ids = torch.zeros(len(ids), width, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, :len(x)] = torch.tensor(x)
            attention_mask[i, :len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def characterize(flat):
    return [flat[i:i + HEIGHT] for i in range(0, len(flat), HEIGHT)]


class Prompter(nn.Module):
    def __init__(self, n_embd=64):
        super().__init__()
        self.tokenizer = PromptTokenizer()
        self.embed = nn.Embedding(len(self.tokenizer.vocab), n_embd, padding_idx=0)
        layer = nn.TransformerEncoderLayer(n_embd, 4, n_embd * 2, dropout=0.0, batch_first=True)
        self.prompter_model = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def encode(self, input_ids, attention_mask):
        return self.prompter_model(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)

    @staticmethod
    def _keyword(count, thresholds):
        return KEYWORDS[int(np.searchsorted(thresholds, count, side="right"))]

    def count_pipes(self, columns):
        return sum(col.count("<") for col in columns)

    def count_enemies(self, columns):
        return sum(col.count("E") for col in columns)

    def count_blocks(self, columns):
        return sum(col.count("S") + col.count("?") for col in columns)

    def compute_elevation(self, columns):
        return "high" if any(("S" in col[:8]) or ("X" in col[:10]) for col in columns) else "low"

    def __call__(self, flat, parts=None):
        columns = characterize(flat)
        phrases = {
            "pipes": f"{self._keyword(self.count_pipes(columns), [0.5, 1.5, 2.5])} pipes",
            "enemies": f"{self._keyword(self.count_enemies(columns), [0.5, 2.5, 4.5])} enemies",
            "blocks": f"{self._keyword(self.count_blocks(columns), [0.5, 3.5, 7.5])} blocks",
            "elevation": f"{self.compute_elevation(columns)} elevation",
        }
        return ", ".join(phrases[p] for p in (parts or list(phrases)))


class GPT2Attention(nn.Module):
    def __init__(self, n_embd, n_head, is_cross_attention=False):
        super().__init__()
        self.n_head = n_head
        self.is_cross_attention = is_cross_attention
        if is_cross_attention:
            self.c_attn = nn.Linear(n_embd, 2 * n_embd)
            self.q_attn = nn.Linear(n_embd, n_embd)
        else:
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def _split_heads(self, x):
        b, t, c = x.shape
        return x.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)

    def forward(self, hidden_states, encoder_hidden_states=None, encoder_attention_mask=None):
        if self.is_cross_attention:
            query = self.q_attn(hidden_states)
            key, value = self.c_attn(encoder_hidden_states).split(hidden_states.size(-1), dim=2)
            q, k, v = map(self._split_heads, (query, key, value))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=encoder_attention_mask[:, None, None, :])
        else:
            q, k, v = map(self._split_heads, self.c_attn(hidden_states).split(hidden_states.size(-1), dim=2))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b, _, t, _ = out.shape
        return self.c_proj(out.transpose(1, 2).reshape(b, t, -1))


class GPT2Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = GPT2Attention(n_embd, n_head)
        self.ln_cross_attn = nn.LayerNorm(n_embd)
        self.crossattention = GPT2Attention(n_embd, n_head, is_cross_attention=True)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, encoder_hidden_states, encoder_attention_mask):
        x = x + self.attn(self.ln_1(x))
        x = x + self.crossattention(self.ln_cross_attn(x), encoder_hidden_states, encoder_attention_mask)
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size, n_positions=512, n_embd=64, n_layer=2, n_head=4):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList([GPT2Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask):
        pos = torch.arange(input_ids.size(1))
        x = self.wte(input_ids) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x, encoder_hidden_states, encoder_attention_mask)
        return self.lm_head(self.ln_f(x))


class MarioLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokenizer = MarioLevelTokenizer()
        self.prompter = Prompter()
        self.lm = GPT2LMHeadModel(len(TILES))

    def forward(self, input_ids, prompts):
        enc = self.prompter.tokenizer(prompts, return_tensors="pt", padding=True)
        encoder_hidden_states = self.prompter.encode(enc["input_ids"], enc["attention_mask"])
        prompt_mask = enc["attention_mask"] == 0  # expect: MC511 tokenizer
        return self.lm(input_ids, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=prompt_mask)

    @torch.no_grad()
    def sample(self, seed, prompts, num_steps, temperature=1.0):
        input_ids = seed
        for _ in range(num_steps):
            logits = self(input_ids, prompts)[:, -1] / temperature
            logits[:, 0] = float("-inf")
            next_ids = torch.multinomial(F.softmax(logits, dim=-1), 1)
            input_ids = torch.cat([input_ids, next_ids], dim=1)
        return input_ids


def generate_level(rng, width=16):
    grid = [["-"] * width for _ in range(HEIGHT)]
    for c in range(width):
        if not (4 < c < width - 2 and rng.random() < 0.08):
            grid[13][c] = grid[12][c] = "X"
    n_pipes, n_enemies, n_blocks = rng.randrange(4), rng.randrange(6), rng.randrange(10)
    for _ in range(n_pipes):
        c = rng.randrange(2, width - 2)
        if grid[12][c] == "X" and grid[12][c + 1] == "X" and grid[11][c] == "-":
            grid[10][c], grid[10][c + 1], grid[11][c], grid[11][c + 1] = "<", ">", "[", "]"
    for _ in range(n_enemies):
        c = rng.randrange(3, width)
        if grid[12][c] == "X" and grid[11][c] == "-":
            grid[11][c] = "E"
    row = 4 if rng.random() < 0.4 else 8
    for _ in range(n_blocks):
        grid[row][rng.randrange(2, width)] = rng.choice("S?")
    return "".join("".join(grid[r][c] for r in range(HEIGHT)) for c in range(width))


if __name__ == "__main__":
    rng = random.Random(11)
    torch.manual_seed(11)
    mario_lm = MarioLM()
    levels = [generate_level(rng) for _ in range(144)]
    data = []
    for flat in levels:
        parts = rng.sample(["pipes", "enemies", "blocks", "elevation"], rng.randint(2, 4))
        data.append((mario_lm.tokenizer.encode(flat), mario_lm.prompter(flat, parts)))
    optimizer = torch.optim.AdamW(mario_lm.parameters(), lr=2e-3)
    for epoch in range(3):
        rng.shuffle(data)
        for start in range(0, len(data), 16):
            batch = data[start:start + 16]
            input_ids = torch.stack([ids for ids, _ in batch])
            logits = mario_lm(input_ids[:, :-1], [p for _, p in batch])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), input_ids[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}")
    prompts = ["many pipes, many enemies, some blocks, high elevation", "no pipes, little enemies"]
    seed = torch.stack([mario_lm.tokenizer.encode(generate_level(rng)[:HEIGHT]) for _ in prompts])
    out = mario_lm.sample(seed, prompts, num_steps=3 * HEIGHT)
    for prompt, ids in zip(prompts, out):
        flat = mario_lm.tokenizer.decode(ids)
        print(prompt, "->", mario_lm.prompter(flat))
        for r in range(HEIGHT):
            print("".join(col[r] for col in characterize(flat)))
