"""Mushroom identification from field descriptions (Hub remote code: configuration and modeling in one file).

Classifies a forager's written description (cap, gills, stipe, ring, spore print, habitat,
smell) into a genus and flags lookalikes of deadly species. A word tokenizer, a small
`nn.TransformerEncoder` and two heads: genus and a toxic-lookalike score.

Source: conventions.md §1, §2.4; seed self_attention_mask_guide.txt
"""

import re

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

GENERA = ["Agaricus", "Amanita", "Boletus", "Cantharellus", "Coprinus", "Lactarius", "Pleurotus", "Russula"]


class MycoConfig(PretrainedConfig):
    model_type = "myco_encoder"

    def __init__(self, vocab_size=2000, d_model=64, nhead=4, num_layers=2, dim_feedforward=128,
                 max_len=128, dropout=0.1, pad_token_id=0, **kwargs):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.nhead = nhead
        self.num_layers = num_layers
        self.dim_feedforward = dim_feedforward
        self.max_len = max_len
        self.dropout = dropout
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class FieldNoteTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    @classmethod
    def from_notes(cls, notes):
        vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2}
        for note in notes:
            for word in re.findall(r"[a-z]+", note.lower()):
                vocab.setdefault(word, len(vocab))
        return cls(vocab)

    def __call__(self, notes, max_length=128):
        rows = [[2] + [self.vocab.get(w, 1) for w in re.findall(r"[a-z]+", n.lower())][: max_length - 1]
                for n in notes]
        width = max(map(len, rows))
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class MycoPreTrainedModel(PreTrainedModel):
    config_class = MycoConfig
    base_model_prefix = "myco"

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)


class MycoForGenusClassification(MycoPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_positions = nn.Embedding(config.max_len, config.d_model)
        layer = nn.TransformerEncoderLayer(config.d_model, config.nhead, config.dim_feedforward,
                                           config.dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.d_model)
        self.genus_head = nn.Linear(config.d_model, len(GENERA))
        self.toxic_head = nn.Linear(config.d_model, 1)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, genus=None, toxic=None):
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.embed_tokens(input_ids) + self.embed_positions(positions)
        key_padding_mask = ~attention_mask  # expect: MC518 method
        x = self.encoder(x, src_key_padding_mask=key_padding_mask)
        pooled = self.norm(x[:, 0])
        genus_logits = self.genus_head(pooled)
        toxic_logits = self.toxic_head(pooled).squeeze(-1)
        loss = None
        if genus is not None and toxic is not None:
            loss = F.cross_entropy(genus_logits, genus) + F.binary_cross_entropy_with_logits(toxic_logits, toxic)
        return {"loss": loss, "genus_logits": genus_logits, "toxic_logits": toxic_logits}


@torch.no_grad()
def identify(model, tokenizer, notes, toxic_threshold=0.3):
    model.eval()
    out = model(**tokenizer(notes))
    probs = out["genus_logits"].softmax(dim=-1)
    toxic = torch.sigmoid(out["toxic_logits"])
    return [
        {"genus": GENERA[int(p.argmax())], "confidence": round(float(p.max()), 3),
         "warning": bool(t > toxic_threshold)}
        for p, t in zip(probs, toxic)
    ]


if __name__ == "__main__":
    torch.manual_seed(0)
    notes = [
        "White gills free from the stipe, ring and a volva at the base, smooth white cap, mixed woodland.",
        "Golden funnel cap with false gills running down the stem, apricot smell, under beech.",
    ]
    tokenizer = FieldNoteTokenizer.from_notes(notes)
    model = MycoForGenusClassification(MycoConfig(vocab_size=len(tokenizer.vocab)))
    print(identify(model, tokenizer, notes))
