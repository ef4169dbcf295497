"""A BlenderBot-style persona dialogue generator in ParlAI's layout: DictionaryAgent tokens,
flattened history with a delimiter, `padded_tensor`, `TransformerGeneratorModel` with
`decode_forced` and greedy generation.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet), seed masked_fill_inplace.txt
(作用).
"""

import math
import random
from collections import namedtuple
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

Batch = namedtuple("Batch", ["text_vec", "label_vec", "text_lengths"])


def neginf(dtype):
    return torch.finfo(dtype).min


def padded_tensor(items, pad_idx=0, left_padded=False):
    t = max(len(item) for item in items)
    output = torch.full((len(items), t), pad_idx, dtype=torch.long)
    for i, item in enumerate(items):
        if left_padded:
            output[i, t - len(item) :] = torch.as_tensor(item)
        else:
            output[i, : len(item)] = torch.as_tensor(item)
    return output, [len(item) for item in items]


def create_position_codes(n_pos, dim, out):
    position_enc = torch.tensor([[pos / math.pow(10000, 2 * j / dim) for j in range(dim // 2)] for pos in range(n_pos)])
    out.detach_()
    out.requires_grad = False
    out[:, 0::2] = torch.sin(position_enc)
    out[:, 1::2] = torch.cos(position_enc)


class DictionaryAgent:
    def __init__(self, words):
        self.tok2ind = {"__null__": 0, "__start__": 1, "__end__": 2, "__unk__": 3, "\n": 4}
        for w in words:
            self.tok2ind.setdefault(w, len(self.tok2ind))
        self.ind2tok = {i: t for t, i in self.tok2ind.items()}
        self.null_idx, self.start_idx, self.end_idx = 0, 1, 2

    def txt2vec(self, text):
        return [self.tok2ind.get(w, 3) for w in text.replace("\n", " \n ").split(" ") if w]

    def vec2txt(self, vec):
        return " ".join(self.ind2tok[i] for i in vec if i > 2)


@dataclass
class TransformerOpt:
    embedding_size: int = 64
    n_heads: int = 4
    n_layers: int = 2
    ffn_size: int = 128
    dropout: float = 0.1
    n_positions: int = 64
    variant: str = "prelayernorm"
    history_delimiter: str = "\n"
    text_truncate: int = 48
    label_truncate: int = 8


class MultiHeadAttention(nn.Module):
    def __init__(self, n_heads, dim, dropout=0.0):
        super().__init__()
        self.n_heads, self.dim = n_heads, dim
        self.attn_dropout = nn.Dropout(p=dropout)
        self.q_lin, self.k_lin = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_lin, self.out_lin = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, query, key=None, value=None, mask=None):
        batch_size, query_len, dim = query.size()
        n_heads = self.n_heads
        dim_per_head = dim // n_heads
        scale = math.sqrt(dim_per_head)

        def prepare_head(tensor):
            bsz, seq_len, _ = tensor.size()
            tensor = tensor.view(batch_size, seq_len, n_heads, dim_per_head)
            return tensor.transpose(1, 2).contiguous().view(batch_size * n_heads, seq_len, dim_per_head)

        if key is None and value is None:
            key = value = query
        elif value is None:
            value = key
        q, k, v = prepare_head(self.q_lin(query)), prepare_head(self.k_lin(key)), prepare_head(self.v_lin(value))
        full_key_len = k.size(1)
        dot_prod = q.div_(scale).bmm(k.transpose(1, 2))
        attn_mask = (
            mask.view(batch_size, 1, -1, full_key_len)
            .repeat(1, n_heads, 1, 1)
            .expand(batch_size, n_heads, query_len, full_key_len)
            .view(batch_size * n_heads, query_len, full_key_len)
        )
        dot_prod = dot_prod.masked_fill(attn_mask == 0, neginf(dot_prod.dtype))
        attn_weights = self.attn_dropout(F.softmax(dot_prod, dim=-1, dtype=torch.float).type_as(query))
        attentioned = attn_weights.bmm(v).view(batch_size, n_heads, query_len, dim_per_head)
        return self.out_lin(attentioned.transpose(1, 2).contiguous().view(batch_size, query_len, dim))


class TransformerLayer(nn.Module):
    def __init__(self, opt, cross_attention=False):
        super().__init__()
        d = opt.embedding_size
        self.self_attention, self.norm1 = MultiHeadAttention(opt.n_heads, d, opt.dropout), nn.LayerNorm(d)
        self.encoder_attention = MultiHeadAttention(opt.n_heads, d, opt.dropout) if cross_attention else None
        self.norm2 = nn.LayerNorm(d) if cross_attention else None
        self.ffn, self.norm3 = nn.Sequential(nn.Linear(d, opt.ffn_size), nn.ReLU(), nn.Linear(opt.ffn_size, d)), nn.LayerNorm(d)
        self.dropout = nn.Dropout(opt.dropout)

    def forward(self, x, self_mask, encoder_output=None, encoder_mask=None):
        x = x + self.dropout(self.self_attention(self.norm1(x), mask=self_mask))
        if self.encoder_attention is not None:
            x = x + self.dropout(self.encoder_attention(self.norm2(x), encoder_output, encoder_output, mask=encoder_mask))
        return x + self.dropout(self.ffn(self.norm3(x)))


class TransformerEncoder(nn.Module):
    def __init__(self, opt, embedding, padding_idx):
        super().__init__()
        self.embeddings, self.padding_idx, self.dim = embedding, padding_idx, opt.embedding_size
        self.position_embeddings = nn.Embedding(opt.n_positions, opt.embedding_size)
        create_position_codes(opt.n_positions, opt.embedding_size, out=self.position_embeddings.weight)
        self.layers = nn.ModuleList([TransformerLayer(opt) for _ in range(opt.n_layers)])
        self.norm_embeddings = nn.LayerNorm(opt.embedding_size)

    def forward(self, input):
        mask = input != self.padding_idx
        positions = (mask.cumsum(dim=1, dtype=torch.int64) - 1).clamp_(min=0)
        tensor = self.embeddings(input) * math.sqrt(self.dim) + self.position_embeddings(positions)
        tensor = tensor * mask.unsqueeze(-1).type_as(tensor)
        for layer in self.layers:
            tensor = layer(tensor, mask) * mask.unsqueeze(-1).type_as(tensor)
        return self.norm_embeddings(tensor), mask


class TransformerDecoder(TransformerEncoder):
    def __init__(self, opt, embedding, padding_idx):
        super().__init__(opt, embedding, padding_idx)
        self.layers = nn.ModuleList([TransformerLayer(opt, cross_attention=True) for _ in range(opt.n_layers)])

    @staticmethod
    def _create_selfattn_mask(x):
        bsz, time = x.size(0), x.size(1)
        return torch.tril(torch.ones(time, time, dtype=torch.bool, device=x.device)).unsqueeze(0).expand(bsz, -1, -1)

    def forward(self, input, encoder_state):
        encoder_output, encoder_mask = encoder_state
        positions = torch.arange(input.size(1), device=input.device).unsqueeze(0)
        tensor = self.embeddings(input) * math.sqrt(self.dim) + self.position_embeddings(positions)
        self_attn_mask = self._create_selfattn_mask(input)
        for layer in self.layers:
            tensor = layer(tensor, self_attn_mask, encoder_output, encoder_mask)
        return self.norm_embeddings(tensor)


class TransformerGeneratorModel(nn.Module):
    def __init__(self, opt, dictionary):
        super().__init__()
        self.NULL_IDX, self.START_IDX, self.END_IDX = dictionary.null_idx, dictionary.start_idx, dictionary.end_idx
        self.embeddings = nn.Embedding(len(dictionary.tok2ind), opt.embedding_size, padding_idx=self.NULL_IDX)
        nn.init.normal_(self.embeddings.weight, 0, opt.embedding_size**-0.5)
        self.encoder = TransformerEncoder(opt, self.embeddings, self.NULL_IDX)
        self.decoder = TransformerDecoder(opt, self.embeddings, self.NULL_IDX)

    def output(self, tensor):
        return F.linear(tensor, self.embeddings.weight)

    def decode_forced(self, encoder_states, ys):
        inputs = torch.cat([torch.full((ys.size(0), 1), self.START_IDX, dtype=torch.long), ys.narrow(1, 0, ys.size(1) - 1)], 1)
        return self.output(self.decoder(inputs, encoder_states))

    def forward(self, xs, ys):
        return self.decode_forced(self.encoder(xs), ys)

    @torch.no_grad()
    def greedy(self, xs, maxlen=8):
        encoder_states = self.encoder(xs)
        ys = torch.full((xs.size(0), 1), self.START_IDX, dtype=torch.long)
        for _ in range(maxlen):
            logits = self.output(self.decoder(ys, encoder_states))[:, -1]
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
        return ys[:, 1:]


def batchify(dictionary, opt, episodes):
    text_vecs = [dictionary.txt2vec(opt.history_delimiter.join(ep["history"]))[-opt.text_truncate :] for ep in episodes]
    label_vecs = [dictionary.txt2vec(ep["labels"][0])[: opt.label_truncate - 1] + [dictionary.end_idx] for ep in episodes]
    xs, lengths = padded_tensor(text_vecs, dictionary.null_idx)
    ys, _ = padded_tensor(label_vecs, dictionary.null_idx)
    return Batch(xs, ys, lengths)


HOBBIES = ["chess", "surfing", "baking", "hiking", "painting", "jazz", "gardening", "running", "poetry", "cycling"]


def make_episode(rng):
    likes = rng.sample(HOBBIES, rng.randint(1, 3))
    persona = [f"your persona : i love {h} ." for h in likes]
    turns = rng.sample(["hi there !", "how are you ?", "nice weather today .", "i just got home ."], rng.randint(0, 2))
    return {"history": persona + turns + ["what do you enjoy ?"], "labels": [f"i really enjoy {likes[-1]} ."]}


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    opt = TransformerOpt()
    words = "your persona : i love . hi there ! how are you ? nice weather today just got home what do enjoy really".split()
    dictionary = DictionaryAgent(words + HOBBIES)
    model = TransformerGeneratorModel(opt, dictionary)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(250):
        batch = batchify(dictionary, opt, [make_episode(rng) for _ in range(32)])
        scores = model(batch.text_vec, batch.label_vec)
        loss = F.cross_entropy(scores.flatten(0, 1), batch.label_vec.flatten(), ignore_index=dictionary.null_idx)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    episodes = [make_episode(random.Random(i)) for i in range(16)]
    batch = batchify(dictionary, opt, episodes)
    replies = [dictionary.vec2txt(r) for r in model.greedy(batch.text_vec).tolist()]
    print("correct replies:", sum(r.split(" .")[0] + " ." == ep["labels"][0] for r, ep in zip(replies, episodes)), "/ 16")
    short = min(range(16), key=lambda i: batch.text_lengths[i])
    with torch.no_grad():
        padded = model(batch.text_vec, batch.label_vec)[short]
        alone = model(batch.text_vec[short : short + 1, : batch.text_lengths[short]], batch.label_vec[short : short + 1])[0]
    print("shortest context padded vs alone:", (padded - alone).abs().max().item())
