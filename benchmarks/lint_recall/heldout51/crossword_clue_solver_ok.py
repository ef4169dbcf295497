"""Crossword clue solver (Hub remote code: configuration and modeling in one file).

A small decoder-only model over `clue words <len_N> <sep> answer letters <eos>`: trained on
clue/answer pairs, it fills an answer letter by letter, restricted to the enumeration and to the
letters already given by crossing entries (`solve("Capital of Norway", "O??O")`).

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061 (conventions.md §3 items 9 and 14)
"""

import math
import re
import string

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

LETTERS = list(string.ascii_uppercase)


class CrosswordConfig(PretrainedConfig):
    model_type = "crossword_gpt"

    def __init__(self, vocab_size=512, d_model=64, n_heads=4, n_layers=3, max_len=64,
                 pad_token_id=0, sep_token_id=1, eos_token_id=2, **kwargs):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.max_len = max_len
        self.sep_token_id = sep_token_id
        super().__init__(pad_token_id=pad_token_id, eos_token_id=eos_token_id, **kwargs)


class ClueTokenizer:
    def __init__(self, clue_words, max_answer=21):
        specials = ["<pad>", "<sep>", "<eos>", "<unk>"] + [f"<len_{n}>" for n in range(1, max_answer + 1)]
        self.vocab = {tok: i for i, tok in enumerate(specials + LETTERS)}
        for w in clue_words:
            self.vocab.setdefault(w.lower(), len(self.vocab))
        self.letter_ids = torch.tensor([self.vocab[c] for c in LETTERS])

    def encode_clue(self, clue, length):
        words = [self.vocab.get(w, 3) for w in re.findall(r"[a-z']+", clue.lower())]
        return words + [self.vocab[f"<len_{length}>"], self.vocab["<sep>"]]

    def __call__(self, clues, answers):
        rows = [self.encode_clue(c, len(a)) + [self.vocab[ch] for ch in a] + [self.vocab["<eos>"]]
                for c, a in zip(clues, answers)]
        width = max(map(len, rows))
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


class ClueAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.scale = 1.0 / math.sqrt(config.d_model // config.n_heads)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x, key_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.scale

        def future_mask(n):
            return torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)

        scores = scores.masked_fill(future_mask(t), torch.finfo(scores.dtype).min)
        scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class ClueBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = ClueAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                 nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x, key_keep):
        x = x + self.attn(self.ln1(x), key_keep)
        return x + self.mlp(self.ln2(x))


class CrosswordSolver(PreTrainedModel):
    config_class = CrosswordConfig
    base_model_prefix = "crossword"

    def __init__(self, config):
        super().__init__(config)
        self.tok = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList([ClueBlock(config) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, attention_mask=None, labels=None):
        key_keep = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        for block in self.blocks:
            x = block(x, key_keep)
        logits = self.head(self.ln_f(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def solve(model, tokenizer, clue, pattern):
    model.eval()
    ids = tokenizer.encode_clue(clue, len(pattern))
    answer = []
    for given in pattern:
        logits = model(torch.tensor([ids]))["logits"][0, -1]
        allowed = torch.zeros_like(logits, dtype=torch.bool)
        allowed[tokenizer.letter_ids if given == "?" else tokenizer.vocab[given.upper()]] = True
        next_id = int(logits.masked_fill(~allowed, float("-inf")).argmax())
        ids.append(next_id)
        answer.append(LETTERS[next_id - int(tokenizer.letter_ids[0])])
    return "".join(answer)


if __name__ == "__main__":
    torch.manual_seed(0)
    clues = ["Capital of Norway", "Opera highlight", "Beast of burden"]
    tokenizer = ClueTokenizer(re.findall(r"[a-z']+", " ".join(clues).lower()))
    model = CrosswordSolver(CrosswordConfig())
    batch = tokenizer(clues, ["OSLO", "ARIA", "ASS"])
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    print(model(**batch, labels=labels)["loss"].item())
    print(solve(model, tokenizer, "Capital of Norway", "O??O"))
