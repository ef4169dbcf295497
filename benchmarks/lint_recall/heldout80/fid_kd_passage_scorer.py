"""Distilling knowledge from a Fusion-in-Decoder reader to its retriever (FiD-KD).

The reader encodes each "question: ... title: ... context: ..." passage on its own, the
encoder outputs of all passages of a question are concatenated, and the decoder generates
the answer while cross-attending to all of them. The decoder's cross-attention scores of
the first generated token, averaged over heads, layers and passage tokens, give one score
per passage (`get_crossattention_scores`); the retriever (a small dual encoder) is trained
to match their distribution with a KL loss. Questions with fewer retrieved passages than
`n_context` get empty passage slots.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 items 15 and 16); §2.3, §5 item 4.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS, VOCAB = 0, 1, 2, 900
N_CONTEXT, TEXT_MAXLEN = 3, 14


def encode(text):
    return [3 + (sum(ord(c) * 31 ** i for i, c in enumerate(w)) % (VOCAB - 3)) for w in text.lower().split()]


def collate(examples):
    passage_ids = torch.full((len(examples), N_CONTEXT, TEXT_MAXLEN), PAD)
    for b, ex in enumerate(examples):
        for j, (title, text) in enumerate(ex["ctxs"][:N_CONTEXT]):
            ids = encode(f"question: {ex['question']} title: {title} context: {text}")[:TEXT_MAXLEN]
            passage_ids[b, j, : len(ids)] = torch.tensor(ids)
    targets = [[BOS] + encode(ex["answer"]) + [EOS] for ex in examples]
    width = max(len(t) for t in targets)
    target_ids = torch.tensor([t + [PAD] * (width - len(t)) for t in targets])
    return {"passage_ids": passage_ids, "passage_masks": passage_ids != PAD,
            "decoder_input_ids": target_ids[:, :-1], "labels": target_ids[:, 1:].masked_fill(target_ids[:, 1:] == PAD, -100)}


def encoder_bias(keep, dtype):
    neg = torch.finfo(dtype).min
    key_bias = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, neg)[:, None, None, :]
    query_bias = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, neg)[:, None, :, None]
    return key_bias + query_bias  # expect: MC513 sum


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.score_storage = None

    def forward(self, x, kv, bias, store=False):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k(kv).view(b, kv.size(1), self.heads, -1).transpose(1, 2)
        v = self.v(kv).view(b, kv.size(1), self.heads, -1).transpose(1, 2)
        scores = torch.einsum("bnqd,bnkd->bnqk", q, k) / math.sqrt(q.size(-1)) + bias
        if store:
            self.score_storage = scores
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o((attn @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, d, heads, cross=False):
        super().__init__()
        self.self_attn = Attention(d, heads)
        self.cross_attn = Attention(d, heads) if cross else None
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x, bias, memory=None, memory_bias=None):
        h = self.norms[0](x)
        x = x + self.self_attn(h, h, bias)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.norms[1](x), memory, memory_bias, store=True)
        return x + self.ff(self.norms[2](x))


class FiDReader(nn.Module):
    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.pos = nn.Embedding(32, d)
        self.encoder = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.decoder = nn.ModuleList(Block(d, heads, cross=True) for _ in range(layers))
        self.lm_head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, passage_ids, passage_masks, decoder_input_ids, labels=None):
        bsz, n_passages, length = passage_ids.shape
        ids, keep = passage_ids.view(bsz * n_passages, length), passage_masks.view(bsz * n_passages, length)
        h = self.embed(ids) + self.pos.weight[:length]
        bias = encoder_bias(keep, h.dtype)
        for block in self.encoder:
            h = block(h, bias)
        memory = h.view(bsz, n_passages * length, -1)
        neg = torch.finfo(memory.dtype).min
        memory_bias = torch.where(passage_masks.view(bsz, 1, 1, -1), 0.0, neg)
        t = decoder_input_ids.size(1)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        self_bias = torch.where(causal, 0.0, neg)
        y = self.embed(decoder_input_ids) + self.pos.weight[:t]
        for block in self.decoder:
            y = block(y, self_bias, memory, memory_bias)
        logits = self.lm_head(y)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return loss, logits

    def get_crossattention_scores(self, context_mask):
        scores = torch.cat([blk.cross_attn.score_storage[:, :, :1] for blk in self.decoder], dim=2)
        bsz, n_heads, n_layers, _ = scores.size()
        scores = scores.view(bsz, n_heads, n_layers, context_mask.size(1), -1)
        scores = scores.masked_fill(~context_mask[:, None, None], 0.0)
        scores = scores.sum(dim=[1, 2, 4])
        ntokens = context_mask.sum(dim=[2]) * n_layers * n_heads
        return scores / ntokens.clamp(min=1)


class Retriever(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, d, mode="mean", padding_idx=PAD)
        self.proj = nn.Linear(d, d)

    def forward(self, passage_ids, question_ids):
        p = self.proj(self.embed(passage_ids.flatten(0, 1))).view(*passage_ids.shape[:2], -1)
        q = self.proj(self.embed(question_ids))
        return torch.einsum("bd,bnd->bn", q, p) / math.sqrt(p.size(-1))


def kd_loss(retriever_scores, reader_scores, passage_keep, temperature=0.1):
    neg = torch.finfo(retriever_scores.dtype).min
    target = torch.softmax(reader_scores.masked_fill(~passage_keep, neg) / temperature, dim=-1)
    log_probs = torch.log_softmax(retriever_scores.masked_fill(~passage_keep, neg), dim=-1)
    return F.kl_div(log_probs, target, reduction="batchmean")


if __name__ == "__main__":
    torch.manual_seed(0)
    examples = [
        {"question": "who painted the mona lisa", "answer": "leonardo da vinci",
         "ctxs": [("Mona Lisa", "a portrait painted by leonardo da vinci"), ("Louvre", "museum in paris"),
                  ("Vinci", "a town in tuscany")]},
        {"question": "highest mountain in africa", "answer": "kilimanjaro",
         "ctxs": [("Kilimanjaro", "dormant volcano in tanzania and highest in africa"), ("Africa", "second largest continent")]},
    ]
    batch = collate(examples)
    question_ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(encode(ex["question"])) for ex in examples], batch_first=True)
    reader, retriever = FiDReader(), Retriever()
    optimizer = torch.optim.Adam(list(reader.parameters()) + list(retriever.parameters()), lr=3e-4)
    passage_keep = batch["passage_masks"].any(-1)
    for step in range(3):
        reader_loss, _ = reader(**batch)
        with torch.no_grad():
            reader_scores = reader.get_crossattention_scores(batch["passage_masks"])
        loss = reader_loss + kd_loss(retriever(batch["passage_ids"], question_ids), reader_scores, passage_keep)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} reader {reader_loss.item():.4f} total {loss.item():.4f}")
    print("reader passage scores", reader_scores.tolist())
