"""Clinical-trial matching cross-encoder (Hub remote code: configuration and modeling in one file).

Scores a patient summary against each eligibility criterion of a trial (eligible, excluded,
not relevant), TREC Clinical Trials style, and ranks trials by their criteria. The file ships
its own word-level pair tokenizer, mask helper and encoder.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22)
"""

import math
import re

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

MATCH_LABELS = ("not_relevant", "excluded", "eligible")


class TrialMatchConfig(PretrainedConfig):
    model_type = "trial_match"

    def __init__(self, vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 max_positions=192, type_vocab_size=2, pad_token_id=0, cls_token_id=1,
                 sep_token_id=2, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.ffn_size = ffn_size
        self.max_positions = max_positions
        self.type_vocab_size = type_vocab_size
        self.cls_token_id = cls_token_id
        self.sep_token_id = sep_token_id
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class PairTokenizer:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))

    def encode(self, text):
        return [self.vocab.get(w, 3) for w in re.findall(r"[a-z0-9]+", text.lower())]

    def __call__(self, patients, criteria, max_length=160):
        rows = []
        for patient, criterion in zip(patients, criteria):
            a, b = self.encode(patient), self.encode(criterion)
            ids = ([1] + a + [2] + b + [2])[:max_length]
            types = ([0] * (len(a) + 2) + [1] * (len(b) + 1))[:max_length]
            rows.append((ids, types))
        width = max(len(ids) for ids, _ in rows)
        out = {k: torch.zeros(len(rows), width, dtype=torch.long)
               for k in ("input_ids", "token_type_ids", "attention_mask")}
        for i, (ids, types) in enumerate(rows):
            out["input_ids"][i, : len(ids)] = torch.tensor(ids)
            out["token_type_ids"][i, : len(ids)] = torch.tensor(types)
            out["attention_mask"][i, : len(ids)] = 1
        return out


def build_pair_mask(attention_mask):
    keep = attention_mask.bool()
    return keep[:, :, None] & keep[:, None, :]  # expect: MC507 helper


class MatchAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, pair_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~pair_mask[:, None], float("-inf"))  # also: MC507
        attn = F.softmax(scores, dim=-1)
        return self.proj(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d))


class MatchBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size)
        self.attn = MatchAttention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, config.ffn_size), nn.GELU(),
                                 nn.Linear(config.ffn_size, config.hidden_size))

    def forward(self, x, pair_mask):
        x = x + self.attn(self.ln_1(x), pair_mask)
        return x + self.mlp(self.ln_2(x))


class TrialMatchModel(PreTrainedModel):
    config_class = TrialMatchConfig
    base_model_prefix = "trial_match"

    def __init__(self, config):
        super().__init__(config)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.pos_emb = nn.Embedding(config.max_positions, config.hidden_size)
        self.type_emb = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList([MatchBlock(config) for _ in range(config.num_layers)])
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.head = nn.Linear(config.hidden_size, len(MATCH_LABELS))
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos) + self.type_emb(token_type_ids)
        pair_mask = build_pair_mask(attention_mask)
        for block in self.blocks:
            x = block(x, pair_mask)
        logits = self.head(self.ln_f(x[:, 0]))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def rank_trials(model, tokenizer, patient, trials):
    model.eval()
    ranking = []
    for trial_id, criteria in trials.items():
        enc = tokenizer([patient] * len(criteria), criteria)
        probs = model(**enc)["logits"].softmax(dim=-1)
        eligible = probs[:, MATCH_LABELS.index("eligible")]
        excluded = probs[:, MATCH_LABELS.index("excluded")]
        ranking.append((trial_id, (eligible - excluded).mean().item()))
    return sorted(ranking, key=lambda item: item[1], reverse=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    patient = "58 year old woman with type 2 diabetes on metformin, eGFR 72, no prior insulin"
    trials = {
        "NCT-A": ["adults aged 40 to 75 with type 2 diabetes", "no insulin therapy in the past year"],
        "NCT-B": ["eGFR below 30", "pregnant or breastfeeding women", "history of pancreatitis"],
    }
    words = re.findall(r"[a-z0-9]+", " ".join([patient] + sum(trials.values(), [])).lower())
    model = TrialMatchModel(TrialMatchConfig())
    print(rank_trials(model, PairTokenizer(words), patient, trials))
