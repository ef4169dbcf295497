"""Emergency call triage for dispatch centres (Hub remote code: configuration and modeling in one file).

Reads the first lines of an emergency call transcript and suggests the chief complaint and the
response determinant (Omega to Echo) for the call-taker to confirm. Calls are batched as they
come in, so transcripts of very different lengths share a padded batch.

Source: seed self_attention_mask_guide.txt; huggingface/transformers#46458 (conventions.md §4.1)
"""

import math
import re

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

COMPLAINTS = ["breathing_problems", "chest_pain", "falls", "sick_person", "traffic_collision", "unconscious"]
DETERMINANTS = ["OMEGA", "ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO"]


class DispatchConfig(PretrainedConfig):
    model_type = "dispatch_triage"

    def __init__(self, vocab_size=4000, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                 intermediate_size=128, max_position_embeddings=256, pad_token_id=0, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_hidden_layers = num_hidden_layers
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class TranscriptTokenizer:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[CALLER]": 3, "[TAKER]": 4}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))

    def tokenize(self, transcript):
        ids = [2]
        for turn in transcript:
            speaker, text = turn.split(":", 1)
            ids.append(3 if speaker.strip().lower() == "caller" else 4)
            ids += [self.vocab.get(w, 1) for w in re.findall(r"[a-z0-9']+", text.lower())]
        return ids

    def __call__(self, transcripts, max_length=256):
        rows = [self.tokenize(t)[:max_length] for t in transcripts]
        width = max(map(len, rows))
        enc = {"input_ids": torch.zeros(len(rows), width, dtype=torch.long),
               "attention_mask": torch.zeros(len(rows), width, dtype=torch.long)}
        for i, row in enumerate(rows):
            enc["input_ids"][i, : len(row)] = torch.tensor(row)
            enc["attention_mask"][i, : len(row)] = 1
        return enc


class DispatchSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.hidden_size)
        self.normalize = lambda scores, keep: torch.softmax(scores.masked_fill(keep == 0, torch.finfo(scores.dtype).min), dim=-1)

    def split_heads(self, x):
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q = self.split_heads(self.query(hidden_states))
        k = self.split_heads(self.key(hidden_states))
        v = self.split_heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.normalize(scores, attention_mask[:, None, None, :].to(scores.dtype))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).flatten(2)
        return self.output(context)


class DispatchLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = DispatchSelfAttention(config)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, config.hidden_size))
        self.norm2 = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask):
        hidden_states = self.norm1(hidden_states + self.attention(hidden_states, attention_mask))
        return self.norm2(hidden_states + self.ffn(hidden_states))


class DispatchTriageModel(PreTrainedModel):
    config_class = DispatchConfig
    base_model_prefix = "dispatch"

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList([DispatchLayer(config) for _ in range(config.num_hidden_layers)])
        self.complaint_head = nn.Linear(config.hidden_size, len(COMPLAINTS))
        self.determinant_head = nn.Linear(config.hidden_size, len(DETERMINANTS))
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, attention_mask, complaint=None, determinant=None):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden_states = self.embeddings(input_ids) + self.positions(pos)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        cls = hidden_states[:, 0]
        complaint_logits = self.complaint_head(cls)
        determinant_logits = self.determinant_head(cls)
        loss = None
        if complaint is not None:
            loss = F.cross_entropy(complaint_logits, complaint) + F.cross_entropy(determinant_logits, determinant)
        return {"loss": loss, "complaint_logits": complaint_logits, "determinant_logits": determinant_logits}


@torch.no_grad()
def triage(model, tokenizer, transcripts):
    model.eval()
    out = model(**tokenizer(transcripts))
    return [(COMPLAINTS[int(c)], DETERMINANTS[int(d)])
            for c, d in zip(out["complaint_logits"].argmax(-1), out["determinant_logits"].argmax(-1))]


if __name__ == "__main__":
    torch.manual_seed(0)
    calls = [
        ["taker: 911 what is the address of your emergency", "caller: 14 elm street my dad collapsed",
         "taker: is he awake", "caller: no he is not breathing right"],
        ["taker: 911 what is the address", "caller: highway 9 two cars crashed"],
    ]
    words = re.findall(r"[a-z0-9']+", " ".join(sum(calls, [])).lower())
    print(triage(DispatchTriageModel(DispatchConfig()), TranscriptTokenizer(words), calls))
