"""Radiology report generation from chest X-rays with a memory-driven Transformer (R2Gen).

Follows zhjohnchan/R2Gen: a convolutional visual extractor giving patch features, the annotated
transformer encoder-decoder, a relational memory whose slots condition the decoder's layer norms
(MCLN), a threshold-vocabulary tokenizer, teacher-forced training and greedy decoding with BLEU.
Trained on synthetic radiographs; evaluated in float32 and, with --fp16, on a half-precision copy.

Source: NVIDIA/apex#1052, facebookresearch/fairseq#3575 (conventions.md §3 item 18), conventions.md §2.3
"""
import argparse
import copy
import math
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

FINDINGS = [
    ("the heart size is normal .", "the heart is mildly enlarged ."),
    ("no pleural effusion .", "there is a small right pleural effusion ."),
    ("the lungs are clear .", "there is patchy opacity in the left lower lobe ."),
]


def synth_study(g):
    img = 0.2 * torch.randn(1, 48, 48, generator=g)
    labels = torch.randint(0, 2, (3,), generator=g)
    r = 8 + 6 * labels[0].item()
    yy, xx = torch.meshgrid(torch.arange(48), torch.arange(48), indexing="ij")
    img[0] += ((yy - 26) ** 2 + (xx - 22) ** 2 < r * r).float()
    img[0, 38:, 30:] += float(labels[1])
    img[0, 28:40, 4:16] += 0.8 * labels[2] * torch.rand(12, 12, generator=g)
    return img, " ".join(FINDINGS[i][labels[i].item()] for i in range(3))


class Tokenizer:
    def __init__(self, reports, threshold=1):
        counts = Counter(w for r in reports for w in r.split())
        vocab = sorted(w for w, c in counts.items() if c >= threshold)
        self.idx2token = ["<pad>", "<bos>", "<eos>", "<unk>"] + vocab
        self.token2idx = {t: i for i, t in enumerate(self.idx2token)}

    def __call__(self, report):
        return [1] + [self.token2idx.get(w, 3) for w in report.split()] + [2]

    def decode(self, ids):
        ids = ids[:ids.index(2)] if 2 in ids else ids
        return " ".join(self.idx2token[i] for i in ids if i > 3)


def subsequent_mask(size):
    return torch.triu(torch.ones(1, size, size, dtype=torch.bool), diagonal=1) == 0


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # expect: MC501 r2gen
    p_attn = F.softmax(scores, dim=-1)
    p_attn = dropout(p_attn) if dropout is not None else p_attn
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        mask = mask.unsqueeze(1) if mask is not None else None
        nb = query.size(0)
        query, key, value = [l(x).view(nb, -1, self.h, self.d_k).transpose(1, 2)
                             for l, x in zip(self.linears, (query, key, value))]
        x, _ = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nb, -1, self.h * self.d_k)
        return self.linears[-1](x)


class RelationalMemory(nn.Module):
    def __init__(self, num_slots, d_model, num_heads=4):
        super().__init__()
        self.num_slots, self.d_model = num_slots, d_model
        self.attn = MultiHeadedAttention(num_heads, d_model, dropout=0.0)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.W, self.U = nn.Linear(d_model, 2 * d_model), nn.Linear(d_model, 2 * d_model)

    def init_memory(self, batch_size, dtype):
        memory = torch.eye(self.num_slots, self.d_model, dtype=dtype, device=self.W.weight.device)
        return memory.unsqueeze(0).expand(batch_size, -1, -1)

    def forward_step(self, inp, memory):
        kv = torch.cat([memory, inp.unsqueeze(1)], 1)
        next_memory = memory + self.attn(memory, kv, kv)
        next_memory = next_memory + self.mlp(next_memory)
        gates = self.W(inp.unsqueeze(1)) + self.U(torch.tanh(memory))
        input_gate, forget_gate = gates.chunk(2, dim=2)
        return torch.sigmoid(input_gate) * torch.tanh(next_memory) + torch.sigmoid(forget_gate) * memory

    def forward(self, inputs, memory):
        outputs = []
        for i in range(inputs.size(1)):
            memory = self.forward_step(inputs[:, i], memory)
            outputs.append(memory.flatten(1))
        return torch.stack(outputs, dim=1)


class ConditionalLayerNorm(nn.Module):
    def __init__(self, d_model, rm_flat, eps=1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.mlp_gamma = nn.Sequential(nn.Linear(rm_flat, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.mlp_beta = nn.Sequential(nn.Linear(rm_flat, d_model), nn.ReLU(), nn.Linear(d_model, d_model))

    def forward(self, x, memory):
        return self.norm(x) * (1 + self.mlp_gamma(memory)) + self.mlp_beta(memory)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(h, d_model, dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = x + self.dropout(self.self_attn(*[self.norms[0](x)] * 3, mask))
        return x + self.dropout(self.ff(self.norms[1](x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout, rm_flat):
        super().__init__()
        self.self_attn = MultiHeadedAttention(h, d_model, dropout)
        self.src_attn = MultiHeadedAttention(h, d_model, dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList([ConditionalLayerNorm(d_model, rm_flat) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask, rm):
        y = self.norms[0](x, rm)
        x = x + self.dropout(self.self_attn(y, y, y, tgt_mask))
        y = self.norms[1](x, rm)
        x = x + self.dropout(self.src_attn(y, memory, memory, src_mask))
        return x + self.dropout(self.ff(self.norms[2](x, rm)))


class R2GenModel(nn.Module):
    def __init__(self, vocab_size, d_model=64, d_ff=128, h=4, num_layers=2, rm_num_slots=3, dropout=0.1):
        super().__init__()
        self.visual_extractor = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.att_embed = nn.Sequential(nn.Linear(64, d_model), nn.ReLU(), nn.Dropout(dropout))
        self.encoder = nn.ModuleList([EncoderLayer(d_model, h, d_ff, dropout) for _ in range(num_layers)])
        self.tgt_embed = nn.Embedding(vocab_size, d_model)
        self.rm = RelationalMemory(rm_num_slots, d_model)
        rm_flat = rm_num_slots * d_model
        self.decoder = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout, rm_flat) for _ in range(num_layers)])
        self.dec_norm = ConditionalLayerNorm(d_model, rm_flat)
        self.logit = nn.Linear(d_model, vocab_size)

    def encode(self, images):
        x = self.att_embed(self.visual_extractor(images).flatten(2).transpose(1, 2))
        att_masks = x.new_ones(x.shape[:2], dtype=torch.long).unsqueeze(-2)
        for layer in self.encoder:
            x = layer(x, att_masks)
        return x, att_masks

    def decode(self, memory, src_mask, seq):
        tgt_mask = (seq != 0).unsqueeze(-2) & subsequent_mask(seq.size(-1)).to(seq.device)
        x = self.tgt_embed(seq) * math.sqrt(self.tgt_embed.embedding_dim)
        rm = self.rm(x, self.rm.init_memory(seq.size(0), x.dtype))
        for layer in self.decoder:
            x = layer(x, memory, src_mask, tgt_mask, rm)
        return self.logit(self.dec_norm(x, rm))

    def forward(self, images, seq):
        memory, src_mask = self.encode(images)
        return self.decode(memory, src_mask, seq)

    @torch.no_grad()
    def sample(self, images, max_len=24):
        memory, src_mask = self.encode(images)
        seq = torch.ones(images.size(0), 1, dtype=torch.long, device=images.device)
        for _ in range(max_len):
            nxt = self.decode(memory, src_mask, seq)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
        return seq[:, 1:]


def bleu4(refs, hyps):
    num, den, ref_len, hyp_len = [0] * 4, [0] * 4, 0, 0
    for r, h in zip(refs, hyps):
        r, h = r.split(), h.split()
        ref_len, hyp_len = ref_len + len(r), hyp_len + len(h)
        for n in range(4):
            hc, rc = [Counter(tuple(t[i:i + n + 1]) for i in range(len(t) - n)) for t in (h, r)]
            num[n] += sum(min(c, rc[g]) for g, c in hc.items())
            den[n] += max(len(h) - n, 0)
    if min(num) == 0:
        return 0.0
    bp = math.exp(min(0.0, 1 - ref_len / max(hyp_len, 1)))
    return bp * math.exp(sum(math.log(num[n] / den[n]) for n in range(4)) / 4)


def evaluate(model, tokenizer, images, reports, dtype):
    model = copy.deepcopy(model).to(dtype).eval()
    hyps = [tokenizer.decode(s.tolist()) for s in model.sample(images.to(dtype))]
    return bleu4(reports, hyps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--fp16", type=int, default=1)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    train = [synth_study(g) for _ in range(512)]
    test = [synth_study(g) for _ in range(96)]
    tokenizer = Tokenizer([r for _, r in train])
    model = R2GenModel(len(tokenizer.idx2token))
    optim = torch.optim.Adam(model.parameters(), lr=5e-4)
    for epoch in range(args.epochs):
        perm = torch.randperm(len(train))
        for start in range(0, len(train), 32):
            batch = [train[i] for i in perm[start:start + 32]]
            images = torch.stack([b[0] for b in batch])
            seq = nn.utils.rnn.pad_sequence([torch.tensor(tokenizer(b[1])) for b in batch], batch_first=True)
            logits = model(images, seq[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), seq[:, 1:].reshape(-1), ignore_index=0)
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optim.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    images, reports = torch.stack([t[0] for t in test]), [t[1] for t in test]
    print(f"BLEU-4 float32 {evaluate(model, tokenizer, images, reports, torch.float32):.3f}")
    if args.fp16:
        print(f"BLEU-4 float16 {evaluate(model, tokenizer, images, reports, torch.float16):.3f}")


if __name__ == "__main__":
    main()
