"""Language model proposing the auxiliary construction of an olympiad geometry problem.

A PyTorch port of the decoder-only transformer of google-deepmind/alphageometry (trained with
Meliad, JAX / Flax): problems are written in AlphaGeometry's construction language
(`a b c = triangle a b c; d = midpoint d b c ? perp a d b c`), the model is trained on
"premises ? goal ; auxiliary" strings and `LanguageModelInference` decodes the auxiliary point
after the `;`. The attention keeps JAX's [batch, time, heads, head_dim] layout and a local
`dot_product_attention` with the signature of `jax.nn.dot_product_attention(query, key,
value, bias=None, mask=None)`. Word-level tokens stand in for the SentencePiece model.

Source: conventions.md 2.9 and 1 (HF 4-D masks row, JAX / Flax row); huggingface/transformers#32195 (3.25)
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

POINTS = list("abcdefgh")
GOALS = {"perp": "midpoint", "cong": "circle", "para": "on_pline"}
VOCAB = ["<pad>", "<s>", "</s>", "=", "?", ";", "triangle", "foot", "on_line"] + POINTS + list(GOALS) + list(GOALS.values())


@dataclass
class DecoderConfig:
    vocab_size: int = len(VOCAB)
    embedding_size: int = 64
    num_heads: int = 4
    head_size: int = 16
    mlp_dim: int = 128
    num_layers: int = 2
    max_length: int = 40
    dropout_rate: float = 0.0


def make_problem(rng):
    a, b, c, d = rng.sample(POINTS, 4)
    p = min(set(POINTS) - {a, b, c, d})
    premises = f"{a} {b} {c} = triangle {a} {b} {c} ; {d} = " + rng.choice([f"foot {d} {a} {b} {c}", f"on_line {d} {b} {c}"])
    goal = rng.choice(list(GOALS))
    x, y, z, w = rng.choice([(a, d, b, c), (d, b, d, c), (a, b, c, d)])
    aux = f"{p} = {GOALS[goal]} {p} {z} {w}" if goal != "cong" else f"{p} = circle {p} {x} {y} {z}"
    return f"{premises} ? {goal} {x} {y} {z} {w} ;".split(), aux.split()


def encode(problems):
    seqs = [[1] + [VOCAB.index(t) for t in prefix + aux] + [2] for prefix, aux in problems]
    ids = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    return ids


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        inner = config.num_heads * config.head_size
        self.q, self.k, self.v = (nn.Linear(config.embedding_size, inner, bias=False) for _ in range(3))
        self.o = nn.Linear(inner, config.embedding_size, bias=False)

    def forward(self, x, token_keep):
        b, t, _ = x.shape
        shape = (b, t, self.config.num_heads, self.config.head_size)
        q, k, v = self.q(x).view(shape), self.k(x).view(shape), self.v(x).view(shape)
        causal_keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))[None, None]
        keep = causal_keep & token_keep[:, None, None, :]
        out = dot_product_attention(q, k, v, mask=keep)
        return self.o(out.reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pre_attention_norm = nn.LayerNorm(config.embedding_size)
        self.attention = Attention(config)
        self.pre_mlp_norm = nn.LayerNorm(config.embedding_size)
        self.mlp = nn.Sequential(nn.Linear(config.embedding_size, config.mlp_dim), nn.GELU(),
                                 nn.Linear(config.mlp_dim, config.embedding_size))
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, x, token_keep):
        x = x + self.dropout(self.attention(self.pre_attention_norm(x), token_keep))
        return x + self.dropout(self.mlp(self.pre_mlp_norm(x)))


class DecoderStack(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.embedding_size)
        self.position_embeddings = nn.Embedding(config.max_length, config.embedding_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.embedding_size)
        self.logits = nn.Linear(config.embedding_size, config.vocab_size, bias=False)

    def forward(self, ids):
        token_keep = ids != 0
        x = self.embed(ids) + self.position_embeddings(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x, token_keep)
        return self.logits(self.final_norm(x))


def dot_product_attention(query, key, value, bias=None, mask=None, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    logits = torch.einsum("BTNH,BSNH->BNTS", query, key) * scale
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = torch.where(mask, logits, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    return torch.einsum("BNTS,BSNH->BTNH", probs, value)


class LanguageModelInference:
    def __init__(self, model):
        self.model = model.eval()

    @torch.no_grad()
    def construct(self, prefix, max_new_tokens=8):
        ids = torch.tensor([[1] + [VOCAB.index(t) for t in prefix]])
        for _ in range(max_new_tokens):
            nxt = self.model(ids)[0, -1].argmax().item()
            if nxt == 2:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        return [VOCAB[i] for i in ids[0, len(prefix) + 1:].tolist()]


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    model = DecoderStack(DecoderConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        ids = encode([make_problem(rng) for _ in range(32)])
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    lm = LanguageModelInference(model)
    test = [make_problem(rng) for _ in range(100)]
    solved = sum(lm.construct(prefix) == aux for prefix, aux in test)
    print("train loss %.3f  auxiliary constructions matched %d / %d" % (loss.item(), solved, len(test)))


if __name__ == "__main__":
    main()
