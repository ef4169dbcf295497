"""Streaming speech translation: a chunk-wise Transformer encoder (WeNet / ESPnet style, dynamic
chunk training) under an attention decoder, on synthetic filterbank features.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask, create_local_mask),
conventions.md §1 (direction cheat-sheet).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_ID = -1


@dataclass
class StreamingSTConfig:
    idim: int = 40
    odim: int = 16
    attention_dim: int = 64
    attention_heads: int = 4
    linear_units: int = 128
    num_blocks: int = 2
    dropout_rate: float = 0.1
    use_dynamic_chunk: bool = True
    static_chunk_size: int = 0
    num_decoding_left_chunks: int = -1


def make_pad_mask(lengths, max_len=0):
    max_len = max(max_len, int(lengths.max()))
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0) >= lengths.unsqueeze(-1)


def chunk_attention_bias(size, chunk_size, num_left_chunks=-1, device=None):
    """Additive (size, size) bias: frame i sees its own chunk and num_left_chunks chunks before it."""
    cid = torch.arange(size, device=device) // chunk_size
    left_chunks = int(cid[-1]) + 1 if num_left_chunks < 0 else num_left_chunks
    bias = torch.zeros(size, size, device=device)
    for c in range(int(cid[-1]) + 1):
        start, end = c * chunk_size, min((c + 1) * chunk_size, size)
        bias[start:end, max(c - left_chunks, 0) * chunk_size : end] = 0.0
    bias[(cid[None, :] > cid[:, None]) | (cid[None, :] < cid[:, None] - left_chunks)] = float("-inf")
    return bias


class Conv2dSubsampling4(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x, x_mask):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        return self.out(x.transpose(1, 2).contiguous().view(b, t, c * f)), x_mask[:, :, 2::2][:, :, 2::2]


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat, dropout_rate):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward(self, query, key, value, mask, att_bias=None):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if att_bias is not None:
            scores = scores + att_bias
        mask = mask.unsqueeze(1).eq(0)  # (batch, 1, 1, time2), True at padding
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        x = torch.matmul(self.dropout(attn), v).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = MultiHeadedAttention(cfg.attention_heads, cfg.attention_dim, cfg.dropout_rate)
        self.feed_forward = nn.Sequential(
            nn.Linear(cfg.attention_dim, cfg.linear_units), nn.ReLU(), nn.Linear(cfg.linear_units, cfg.attention_dim)
        )
        self.norm1, self.norm2 = nn.LayerNorm(cfg.attention_dim), nn.LayerNorm(cfg.attention_dim)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x, mask_pad, chunk_bias):
        xn = self.norm1(x)
        x = x + self.dropout(self.self_attn(xn, xn, xn, mask_pad, att_bias=chunk_bias))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class ChunkTransformerEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = Conv2dSubsampling4(cfg.idim, cfg.attention_dim)
        self.encoders = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.num_blocks)])
        self.after_norm = nn.LayerNorm(cfg.attention_dim)

    def forward(self, xs, xs_lens, decoding_chunk_size=0, num_decoding_left_chunks=-1):
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)  # (batch, 1, time), True = frame
        xs, masks = self.embed(xs, masks)
        xs = xs * math.sqrt(self.cfg.attention_dim)
        t = xs.size(1)
        if decoding_chunk_size > 0:
            chunk_size, left = decoding_chunk_size, num_decoding_left_chunks
        elif self.cfg.use_dynamic_chunk and self.training:
            chunk_size = t if random.random() < 0.5 else random.randint(1, 8)
            left = -1
        else:
            chunk_size, left = t, -1
        chunk_bias = chunk_attention_bias(t, chunk_size, left, device=xs.device)
        for layer in self.encoders:
            xs = layer(xs, masks, chunk_bias)
        return self.after_norm(xs), masks


class SpeechTranslationModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.sos = self.eos = cfg.odim - 1
        self.encoder = ChunkTransformerEncoder(cfg)
        self.embed = nn.Embedding(cfg.odim, cfg.attention_dim)
        layer = nn.TransformerDecoderLayer(cfg.attention_dim, cfg.attention_heads, cfg.linear_units, 0.1, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers=1)
        self.output_layer = nn.Linear(cfg.attention_dim, cfg.odim)

    def decode(self, ys_in, ys_in_lens, memory, memory_mask):
        t = ys_in.size(1)
        pos = torch.arange(t, device=ys_in.device)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=ys_in.device), diagonal=1)
        tgt = self.embed(ys_in) + 0.1 * torch.sin(pos[None, :, None] / (1 + torch.arange(self.embed.embedding_dim)))
        hidden = self.decoder(tgt, memory, tgt_mask=future, tgt_key_padding_mask=make_pad_mask(ys_in_lens, t),
                              memory_key_padding_mask=~memory_mask.squeeze(1))
        return self.output_layer(hidden)

    def forward(self, speech, speech_lengths, text):
        memory, memory_mask = self.encoder(speech, speech_lengths)
        ys = [y[y != IGNORE_ID] for y in text]
        ys_in = nn.utils.rnn.pad_sequence([F.pad(y, (1, 0), value=self.sos) for y in ys], True, self.eos)
        ys_out = nn.utils.rnn.pad_sequence([F.pad(y, (0, 1), value=self.eos) for y in ys], True, IGNORE_ID)
        ys_in_lens = torch.tensor([len(y) + 1 for y in ys], device=ys_in.device)
        logits = self.decode(ys_in, ys_in_lens, memory, memory_mask)
        return F.cross_entropy(logits.flatten(0, 1), ys_out.flatten(), ignore_index=IGNORE_ID, label_smoothing=0.1)


def synth_batch(cfg, n, rng, prototypes, perm):
    words = [[rng.randrange(1, cfg.odim - 1) for _ in range(rng.randint(2, 5))] for _ in range(n)]
    feats = [torch.cat([prototypes[w].repeat(rng.randint(6, 10), 1) for w in ws]) for ws in words]
    feats = [f + 0.3 * torch.randn_like(f) for f in feats]
    lengths = torch.tensor([len(f) for f in feats])
    speech = nn.utils.rnn.pad_sequence(feats, batch_first=True)
    text = nn.utils.rnn.pad_sequence([torch.tensor([perm[w] for w in ws]) for ws in words], True, IGNORE_ID)
    return speech, lengths, text


if __name__ == "__main__":
    torch.manual_seed(0)
    random.seed(0)
    rng = random.Random(0)
    cfg = StreamingSTConfig()
    prototypes = torch.randn(cfg.odim, cfg.idim)
    perm = [0, *random.Random(1).sample(range(1, cfg.odim - 1), cfg.odim - 2)]
    model = SpeechTranslationModel(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(120):
        loss = model(*synth_batch(cfg, 16, rng, prototypes, perm))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 40 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    speech, lengths, _ = synth_batch(cfg, 2, rng, prototypes, perm)
    with torch.no_grad():
        full, _ = model.encoder(speech, lengths, decoding_chunk_size=4, num_decoding_left_chunks=2)
        head, _ = model.encoder(speech[:, :35], torch.clamp(lengths, max=35), decoding_chunk_size=4, num_decoding_left_chunks=2)
    print("first chunks, streamed prefix vs whole utterance:", (full[:, :8] - head[:, :8]).abs().max().item())
