"""Contract clause extraction (Hub remote code: configuration and modeling in one file).

A small BERT-style token classifier that tags clause spans (governing law, termination,
indemnification) in commercial agreements, CUAD style, over a lower-cased word tokenizer.
Load with `AutoModelForTokenClassification.from_pretrained(..., trust_remote_code=True)`.

Source: conventions.md §1; seed masked_fill_inplace.txt
"""

import math
import re

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

CLAUSE_LABELS = ["O", "B-GOV_LAW", "I-GOV_LAW", "B-TERMINATION", "I-TERMINATION", "B-INDEMNITY", "I-INDEMNITY"]
WORD_RE = re.compile(r"[a-z]+|\d+|[^\sa-z\d]")


class ClauseConfig(PretrainedConfig):
    model_type = "clause_tagger"

    def __init__(self, vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=256, layer_norm_eps=1e-12,
                 pad_token_id=0, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.layer_norm_eps = layer_norm_eps
        kwargs.setdefault("num_labels", len(CLAUSE_LABELS))
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class ContractTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab
        self.pad_token_id = vocab["[PAD]"]
        self.unk_token_id = vocab["[UNK]"]

    @classmethod
    def from_corpus(cls, texts, max_size=512):
        counts = {}
        for text in texts:
            for word in WORD_RE.findall(text.lower()):
                counts[word] = counts.get(word, 0) + 1
        words = sorted(counts, key=lambda w: (-counts[w], w))[: max_size - 2]
        return cls({"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}})

    def __call__(self, texts, max_length=128):
        rows = [[self.vocab.get(w, self.unk_token_id) for w in WORD_RE.findall(t.lower())][:max_length]
                for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class ClauseSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def _shape(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def _mask_scores(scores, attention_mask):
        keep = attention_mask[:, None, None, :].bool()
        return scores.masked_fill(keep, torch.finfo(scores.dtype).min)  # expect: MC519 staticmethod

    def forward(self, hidden_states, attention_mask):
        q = self._shape(self.query(hidden_states))
        k = self._shape(self.key(hidden_states))
        v = self._shape(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = self._mask_scores(scores, attention_mask)
        probs = scores.softmax(dim=-1)
        context = (probs @ v).transpose(1, 2).reshape(hidden_states.shape)
        return self.dense(context)


class ClauseLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = ClauseSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask):
        hidden_states = self.attention_norm(hidden_states + self.attention(hidden_states, attention_mask))
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(hidden_states + ffn)


class ClausePreTrainedModel(PreTrainedModel):
    config_class = ClauseConfig
    base_model_prefix = "clause"

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()


class ClauseForTokenClassification(ClausePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embedding_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList([ClauseLayer(config) for _ in range(config.num_hidden_layers)])
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden_states = self.embedding_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        logits = self.classifier(hidden_states)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def extract_clauses(model, tokenizer, texts):
    model.eval()
    enc = tokenizer(texts)
    tags = model(**enc)["logits"].argmax(dim=-1)
    spans = []
    for row, keep in zip(tags.tolist(), enc["attention_mask"].tolist()):
        found, start = [], None
        for i, (tag, real) in enumerate(zip(row, keep)):
            name = CLAUSE_LABELS[tag]
            if not real or name == "O" or name.startswith("B-"):
                if start is not None:
                    found.append((label, start, i))
                    start = None
            if real and name.startswith("B-"):
                label, start = name[2:], i
        if start is not None:
            found.append((label, start, sum(keep)))
        spans.append(found)
    return spans


if __name__ == "__main__":
    torch.manual_seed(0)
    corpus = [
        "This Agreement shall be governed by the laws of the State of New York.",
        "Either party may terminate this Agreement upon thirty days written notice.",
        "The Supplier shall indemnify the Customer against all claims.",
    ]
    tokenizer = ContractTokenizer.from_corpus(corpus)
    model = ClauseForTokenClassification(ClauseConfig(vocab_size=len(tokenizer.vocab)))
    print(extract_clauses(model, tokenizer, corpus))
