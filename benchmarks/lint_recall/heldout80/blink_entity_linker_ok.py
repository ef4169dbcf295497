"""BLINK-style two-stage entity linking: bi-encoder retrieval, then cross-encoder re-ranking.

Mentions are encoded with their context as `[CLS] left [START_ENT] mention [END_ENT] right
[SEP]`, entities as `[CLS] title [ENT] description [SEP]`. The bi-encoder scores mentions
against the entity catalogue by dot product of the two [CLS] vectors (in-batch negatives
for training); the cross-encoder reads the mention context concatenated with each of the
top-k candidates and re-ranks them.

Source: pytorch/pytorch#103963, huggingface/transformers#32195 (conventions.md §3 items 6 and 25), transformers#46458 (§4.1).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NULL_IDX, CLS, SEP, START_ENT, END_ENT, ENT = 0, 1, 2, 3, 4, 5
VOCAB_SIZE = 1500
MAX_CONTEXT, MAX_CAND = 16, 16


def wordpiece(text):
    return [6 + (sum((i + 3) * ord(c) for i, c in enumerate(w)) % (VOCAB_SIZE - 6)) for w in text.lower().split()]


def pad_to(rows, width):
    return torch.tensor([(r + [NULL_IDX] * width)[:width] for r in rows])


def get_context_representation(left, mention, right, max_len=MAX_CONTEXT):
    m = [START_ENT] + wordpiece(mention) + [END_ENT]
    budget = max_len - len(m) - 2
    left_ids, right_ids = wordpiece(left)[-(budget // 2):] if budget // 2 else [], wordpiece(right)
    right_ids = right_ids[: budget - len(left_ids)]
    return [CLS] + left_ids + m + right_ids + [SEP]


def get_candidate_representation(title, description, max_len=MAX_CAND):
    return ([CLS] + wordpiece(title) + [ENT] + wordpiece(description))[: max_len - 1] + [SEP]


def to_bert_input(token_idx, null_idx):
    segment_idx = token_idx * 0
    mask = token_idx != null_idx
    token_idx = token_idx * mask.long()
    return {"input_ids": token_idx, "token_type_ids": segment_idx, "attention_mask": (~mask).float() * torch.finfo(torch.float32).min}


class BertLayer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln_attn, self.ln_out = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)

    def forward(self, hidden_states, attention_mask):
        b, n, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        probs = (scores + attention_mask).softmax(dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, n, d)
        h = self.ln_attn(hidden_states + self.attn_out(ctx))
        return self.ln_out(h + self.output(F.gelu(self.intermediate(h))))


class BertEncoder(nn.Module):
    def __init__(self, hidden=64, heads=4, layers=2, max_pos=64):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB_SIZE, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.layer = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))

    def forward(self, input_ids, token_type_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(token_type_ids)
        extended = attention_mask[:, None, None, :]
        for layer in self.layer:
            h = layer(h, extended)
        return h[:, 0]


class BiEncoderRanker(nn.Module):
    def __init__(self):
        super().__init__()
        self.context_encoder = BertEncoder()
        self.cand_encoder = BertEncoder()

    def encode_context(self, context_ids):
        return self.context_encoder(**to_bert_input(context_ids, NULL_IDX))

    def encode_candidate(self, cand_ids):
        return self.cand_encoder(**to_bert_input(cand_ids, NULL_IDX))

    def forward(self, context_ids, cand_ids):
        scores = self.encode_context(context_ids) @ self.encode_candidate(cand_ids).t()
        return F.cross_entropy(scores, torch.arange(scores.size(0))), scores


class CrossEncoderRanker(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = BertEncoder(max_pos=MAX_CONTEXT + MAX_CAND)
        self.additional_linear = nn.Linear(64, 1)

    def forward(self, context_ids, cand_ids):
        n, k, width = cand_ids.shape
        ctx = context_ids[:, None, :].expand(n, k, -1)
        pair = torch.cat([ctx, cand_ids[:, :, 1:]], dim=-1).reshape(n * k, -1)
        inputs = to_bert_input(pair, NULL_IDX)
        inputs["token_type_ids"][:, context_ids.size(1):] = 1
        return self.additional_linear(self.encoder(**inputs)).view(n, k)


if __name__ == "__main__":
    torch.manual_seed(0)
    catalogue = [("Paris", "capital city of france on the seine"),
                 ("Paris Hilton", "american media personality and businesswoman"),
                 ("Jaguar", "large cat species native to the americas"),
                 ("Jaguar Cars", "british luxury vehicle manufacturer owned by tata motors"),
                 ("Mercury", "smallest planet in the solar system"),
                 ("Freddie Mercury", "lead vocalist of the rock band queen")]
    mentions = [("she flew to", "Paris", "for the fashion week"), ("the", "jaguar", "hunted along the river bank"),
                ("the new", "Jaguar", "sedan has an electric motor"), ("", "Mercury", "sang bohemian rhapsody")]
    gold = [0, 2, 3, 5]
    ctx_ids = pad_to([get_context_representation(*m) for m in mentions], MAX_CONTEXT)
    cand_ids = pad_to([get_candidate_representation(*c) for c in catalogue], MAX_CAND)
    biencoder, crossencoder = BiEncoderRanker(), CrossEncoderRanker()
    params = list(biencoder.parameters()) + list(crossencoder.parameters())
    optimizer = torch.optim.AdamW(params, lr=2e-4)
    for step in range(3):
        loss, _ = biencoder(ctx_ids, cand_ids[gold])
        top = (biencoder.encode_context(ctx_ids) @ biencoder.encode_candidate(cand_ids).t()).topk(3).indices
        labels = torch.tensor([row.tolist().index(g) if g in row.tolist() else 0 for row, g in zip(top, gold)])
        loss = loss + F.cross_entropy(crossencoder(ctx_ids, cand_ids[top]), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    with torch.no_grad():
        reranked = top.gather(1, crossencoder(ctx_ids, cand_ids[top]).argmax(-1, keepdim=True)).squeeze(1)
    for m, e in zip(mentions, reranked.tolist()):
        print(m[1], "->", catalogue[e][0])
