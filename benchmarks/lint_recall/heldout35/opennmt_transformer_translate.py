"""A pre-norm Transformer translation model in OpenNMT-py's layout (`sequence_mask`, `Embeddings`
with `PositionalEncoding`, `MultiHeadedAttention`, `_compute_dec_mask`)
with beam search under the GNMT length penalty.

Source: pytorch/pytorch#29546 and rasbt/LLMs-from-scratch#1061 (conventions.md §3 items 9 and 14),
conventions.md §1 (nn.MultiheadAttention row, direction cheat-sheet).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class TransformerOpts:
    src_vocab_size: int = 24
    tgt_vocab_size: int = 24
    d_model: int = 64
    heads: int = 4
    transformer_ff: int = 128
    enc_layers: int = 2
    dec_layers: int = 2
    dropout: float = 0.1
    beam_size: int = 4
    length_penalty_alpha: float = 0.6
    max_length: int = 14


UNK, PAD, BOS, EOS = 0, 1, 2, 3


def sequence_mask(lengths, max_len=None):
    batch_size = lengths.numel()
    max_len = max_len or lengths.max()
    return torch.arange(0, max_len, device=lengths.device).type_as(lengths).repeat(batch_size, 1).lt(lengths.unsqueeze(1))


class PositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=128):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position.float() * div_term), torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dim = dim

    def forward(self, emb):
        return emb * math.sqrt(self.dim) + self.pe[:, : emb.size(1)]


class Embeddings(nn.Module):
    def __init__(self, vocab_size, dim, word_padding_idx=PAD):
        super().__init__()
        self.word_padding_idx = word_padding_idx
        self.word_lut = nn.Embedding(vocab_size, dim, padding_idx=word_padding_idx)
        nn.init.normal_(self.word_lut.weight, 0.0, dim**-0.5)
        self.pe = PositionalEncoding(dim)

    def forward(self, source):
        return self.pe(self.word_lut(source))


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, dropout=0.1):
        super().__init__()
        self.dim_per_head, self.head_count = model_dim // head_count, head_count
        self.linear_keys, self.linear_values = nn.Linear(model_dim, model_dim), nn.Linear(model_dim, model_dim)
        self.linear_query, self.final_linear = nn.Linear(model_dim, model_dim), nn.Linear(model_dim, model_dim)
        self.softmax, self.dropout = nn.Softmax(dim=-1), nn.Dropout(dropout)

    def forward(self, key, value, query, mask=None):
        batch_size = key.size(0)

        def shape(x):
            return x.view(batch_size, -1, self.head_count, self.dim_per_head).transpose(1, 2)

        key, value = shape(self.linear_keys(key)), shape(self.linear_values(value))
        query = shape(self.linear_query(query)) / math.sqrt(self.dim_per_head)
        scores = torch.matmul(query, key.transpose(2, 3)).float()
        if mask is not None:
            mask = mask.unsqueeze(1)  # [B, 1, 1|T_q, T_k]
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        attn = self.softmax(scores).to(query.dtype)
        context = torch.matmul(self.dropout(attn), value).transpose(1, 2).contiguous()
        return self.final_linear(context.view(batch_size, -1, self.head_count * self.dim_per_head)), attn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model), nn.Dropout(dropout))

    def forward(self, x):
        return x + self.net(self.layer_norm(x))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.self_attn = MultiHeadedAttention(opt.heads, opt.d_model, opt.dropout)
        self.feed_forward = PositionwiseFeedForward(opt.d_model, opt.transformer_ff, opt.dropout)
        self.layer_norm, self.dropout = nn.LayerNorm(opt.d_model, eps=1e-6), nn.Dropout(opt.dropout)

    def forward(self, inputs, mask):
        input_norm = self.layer_norm(inputs)
        context, _ = self.self_attn(input_norm, input_norm, input_norm, mask=mask)
        return self.feed_forward(self.dropout(context) + inputs)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.self_attn = MultiHeadedAttention(opt.heads, opt.d_model, opt.dropout)
        self.context_attn = MultiHeadedAttention(opt.heads, opt.d_model, opt.dropout)
        self.feed_forward = PositionwiseFeedForward(opt.d_model, opt.transformer_ff, opt.dropout)
        self.layer_norm_1, self.layer_norm_2 = nn.LayerNorm(opt.d_model, eps=1e-6), nn.LayerNorm(opt.d_model, eps=1e-6)
        self.drop = nn.Dropout(opt.dropout)

    def _compute_dec_mask(self, tgt_pad_mask, future):
        tgt_len = tgt_pad_mask.size(-1)
        if not future:
            future_mask = torch.ones([tgt_len, tgt_len], device=tgt_pad_mask.device, dtype=torch.bool).tril_()  # expect: MC521 onmt
            future_mask = future_mask.view(1, tgt_len, tgt_len)
            return tgt_pad_mask | future_mask
        return tgt_pad_mask

    def forward(self, inputs, memory_bank, src_pad_mask, tgt_pad_mask, future=False):
        dec_mask = self._compute_dec_mask(tgt_pad_mask, future) if inputs.size(1) > 1 else None
        input_norm = self.layer_norm_1(inputs)
        query, _ = self.self_attn(input_norm, input_norm, input_norm, mask=dec_mask)
        query = self.drop(query) + inputs
        mid, attns = self.context_attn(memory_bank, memory_bank, self.layer_norm_2(query), mask=src_pad_mask)
        return self.feed_forward(self.drop(mid) + query), attns


class NMTModel(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.src_embeddings = Embeddings(opt.src_vocab_size, opt.d_model)
        self.tgt_embeddings = Embeddings(opt.tgt_vocab_size, opt.d_model)
        self.encoder_layers = nn.ModuleList([TransformerEncoderLayer(opt) for _ in range(opt.enc_layers)])
        self.decoder_layers = nn.ModuleList([TransformerDecoderLayer(opt) for _ in range(opt.dec_layers)])
        self.enc_norm, self.dec_norm = nn.LayerNorm(opt.d_model, eps=1e-6), nn.LayerNorm(opt.d_model, eps=1e-6)
        self.generator = nn.Sequential(nn.Linear(opt.d_model, opt.tgt_vocab_size), nn.LogSoftmax(dim=-1))

    def encode(self, src, src_lengths):
        out = self.src_embeddings(src)
        mask = ~sequence_mask(src_lengths, src.size(1)).unsqueeze(1)
        for layer in self.encoder_layers:
            out = layer(out, mask)
        return self.enc_norm(out)

    def decode(self, tgt, memory_bank, src_lengths):
        src_pad_mask = ~sequence_mask(src_lengths, memory_bank.size(1)).unsqueeze(1)
        tgt_pad_mask = tgt.eq(self.tgt_embeddings.word_padding_idx).unsqueeze(1)  # [B, 1, T_tgt]
        output = self.tgt_embeddings(tgt)
        for layer in self.decoder_layers:
            output, _ = layer(output, memory_bank, src_pad_mask, tgt_pad_mask)
        return self.generator(self.dec_norm(output))

    def forward(self, src, tgt, src_lengths):
        return self.decode(tgt[:, :-1], self.encode(src, src_lengths), src_lengths)


def length_wu(cur_len, alpha=0.0):
    return ((5 + cur_len) / 6.0) ** alpha


@torch.no_grad()
def translate_sentence(model, src, opt):
    src_lengths = torch.tensor([src.size(1)])
    memory_bank = model.encode(src, src_lengths)
    beams, finished = [([BOS], 0.0)], []
    for step in range(opt.max_length):
        prefixes = torch.tensor([b for b, _ in beams])
        log_probs = model.decode(prefixes, memory_bank.expand(len(beams), -1, -1), src_lengths.expand(len(beams)))[:, -1]
        candidates = [(b + [t], s + log_probs[i, t].item()) for i, (b, s) in enumerate(beams) for t in range(log_probs.size(1))]
        candidates.sort(key=lambda c: c[1], reverse=True)
        beams = []
        for hyp, score in candidates[: 2 * opt.beam_size]:
            if hyp[-1] == EOS:
                finished.append((hyp[1:-1], score / length_wu(step + 1, opt.length_penalty_alpha)))
            elif len(beams) < opt.beam_size:
                beams.append((hyp, score))
        if len(finished) >= opt.beam_size:
            break
    return max(finished, key=lambda f: f[1])[0] if finished else beams[0][0][1:]


def make_pair(rng, opt):
    src = [rng.randrange(4, opt.src_vocab_size) for _ in range(rng.randint(3, 9))]
    tgt = [(t * 7) % (opt.tgt_vocab_size - 4) + 4 for t in src]
    for i in range(0, len(tgt) - 1, 2):
        tgt[i], tgt[i + 1] = tgt[i + 1], tgt[i]
    return src, [BOS, *tgt, EOS]


def collate(pairs):
    src = nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in pairs], batch_first=True, padding_value=PAD)
    tgt = nn.utils.rnn.pad_sequence([torch.tensor(t) for _, t in pairs], batch_first=True, padding_value=PAD)
    return src, tgt, torch.tensor([len(s) for s, _ in pairs])


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    opt = TransformerOpts()
    model = NMTModel(opt)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.998))
    criterion = nn.NLLLoss(ignore_index=PAD)
    for step in range(500):
        src, tgt, src_lengths = collate([make_pair(rng, opt) for _ in range(32)])
        loss = criterion(model(src, tgt, src_lengths).flatten(0, 1), tgt[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    pairs = [make_pair(random.Random(i), opt) for i in range(10)]
    hyps = [translate_sentence(model, torch.tensor([s]), opt) for s, _ in pairs]
    print("beam search exact match:", sum(h == t[1:-1] for h, (_, t) in zip(hyps, pairs)), "/ 10")
    src, tgt, src_lengths = collate(pairs[:1])
    changed = tgt.clone()
    changed[0, -2] = UNK
    with torch.no_grad():
        delta = (model(src, tgt, src_lengths) - model(src, changed, src_lengths))[0, :-2].abs().max().item()
    print("earlier positions moved by a later target token:", delta)
