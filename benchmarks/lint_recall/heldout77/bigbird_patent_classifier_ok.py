"""BigBird ITC encoder classifying long patent documents into CPC sections.

Block-sparse attention with the internal-transformer-construction layout
(first and last blocks global, a three-block sliding window, random blocks per
layer), materialised as a dense additive bias for the reference path, on claims
text padded to a multiple of the block size.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3
"""
import zlib
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CPC_SECTIONS = ["A", "B", "C", "D", "E", "F", "G", "H"]


@dataclass
class BigBirdConfig:
    vocab_size: int = 2048
    hidden_size: int = 32
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    block_size: int = 4
    num_random_blocks: int = 1
    max_position_embeddings: int = 256
    num_labels: int = len(CPC_SECTIONS)
    seed: int = 0


class PatentTokenizer:
    cls_token_id, sep_token_id, pad_token_id = 65, 66, 0

    def __call__(self, texts, return_tensors="pt", pad_to_multiple_of=1):
        rows = [[self.cls_token_id] + [67 + zlib.crc32(w.encode()) % 1900 for w in t.lower().split()] + [self.sep_token_id] for t in texts]
        n = max(map(len, rows))
        n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
        input_ids = torch.full((len(rows), n), self.pad_token_id, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}


def bigbird_block_layout(num_blocks, num_rand_blocks, generator):
    layout = []
    for i in range(num_blocks):
        if i in (0, num_blocks - 1):
            layout.append(list(range(num_blocks)))
            continue
        cols = {0, num_blocks - 1, i - 1, i, i + 1}
        candidates = [j for j in range(1, num_blocks - 1) if j not in cols]
        if candidates and num_rand_blocks > 0:
            picks = torch.randperm(len(candidates), generator=generator)[:num_rand_blocks]
            cols |= {candidates[p] for p in picks.tolist()}
        layout.append(sorted(cols))
    return layout


def block_sparse_bias(seq_len, block_size, num_rand_blocks, generator):
    num_blocks = seq_len // block_size
    bias = torch.zeros(seq_len, seq_len)
    for i, cols in enumerate(bigbird_block_layout(num_blocks, num_rand_blocks, generator)):
        rows = slice(i * block_size, (i + 1) * block_size)
        for j in cols:
            bias[rows, j * block_size:(j + 1) * block_size] = 1
    bias[bias == 0] = float("-inf")
    bias[bias == 1] = 0.0
    return bias


class BigBirdSelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.generator = torch.Generator().manual_seed(config.seed + layer_idx)

    def forward(self, hidden_states, band_bias_cache, extended_attention_mask):
        b, n, d = hidden_states.shape
        if n not in band_bias_cache:
            band_bias_cache[n] = block_sparse_bias(n, self.config.block_size, self.config.num_random_blocks, self.generator)
        sparse_bias = band_bias_cache[n].to(hidden_states.device)
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        scores = scores + sparse_bias + extended_attention_mask
        probs = F.softmax(scores, dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, n, d))


class BigBirdLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.attention = BigBirdSelfAttention(config, layer_idx)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.band_bias_cache = {}

    def forward(self, hidden_states, extended_attention_mask):
        hidden_states = self.norm1(hidden_states + self.attention(hidden_states, self.band_bias_cache, extended_attention_mask))
        return self.norm2(hidden_states + self.ffn(hidden_states))


class BigBirdForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList([BigBirdLayer(config, i) for i in range(config.num_hidden_layers)])
        self.classifier = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh(),
                                        nn.Linear(config.hidden_size, config.num_labels))

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask, labels=None):
        if input_ids.shape[1] % self.config.block_size:
            raise ValueError("sequence length must be a multiple of block_size")
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        logits = self.classifier(hidden_states[:, 0])
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    config = BigBirdConfig()
    claims = [
        "a method for treating a tumour comprising administering a compound to a patient in need thereof "
        "wherein the compound is selected from the group consisting of kinase inhibitors and antibodies",
        "a semiconductor device comprising a substrate a gate electrode and a dielectric layer",
    ]
    batch = PatentTokenizer()(claims, return_tensors="pt", pad_to_multiple_of=config.block_size)
    model = BigBirdForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    labels = torch.tensor([CPC_SECTIONS.index("A"), CPC_SECTIONS.index("H")])
    for step in range(3):
        loss, logits = model(**batch, labels=labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
