"""CodeBERT-style natural-language code search (CodeSearchNet fine-tuning recipe): a RoBERTa encoder
shared by docstrings and code, mean pooling, in-batch softmax loss, MRR, and an index built with
attention weights for token highlighting.

Source: conventions.md §2.9 and §1 (HF 4-D masks row), transformers
`models/llama/modeling_llama.py:eager_attention_forward` (quoted in conventions.md §2.9).
"""

import math
import random
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RobertaConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 66
    pad_token_id: int = 1
    layer_norm_eps: float = 1e-5
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    attn_implementation: str = "sdpa"


class CodeTokenizer:
    def __init__(self, texts):
        self.vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for text in texts:
            for tok in self.tokenize(text):
                self.vocab.setdefault(tok, len(self.vocab))

    @staticmethod
    def tokenize(text):
        return re.findall(r"[A-Za-z_]+|\d+|\S", text)

    def __call__(self, texts, max_length=32):
        ids = [[0, *(self.vocab.get(t, 3) for t in self.tokenize(x))][: max_length - 1] + [2] for x in texts]
        n = max(len(x) for x in ids)
        return torch.tensor([x + [1] * (n - len(x)) for x in ids])


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class RobertaEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.padding_idx = config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=self.padding_idx)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size, self.padding_idx)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids):
        position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(position_ids)))


class RobertaSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob
        self.config = config

    def transpose_for_scores(self, x):
        return x.view(*x.shape[:-1], self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_probs = None
        if self.config.attn_implementation == "sdpa" and not output_attentions:
            context_layer = F.scaled_dot_product_attention(
                query_layer, key_layer, value_layer, attn_mask=attention_mask,
                dropout_p=self.dropout_prob if self.training else 0.0,
            )
        else:
            attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
            attention_scores = attention_scores / math.sqrt(self.attention_head_size)
            if attention_mask is not None:
                attention_scores = attention_scores.masked_fill(~attention_mask, torch.finfo(attention_scores.dtype).min)
            attention_probs = nn.functional.softmax(attention_scores, dim=-1)
            context_layer = torch.matmul(F.dropout(attention_probs, self.dropout_prob, self.training), value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).flatten(2)
        return context_layer, attention_probs


class RobertaLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = RobertaSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        context, probs = self.attention(hidden_states, attention_mask, output_attentions)
        hidden_states = self.attention_norm(hidden_states + self.dropout(self.attention_output(context)))
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(hidden_states + self.dropout(ffn)), probs


class RobertaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = RobertaEmbeddings(config)
        self.layer = nn.ModuleList([RobertaLayer(config) for _ in range(config.num_hidden_layers)])

    def get_extended_attention_mask(self, attention_mask):
        # broadcast over heads and query positions
        return attention_mask[:, None, None, :].to(torch.bool)

    def forward(self, input_ids, attention_mask=None, output_attentions=False):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask)
        hidden_states = self.embeddings(input_ids)
        all_attentions = []
        for layer_module in self.layer:
            hidden_states, probs = layer_module(hidden_states, extended_attention_mask, output_attentions)
            all_attentions.append(probs)
        return hidden_states, all_attentions


class Model(nn.Module):
    def __init__(self, encoder, pad_token_id=1):
        super().__init__()
        self.encoder, self.pad_token_id = encoder, pad_token_id

    def forward(self, code_inputs=None, nl_inputs=None, output_attentions=False):
        inputs = code_inputs if code_inputs is not None else nl_inputs
        mask = inputs.ne(self.pad_token_id)
        outputs, attentions = self.encoder(inputs, attention_mask=mask, output_attentions=output_attentions)
        outputs = (outputs * mask[:, :, None]).sum(1) / mask.sum(-1)[:, None]
        return F.normalize(outputs, p=2, dim=1), attentions


OPS = {"sum": "+", "difference": "-", "product": "*", "quotient": "/", "power": "**", "remainder": "%"}
NAMES = ["a", "b", "x", "y", "value", "other", "left", "right", "count", "total", "first_item", "second_item"]


def make_pair(rng):
    op = rng.choice(list(OPS))
    u, v = rng.sample(NAMES, 2)
    fname = rng.choice(["compute", "calc", "get", "apply"]) + "_" + op
    code = f"def {fname}({u}, {v}):\n    result = {u} {OPS[op]} {v}\n    return result"
    if rng.random() < 0.5:
        code = code.replace("result = ", "").replace("return result", "").replace("\n    ", "\n    return ", 1)
    return f"Return the {op} of {u} and {v}.", code


def mrr(nl_vecs, code_vecs):
    ranks = (nl_vecs @ code_vecs.T).argsort(dim=1, descending=True).argsort(dim=1).diagonal() + 1
    return (1.0 / ranks.float()).mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    train = [make_pair(rng) for _ in range(2000)]
    tokenizer = CodeTokenizer([t for pair in train for t in pair])
    model = Model(RobertaModel(RobertaConfig(vocab_size=len(tokenizer.vocab))))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(150):
        nl, code = zip(*rng.sample(train, 32))
        nl_vec, _ = model(nl_inputs=tokenizer(nl))
        code_vec, _ = model(code_inputs=tokenizer(code))
        loss = F.cross_entropy(nl_vec @ code_vec.T * 20, torch.arange(len(nl)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    nl, code = zip(*[make_pair(random.Random(i)) for i in range(100, 164)])
    code_ids = tokenizer(code)
    with torch.no_grad():
        nl_vecs, _ = model(nl_inputs=tokenizer(nl))
        code_vecs, _ = model(code_inputs=code_ids)
        index_vecs, attentions = model(code_inputs=code_ids, output_attentions=True)
    print("MRR, sdpa index:", round(mrr(nl_vecs, code_vecs), 3), "highlighting index:", round(mrr(nl_vecs, index_vecs), 3))
    padding_weight = attentions[-1].mul(code_ids.eq(1)[:, None, None, :]).sum(-1).max().item()
    print("largest attention weight on padding in the highlighting pass:", round(padding_weight, 3))
    print("index vectors, sdpa vs eager:", (code_vecs - index_vecs).abs().max().item())
