"""Fill-in-the-middle pretraining of a small code LM (SantaCoder / bigcode Megatron layout).

Code files are turned into PSM or SPM samples by ``permute`` (``<fim_prefix>``,
``<fim_suffix>``, ``<fim_middle>`` sentinels), packed into fixed-length sequences
separated by end-of-document tokens, and trained as a left-to-right LM whose
attention and position ids are reset at every document boundary
(``get_ltor_masks_and_position_ids`` with ``reset_attention_mask``).

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask);
pytorch/pytorch#103749 (conventions.md §3 item 5), conventions.md §2.3
"""
import math
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EOD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD = 256, 257, 258, 259, 260
args = SimpleNamespace(seq_length=96, vocab_size=261, hidden_size=64, num_attention_heads=4,
                       num_layers=2, fim_rate=0.5, fim_spm_rate=0.5, seed=1234)


def tokenize(text):
    return list(text.encode("utf-8"))


def permute(sample, np_rng, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate):
    if not np_rng.binomial(1, fim_rate):
        return sample
    boundaries = sorted(np_rng.randint(low=0, high=len(sample) + 1, size=2))
    prefix = sample[:boundaries[0]]
    middle = sample[boundaries[0]:boundaries[1]]
    suffix = sample[boundaries[1]:]
    if np_rng.binomial(1, fim_spm_rate):
        return [FIM_PREFIX, FIM_SUFFIX] + suffix + [FIM_MIDDLE] + prefix + middle
    return [FIM_PREFIX] + prefix + [FIM_SUFFIX] + suffix + [FIM_MIDDLE] + middle


def build_samples(documents, np_rng, seq_length=args.seq_length):
    stream = []
    for doc in documents:
        stream += permute(tokenize(doc), np_rng) + [EOD]
    n = max(1, math.ceil(len(stream) / (seq_length + 1)))
    stream += [FIM_PAD] * (n * (seq_length + 1) - len(stream))
    return torch.tensor(stream).view(n, seq_length + 1)


def get_ltor_masks_and_position_ids(data, eod_token=EOD, pad_token=FIM_PAD):
    batch, seq = data.shape
    starts = torch.zeros_like(data)
    starts[:, 1:] = (data[:, :-1] == eod_token).long()
    document_ids = starts.cumsum(dim=1)
    same_document = document_ids[:, :, None] == document_ids[:, None, :]
    first = torch.arange(seq).expand(batch, seq).masked_fill(starts == 0, 0).cummax(dim=1).values
    position_ids = torch.arange(seq).expand(batch, seq) - first
    loss_mask = (data != pad_token).float()
    return same_document, loss_mask, position_ids


@lru_cache(maxsize=8)
def future_mask(n, device="cpu"):
    return torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, x, blocked):
        b, s, h = x.shape
        q, k, v = self.query_key_value(x).view(b, s, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(blocked[:, None], float("-inf"))
        probs = F.softmax(scores, dim=-1)
        return self.dense((probs @ v).transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_size)
        self.attn = CausalSelfAttention(hidden_size, num_heads)
        self.ln_2 = nn.LayerNorm(hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * hidden_size, hidden_size))

    def forward(self, x, blocked):
        x = x + self.attn(self.ln_1(x), blocked)
        return x + self.mlp(self.ln_2(x))


class FIMCodeLM(nn.Module):
    def __init__(self, a=args):
        super().__init__()
        self.wte = nn.Embedding(a.vocab_size, a.hidden_size)
        self.wpe = nn.Embedding(a.seq_length, a.hidden_size)
        self.blocks = nn.ModuleList(Block(a.hidden_size, a.num_attention_heads) for _ in range(a.num_layers))
        self.ln_f = nn.LayerNorm(a.hidden_size)
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, tokens, position_ids=None, same_document=None):
        b, s = tokens.shape
        if position_ids is None:
            position_ids = torch.arange(s, device=tokens.device).expand(b, s)
        blocked = future_mask(s, tokens.device)[None]
        if same_document is not None:
            blocked = blocked | ~same_document
        x = self.wte(tokens) + self.wpe(position_ids)
        for block in self.blocks:
            x = block(x, blocked)
        return F.linear(self.ln_f(x), self.wte.weight)


def lm_loss(model, samples):
    tokens, labels = samples[:, :-1], samples[:, 1:]
    same_document, loss_mask, position_ids = get_ltor_masks_and_position_ids(tokens)
    logits = model(tokens, position_ids, same_document)
    losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    return (losses * loss_mask.flatten()).sum() / loss_mask.sum()


@torch.no_grad()
def infill(model, prefix, suffix, max_new_tokens=12):
    ids = [FIM_PREFIX] + tokenize(prefix) + [FIM_SUFFIX] + tokenize(suffix) + [FIM_MIDDLE]
    out = []
    for _ in range(max_new_tokens):
        tokens = torch.tensor([ids + out])[:, -args.seq_length:]
        next_id = int(model(tokens)[0, -1].argmax())
        if next_id == EOD:
            break
        out.append(next_id)
    return bytes(t for t in out if t < 256).decode("utf-8", errors="replace")


CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def is_even(n):\n    return n % 2 == 0\n",
    "for i in range(10):\n    print(i * i)\n",
    "import os\npaths = [p for p in os.listdir('.') if p.endswith('.py')]\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
]


if __name__ == "__main__":
    torch.manual_seed(0)
    np_rng = np.random.RandomState(seed=args.seed)
    model = FIMCodeLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    samples = build_samples(CORPUS, np_rng)
    for step in range(4):
        loss = lm_loss(model, samples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} samples {tuple(samples.shape)} loss {loss.item():.4f}")
    model.eval()
    print("infill:", repr(infill(model, "def add(a, b):\n    return ", "\n")))
