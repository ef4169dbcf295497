"""Hyphenation point tagger for typesetting (Hub remote code: configuration and modeling in one file).

A character-level encoder that marks, for each letter of a word, whether a discretionary hyphen
may follow it (a learned replacement for Liang's TeX patterns, trained on a hyphenated
dictionary). `hyphenate(["typesetting"])` gives `["type-set-ting"]` once trained; words are
batched in a `HyphenBatch` padded to the longest word.

Source: pytorch/pytorch#103963, huggingface/transformers#32195 (conventions.md §3 items 6 and 25)
"""

import math
import string
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

PAD_ID = 0
CHARS = string.ascii_lowercase + "àâäçéèêëîïôöùûüßæœ'"


class HyphenConfig(PretrainedConfig):
    model_type = "hyphen_tagger"

    def __init__(self, vocab_size=len(CHARS) + 2, hidden_size=64, num_heads=4, num_layers=3,
                 max_word_len=48, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.max_word_len = max_word_len
        super().__init__(pad_token_id=PAD_ID, **kwargs)


@dataclass
class HyphenBatch:
    char_ids: torch.Tensor
    labels: Optional[torch.Tensor] = None

    @classmethod
    def from_words(cls, words, hyphenated=None):
        width = max(len(w) for w in words)
        char_ids = torch.full((len(words), width), PAD_ID, dtype=torch.long)
        for i, w in enumerate(words):
            char_ids[i, : len(w)] = torch.tensor([CHARS.find(c) + 2 for c in w.lower()])
        labels = None
        if hyphenated is not None:
            labels = torch.full((len(words), width), -100, dtype=torch.long)
            for i, h in enumerate(hyphenated):
                marks = [int(nxt == "-") for c, nxt in zip(h, h[1:] + " ") if c != "-"]
                labels[i, : len(marks)] = torch.tensor(marks)
        return cls(char_ids, labels)

    @property
    def attn_bias(self):
        return (self.char_ids != PAD_ID).float()[:, None, None, :]  # expect: MC508 property


class CharSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, attn_bias):
        b, t, d = x.shape
        q, k, v = (proj(x).view(b, t, self.num_heads, -1).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)  # also: MC508
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d))


class CharLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.hidden_size)
        self.attn = CharSelfAttention(config)
        self.mlp_norm = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))

    def forward(self, x, attn_bias):
        x = x + self.attn(self.attn_norm(x), attn_bias)
        return x + self.mlp(self.mlp_norm(x))


class HyphenTagger(PreTrainedModel):
    config_class = HyphenConfig
    base_model_prefix = "hyphen"

    def __init__(self, config):
        super().__init__(config)
        self.char_emb = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=PAD_ID)
        self.pos_emb = nn.Embedding(config.max_word_len, config.hidden_size)
        self.layers = nn.ModuleList([CharLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=1.0 / math.sqrt(self.config.hidden_size))

    def forward(self, char_ids, attn_bias, labels=None):
        x = self.char_emb(char_ids) + self.pos_emb(torch.arange(char_ids.size(1), device=char_ids.device))
        for layer in self.layers:
            x = layer(x, attn_bias)
        logits = self.classifier(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def hyphenate(model, words, min_left=2, min_right=3):
    model.eval()
    batch = HyphenBatch.from_words(words)
    marks = model(batch.char_ids, batch.attn_bias)["logits"].argmax(dim=-1)
    out = []
    for word, row in zip(words, marks.tolist()):
        pieces = []
        for i, ch in enumerate(word):
            pieces.append(ch)
            if row[i] == 1 and min_left <= i + 1 <= len(word) - min_right:
                pieces.append("-")
        out.append("".join(pieces))
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    model = HyphenTagger(HyphenConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gold = ["type-set-ting", "hy-phen-ation", "com-put-er", "al-go-rithm", "ta-ble"]
    batch = HyphenBatch.from_words([g.replace("-", "") for g in gold], gold)
    for _ in range(60):
        loss = model(batch.char_ids, batch.attn_bias, batch.labels)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(round(loss.item(), 4), hyphenate(model, ["typesetting", "computer"]))
