"""GraphCodeBERT-style clone detection (BigCloneBench) with data-flow guided attention.

Each function is turned into code tokens plus data-flow graph nodes (one node per
variable occurrence, edges from where its value comes from). As in GraphCodeBERT's
``TextDataset.__getitem__``, code tokens see code tokens, special tokens see everything,
nodes see the tokens they were identified from and the nodes they come from, and node
embeddings start as the average of their tokens. Two functions are encoded side by side
and a RoBERTa-style head classifies the pair.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195
(item 25), conventions.md §2.9
"""
import math
import re

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLS, PAD, SEP, UNK = 0, 1, 2, 3
code_length, data_flow_length, vocab_size = 24, 8, 400


def extract_dataflow(code):
    tokens = re.findall(r"[A-Za-z_]\w*|\d+|==|\S", code)
    keywords = {"def", "return", "if", "else", "for", "in", "while", "and", "or", "not", "range", "len"}
    dfg, last = [], {}
    for idx, tok in enumerate(tokens):
        if re.fullmatch(r"[A-Za-z_]\w*", tok) and tok not in keywords:
            sources = [last[tok]] if tok in last else []
            last[tok] = len(dfg)
            dfg.append((tok, idx, sources))
    return tokens, dfg


def convert_examples_to_features(code):
    tokens, dfg = extract_dataflow(code)
    tokens = tokens[:code_length + data_flow_length - 2 - min(len(dfg), data_flow_length)]
    dfg = [d for d in dfg if d[1] < len(tokens)][:data_flow_length]
    source_ids = [CLS] + [4 + sum(map(ord, t)) % (vocab_size - 4) for t in tokens] + [SEP]
    position_idx = [i + 2 for i in range(len(source_ids))]
    source_ids += [UNK] * len(dfg)
    position_idx += [0] * len(dfg)
    padding_length = code_length + data_flow_length - len(source_ids)
    source_ids += [PAD] * padding_length
    position_idx += [1] * padding_length
    keep = {d_idx for d_idx in range(len(dfg))}
    dfg_to_code = [(d[1] + 1, d[1] + 2) for d in dfg]
    dfg_to_dfg = [[s for s in d[2] if s in keep] for d in dfg]
    return source_ids, position_idx, dfg_to_code, dfg_to_dfg


def graph_guided_mask(position_idx, input_ids, dfg_to_code, dfg_to_dfg):
    length = code_length + data_flow_length
    attn_mask = np.zeros((length, length), dtype=bool)
    node_index = sum(i > 1 for i in position_idx)
    max_length = sum(i != 1 for i in position_idx)
    attn_mask[:node_index, :node_index] = True
    for idx, i in enumerate(input_ids):
        if i in [CLS, SEP]:
            attn_mask[idx, :max_length] = True
    for idx, (a, b) in enumerate(dfg_to_code):
        if a < node_index and b < node_index:
            attn_mask[idx + node_index, a:b] = True
            attn_mask[a:b, idx + node_index] = True
    for idx, nodes in enumerate(dfg_to_dfg):
        for a in nodes:
            if a + node_index < len(position_idx):
                attn_mask[idx + node_index, a + node_index] = True
    return torch.tensor(attn_mask)


def collate(functions):
    feats = [convert_examples_to_features(f) for f in functions]
    inputs_ids = torch.tensor([f[0] for f in feats])
    position_idx = torch.tensor([f[1] for f in feats])
    attn_mask = torch.stack([graph_guided_mask(f[1], f[0], f[2], f[3]) for f in feats])
    return inputs_ids, position_idx, attn_mask


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.output = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, hidden_states, attention_mask):
        b, n, d = hidden_states.shape
        split = lambda x: x.view(b, n, self.heads, -1).transpose(1, 2)
        q, k, v = split(self.query(hidden_states)), split(self.key(hidden_states)), split(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        scores = scores + attention_mask  # expect: MC509 added
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        return self.norm(hidden_states + self.output(ctx))


class GraphCodeBertEncoder(nn.Module):
    def __init__(self, hidden=64, heads=4, layers=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(code_length + data_flow_length + 2, hidden, padding_idx=PAD)
        self.emb_norm = nn.LayerNorm(hidden)
        self.attn = nn.ModuleList(SelfAttention(hidden, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
                                 for _ in range(layers))

    def forward(self, inputs_ids, position_idx, attn_mask):
        nodes_mask = position_idx.eq(0)
        token_mask = position_idx.ge(2)
        inputs_embeddings = self.word_embeddings(inputs_ids)
        nodes_to_token_mask = nodes_mask[:, :, None] & token_mask[:, None, :] & attn_mask
        nodes_to_token_mask = nodes_to_token_mask / (nodes_to_token_mask.sum(-1) + 1e-10)[:, :, None]
        avg_embeddings = torch.einsum("abc,acd->abd", nodes_to_token_mask, inputs_embeddings)
        inputs_embeddings = inputs_embeddings * (~nodes_mask)[:, :, None] + avg_embeddings * nodes_mask[:, :, None]
        x = self.emb_norm(inputs_embeddings + self.position_embeddings(position_idx))
        for attn, ffn in zip(self.attn, self.ffn):
            x = attn(x, attn_mask.unsqueeze(1))
            x = x + ffn(x)
        return x


class CloneModel(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.encoder = GraphCodeBertEncoder(hidden)
        self.dense = nn.Linear(2 * hidden, hidden)
        self.out_proj = nn.Linear(hidden, 2)

    def forward(self, inputs_ids_1, position_idx_1, attn_mask_1, inputs_ids_2, position_idx_2, attn_mask_2):
        bs = inputs_ids_1.size(0)
        outputs = self.encoder(torch.cat([inputs_ids_1, inputs_ids_2]), torch.cat([position_idx_1, position_idx_2]),
                               torch.cat([attn_mask_1, attn_mask_2]))[:, 0]
        x = torch.cat([outputs[:bs], outputs[bs:]], dim=-1)
        return self.out_proj(torch.tanh(self.dense(x)))


PAIRS = [
    ("def total(xs):\n    s = 0\n    for x in xs:\n        s = s + x\n    return s",
     "def add_all(values):\n    acc = 0\n    for v in values:\n        acc += v\n    return acc", 1),
    ("def maximum(a, b):\n    if a > b:\n        return a\n    return b",
     "def count(xs, y):\n    n = 0\n    for x in xs:\n        if x == y:\n            n = n + 1\n    return n", 0),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CloneModel()
    left, right = collate([p[0] for p in PAIRS]), collate([p[1] for p in PAIRS])
    labels = torch.tensor([p[2] for p in PAIRS])
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step in range(3):
        loss = F.cross_entropy(model(*left, *right), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        print("clone probability", model(*left, *right).softmax(-1)[:, 1].tolist())
