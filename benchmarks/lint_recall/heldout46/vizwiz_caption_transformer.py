"""Captioning photos taken by blind and low-vision users (VizWiz-Captions).

Imitates the transformer captioner of ruotianluo/ImageCaptioning.pytorch, the code base that
AoANet (one of the VizWiz-Captions baselines) is built on: the annotated-transformer pieces
(`clones`, `EncoderDecoder` with `encode` / `decode`, `Encoder`, `Decoder`, `DecoderLayer`
with `self_attn` / `src_attn`, `MultiHeadedAttention` with its four `linears`),
`TransformerModel` with `att_embed`, `_prepare_feature`, `_forward`, `core` and greedy
`_sample` keeping its decoding `state`, the `LanguageModelCriterion`, `decode_sequence` over
`ix_to_word`. As in later forks the attention runs on SDPA and the decoder's self-attention
keys and values are kept in `state` between decoding steps. Images are bags of 3-8
synthetic region features padded per batch with `att_masks`; blurred shots are captioned with
VizWiz's quality-issue sentence.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and section 5 item 8;
pytorch/pytorch PR #111007 (conventions.md section 1).
"""

import copy
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OBJECTS = ["bottle", "can", "box", "remote", "phone", "shirt", "jar", "label"]
COLORS = ["red", "blue", "green", "white", "black"]
WORDS = ["<pad>", "<bos>", "<eos>", "a", "on", "the", "table", "quality", "issues", "are", "too",
         "severe"] + OBJECTS + COLORS
ix_to_word = dict(enumerate(WORDS))
word_to_ix = {w: i for i, w in ix_to_word.items()}


def clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1, causal=False):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.dropout = dropout
        self.causal = causal

    def forward(self, query, key, value, mask=None, layer_past=None):
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        if layer_past is not None:
            key = torch.cat([layer_past[0], key], dim=2)
            value = torch.cat([layer_past[1], value], dim=2)
        present = (key, value)
        if mask is not None:
            mask = mask.unsqueeze(1)
        p = self.dropout if self.training else 0.0
        x = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=p, is_causal=self.causal)  # expect: MC510 cache
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x), present


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norms = clones(nn.LayerNorm(size), 2)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        h = self.norms[0](x)
        x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
        return x + self.dropout(self.feed_forward(self.norms[1](x)))


class DecoderLayer(nn.Module):
    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.norms = clones(nn.LayerNorm(size), 3)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, layer_past=None):
        h = self.norms[0](x)
        attn, present = self.self_attn(h, h, h, None, layer_past)
        x = x + self.dropout(attn)
        h = self.norms[1](x)
        x = x + self.dropout(self.src_attn(h, memory, memory, src_mask)[0])
        return x + self.dropout(self.feed_forward(self.norms[2](x))), present


class Encoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = nn.LayerNorm(layer.norms[0].normalized_shape)

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = nn.LayerNorm(layer.norms[0].normalized_shape)

    def forward(self, x, memory, src_mask, past=None):
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, memory, src_mask, None if past is None else past[i])
            presents.append(present)
        return self.norm(x), presents


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, tgt_embed, d_model, max_len=32):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.tgt_embed = tgt_embed
        self.d_model = d_model
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def encode(self, src, src_mask):
        return self.encoder(src, src_mask)

    def decode(self, memory, src_mask, tgt, past=None, offset=0):
        x = self.tgt_embed(tgt) * math.sqrt(self.d_model) + self.pe[offset:offset + tgt.size(1)]
        return self.decoder(x, memory, src_mask, past)


class TransformerModel(nn.Module):
    def __init__(self, att_feat_size, vocab_size, N_enc=2, N_dec=2, d_model=64, d_ff=128, h=4, dropout=0.1, seq_length=10):
        super().__init__()
        self.vocab_size = vocab_size
        self.seq_length = seq_length
        self.att_embed = nn.Sequential(nn.Linear(att_feat_size, d_model), nn.ReLU(), nn.Dropout(dropout))
        enc_layer = EncoderLayer(d_model, MultiHeadedAttention(h, d_model, dropout), PositionwiseFeedForward(d_model, d_ff, dropout), dropout)
        dec_layer = DecoderLayer(d_model, MultiHeadedAttention(h, d_model, dropout, causal=True),
                                 MultiHeadedAttention(h, d_model, dropout), PositionwiseFeedForward(d_model, d_ff, dropout), dropout)
        self.model = EncoderDecoder(Encoder(enc_layer, N_enc), Decoder(dec_layer, N_dec), nn.Embedding(vocab_size, d_model), d_model)
        self.logit = nn.Linear(d_model, vocab_size)

    def _prepare_feature(self, att_feats, att_masks):
        att_feats = self.att_embed(att_feats)
        att_masks = att_masks.unsqueeze(-2)
        memory = self.model.encode(att_feats, att_masks)
        return memory, att_masks

    def _forward(self, att_feats, seq, att_masks):
        memory, att_masks = self._prepare_feature(att_feats, att_masks)
        out, _ = self.model.decode(memory, att_masks, seq[:, :-1])
        return F.log_softmax(self.logit(out), dim=-1)

    def core(self, it, memory, state, mask, t):
        out, state = self.model.decode(memory, mask, it.unsqueeze(1), past=state, offset=t)
        return F.log_softmax(self.logit(out[:, -1]), dim=-1), state

    def _sample(self, att_feats, att_masks):
        memory, att_masks = self._prepare_feature(att_feats, att_masks)
        batch_size = att_feats.size(0)
        it = torch.full((batch_size,), word_to_ix["<bos>"], dtype=torch.long)
        state = None
        seq = torch.zeros(batch_size, self.seq_length, dtype=torch.long)
        unfinished = torch.ones(batch_size, dtype=torch.bool)
        for t in range(self.seq_length):
            logprobs, state = self.core(it, memory, state, att_masks, t)
            it = logprobs.argmax(dim=1)
            it = it * unfinished
            seq[:, t] = it
            unfinished = unfinished & (it != word_to_ix["<eos>"])
            if unfinished.sum() == 0:
                break
        return seq


class LanguageModelCriterion(nn.Module):
    def forward(self, logprobs, target, mask):
        output = -logprobs.gather(2, target.unsqueeze(2)).squeeze(2) * mask
        return torch.sum(output) / torch.sum(mask)


def decode_sequence(ix_to_word, seq):
    out = []
    for row in seq.tolist():
        words = []
        for ix in row:
            if ix in (0, word_to_ix["<eos>"]):
                break
            words.append(ix_to_word[ix])
        out.append(" ".join(words))
    return out


def make_photo(rng, feat_size):
    n_regions = int(rng.integers(3, 9))
    obj, color = int(rng.integers(len(OBJECTS))), int(rng.integers(len(COLORS)))
    blurred = rng.uniform() < 0.2
    feats = rng.normal(0, 0.3, (n_regions, feat_size)).astype(np.float32)
    feats[0, obj] += 3.0
    feats[0, len(OBJECTS) + color] += 3.0
    if blurred:
        feats *= 0.1
        feats[:, -1] = 2.0
        caption = "quality issues are too severe"
    else:
        caption = f"a {COLORS[color]} {OBJECTS[obj]} on the table"
    return feats, caption


def get_batch(photos, seq_length):
    max_regions = max(f.shape[0] for f, _ in photos)
    feat_size = photos[0][0].shape[1]
    att_feats = torch.zeros(len(photos), max_regions, feat_size)
    att_masks = torch.zeros(len(photos), max_regions, dtype=torch.bool)
    labels = torch.zeros(len(photos), seq_length + 2, dtype=torch.long)
    for i, (feats, caption) in enumerate(photos):
        att_feats[i, :feats.shape[0]] = torch.from_numpy(feats)
        att_masks[i, :feats.shape[0]] = True
        ids = [word_to_ix["<bos>"]] + [word_to_ix[w] for w in caption.split()] + [word_to_ix["<eos>"]]
        labels[i, :len(ids)] = torch.tensor(ids)
    return att_feats, att_masks, labels


if __name__ == "__main__":
    random.seed(0)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    feat_size, seq_length = 24, 8
    train = [make_photo(rng, feat_size) for _ in range(256)]
    test = [make_photo(rng, feat_size) for _ in range(48)]
    model = TransformerModel(feat_size, len(WORDS), seq_length=seq_length)
    crit = LanguageModelCriterion()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(6):
        model.train()
        random.shuffle(train)
        for start in range(0, len(train), 32):
            att_feats, att_masks, labels = get_batch(train[start:start + 32], seq_length)
            logprobs = model._forward(att_feats, labels, att_masks)
            loss = crit(logprobs, labels[:, 1:], (labels[:, 1:] > 0).float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    att_feats, att_masks, labels = get_batch(test, seq_length)
    with torch.no_grad():
        seq = model._sample(att_feats, att_masks)
    preds = decode_sequence(ix_to_word, seq)
    exact = np.mean([p == c for p, (_, c) in zip(preds, test)])
    print(f"exact-match captions: {exact:.3f}")
    for p, (_, c) in list(zip(preds, test))[:3]:
        print(f"  pred: {p!r}  ref: {c!r}")
