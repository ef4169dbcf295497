"""Automated ICD-10 coding of discharge summaries (MIMIC-IV style, top-50 codes).

Long notes are encoded in fixed-size chunks, as PLM-ICD does, but in one pass:
positions restart in every chunk and attention is kept inside a chunk by a
block mask.  A label-wise attention layer (LAAT) then lets every code attend
over all tokens of the note, and each code gets its own logit.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CHUNK_SIZE = 16
NUM_CODES = 50
PAD_ID = 0


def chunk_layout(n_tokens: int, chunk_size: int = CHUNK_SIZE):
    pos = torch.arange(n_tokens)
    chunk_id = pos // chunk_size
    mask = torch.zeros(n_tokens, n_tokens)
    for start in range(0, n_tokens, chunk_size):
        mask[start:start + chunk_size, start:start + chunk_size] = 0
    mask[mask == 0] = float("-inf")  # expect: MC504 chunks
    return pos % chunk_size, chunk_id, mask


def pad_to_chunks(input_ids: torch.Tensor, chunk_size: int = CHUNK_SIZE) -> torch.Tensor:
    extra = (-input_ids.size(1)) % chunk_size
    return F.pad(input_ids, (0, extra), value=PAD_ID)


class ChunkSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h = n_heads
        self.dk = d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, chunk_mask, token_keep):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.h, self.dk).transpose(1, 2)
        k = self.k(x).view(b, n, self.h, self.dk).transpose(1, 2)
        v = self.v(x).view(b, n, self.h, self.dk).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        scores = scores.masked_fill(~token_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = self.drop(torch.softmax(scores + chunk_mask, dim=-1))
        return self.o((probs @ v).transpose(1, 2).reshape(b, n, -1))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn = ChunkSelfAttention(d_model, n_heads, dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, chunk_mask, token_keep):
        x = self.ln1(x + self.attn(x, chunk_mask, token_keep))
        return self.ln2(x + self.ff(x))


class LabelAttention(nn.Module):
    def __init__(self, d_model, d_att, num_codes):
        super().__init__()
        self.W = nn.Linear(d_model, d_att, bias=False)
        self.U = nn.Linear(d_att, num_codes, bias=False)
        self.out = nn.Parameter(torch.empty(num_codes, d_model))
        self.bias = nn.Parameter(torch.zeros(num_codes))
        nn.init.xavier_uniform_(self.out)

    def forward(self, h, token_keep):
        z = torch.tanh(self.W(h))
        att = self.U(z).transpose(1, 2)
        att = att.masked_fill(~token_keep[:, None, :], float("-inf"))
        alpha = torch.softmax(att, dim=-1)
        v = alpha @ h
        return (v * self.out).sum(-1) + self.bias, alpha


class ChunkedICDCoder(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=128,
                 n_chunks_max=16, num_codes=NUM_CODES):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(CHUNK_SIZE, d_model)
        self.chunk = nn.Embedding(n_chunks_max, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.label_attn = LabelAttention(d_model, d_model, num_codes)

    def forward(self, input_ids, labels=None):
        input_ids = pad_to_chunks(input_ids)
        token_keep = input_ids != PAD_ID
        pos, chunk_id, chunk_mask = chunk_layout(input_ids.size(1))
        pos, chunk_id, chunk_mask = (t.to(input_ids.device) for t in (pos, chunk_id, chunk_mask))
        x = self.tok(input_ids) + self.pos(pos)[None] + self.chunk(chunk_id)[None]
        for layer in self.layers:
            x = layer(x, chunk_mask, token_keep)
        logits, alpha = self.label_attn(x, token_keep)
        out = {"logits": logits, "alpha": alpha}
        if labels is not None:
            out["loss"] = F.binary_cross_entropy_with_logits(logits, labels)
        return out


def micro_f1(logits, labels, threshold=0.5):
    pred = (torch.sigmoid(logits) > threshold).float()
    tp = (pred * labels).sum()
    return (2 * tp / (pred.sum() + labels.sum()).clamp(min=1.0)).item()


def evidence_tokens(alpha, input_ids, code_idx, k=3):
    input_ids = pad_to_chunks(input_ids)
    top = alpha[:, code_idx].topk(k, dim=-1).indices
    return torch.gather(input_ids, 1, top)


def random_notes(b, lengths, vocab_size, generator):
    ids = torch.full((b, max(lengths)), PAD_ID, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(1, vocab_size, (n,), generator=generator)
    labels = (torch.rand(b, NUM_CODES, generator=generator) < 0.1).float()
    return ids, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    vocab_size = 300
    model = ChunkedICDCoder(vocab_size)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    ids, labels = random_notes(4, [70, 41, 23, 55], vocab_size, g)
    for step in range(4):
        out = model(ids, labels)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    print("loss", round(out["loss"].item(), 4), "micro-F1", round(micro_f1(out["logits"], labels), 3))
    model.eval()
    with torch.no_grad():
        out = model(ids)
    print("evidence", evidence_tokens(out["alpha"], ids, code_idx=0)[0].tolist())
