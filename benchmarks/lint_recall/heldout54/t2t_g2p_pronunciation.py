"""Grapheme-to-phoneme conversion for a pronunciation lexicon.

A PyTorch port of cmusphinx/g2p-seq2seq, the Tensor2Tensor `transformer` it trains on CMUdict
entries, translated function by function from tensor2tensor's common_layers and
common_attention (`shape_list`, `embedding_to_padding`, `attention_bias_ignore_padding`,
`attention_bias_lower_triangle`, `add_timing_signal_1d`, `shift_right_3d`,
`dot_product_attention` with additive biases, "n" / "da" pre- and post-processing) and driven by
an `HParams` record as `transformer_base` is. Words are made of syllables with English-like
spellings so the lexicon has digraphs (th, sh, ch, ph, ee, oo).

Source: seed self_attention_mask_guide.txt 3 (generate_causal_mask); pytorch/pytorch#103749
"""

import math
import random
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SPELLING = {"th": "TH", "sh": "SH", "ch": "CH", "ph": "F", "ee": "IY", "oo": "UW", "a": "AE",
            "b": "B", "d": "D", "e": "EH", "g": "G", "i": "IH", "k": "K", "l": "L", "m": "M",
            "n": "N", "o": "AA", "p": "P", "r": "R", "s": "S", "t": "T", "u": "AH", "v": "V", "z": "Z"}
SYLLABLES = ["ba", "shi", "thoo", "chee", "pho", "lun", "dra", "kes", "mo", "tig", "vee", "zup", "rosh"]
GRAPHEMES = ["<pad>", "<EOS>"] + sorted(set("".join(SYLLABLES)))
PHONEMES = ["<pad>", "<EOS>"] + sorted(set(SPELLING.values()))


@dataclass
class HParams:
    hidden_size: int = 64
    filter_size: int = 128
    num_heads: int = 4
    num_hidden_layers: int = 2
    layer_prepostprocess_dropout: float = 0.1
    attention_dropout: float = 0.0


def pronounce(word):
    return [SPELLING[g] for g in re.findall("th|sh|ch|ph|ee|oo|.", word)]


def make_lexicon(n, rng):
    return sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n)})


def encode_batch(words):
    src = [[GRAPHEMES.index(c) for c in w] + [1] for w in words]
    tgt = [[PHONEMES.index(p) for p in pronounce(w)] + [1] for w in words]
    inputs = torch.zeros(len(words), max(map(len, src)), dtype=torch.long)
    targets = torch.zeros(len(words), max(map(len, tgt)), dtype=torch.long)
    for i, (s, t) in enumerate(zip(src, tgt)):
        inputs[i, :len(s)], targets[i, :len(t)] = torch.tensor(s), torch.tensor(t)
    return inputs, targets


def shape_list(x):
    return list(x.shape)


def embedding_to_padding(emb):
    return (emb.abs().sum(dim=-1) == 0.0).to(emb.dtype)


def attention_bias_ignore_padding(memory_padding):
    return (memory_padding * torch.finfo(memory_padding.dtype).min)[:, None, None, :]


def attention_bias_lower_triangle(length):
    ret = torch.triu(torch.full((length, length), float("-inf")))  # expect: MC503 helper
    return ret.view(1, 1, length, length)


def add_timing_signal_1d(x, min_timescale=1.0, max_timescale=1.0e4):
    length, channels = shape_list(x)[1], shape_list(x)[2]
    position = torch.arange(length, dtype=x.dtype)
    num_timescales = channels // 2
    log_increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * torch.exp(torch.arange(num_timescales, dtype=x.dtype) * -log_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    return x + torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)[None]


def shift_right_3d(x):
    return F.pad(x, (0, 0, 1, 0))[:, :-1]


def dot_product_attention(q, k, v, bias, dropout_rate, training):
    logits = q @ k.transpose(-1, -2)
    if bias is not None:
        logits = logits + bias
    weights = F.dropout(torch.softmax(logits, dim=-1), dropout_rate, training)
    return weights @ v


class MultiheadAttention(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.q, self.k, self.v, self.output_transform = (nn.Linear(hparams.hidden_size, hparams.hidden_size, bias=False) for _ in range(4))

    def split_heads(self, x):
        b, n, d = shape_list(x)
        return x.view(b, n, self.hparams.num_heads, d // self.hparams.num_heads).transpose(1, 2)

    def forward(self, query_antecedent, memory_antecedent, bias):
        depth_per_head = self.hparams.hidden_size // self.hparams.num_heads
        q = self.split_heads(self.q(query_antecedent)) * depth_per_head ** -0.5
        k, v = self.split_heads(self.k(memory_antecedent)), self.split_heads(self.v(memory_antecedent))
        x = dot_product_attention(q, k, v, bias, self.hparams.attention_dropout, self.training)
        return self.output_transform(x.transpose(1, 2).flatten(2))


class TransformerLayer(nn.Module):
    def __init__(self, hparams, with_encdec):
        super().__init__()
        self.self_attention = MultiheadAttention(hparams)
        self.encdec_attention = MultiheadAttention(hparams) if with_encdec else None
        self.ffn = nn.Sequential(nn.Linear(hparams.hidden_size, hparams.filter_size), nn.ReLU(), nn.Linear(hparams.filter_size, hparams.hidden_size))
        self.norms = nn.ModuleList(nn.LayerNorm(hparams.hidden_size) for _ in range(3))
        self.dropout = nn.Dropout(hparams.layer_prepostprocess_dropout)

    def forward(self, x, self_attention_bias, encoder_output=None, encoder_decoder_attention_bias=None):
        y = self.norms[0](x)
        x = x + self.dropout(self.self_attention(y, y, self_attention_bias))
        if self.encdec_attention is not None:
            x = x + self.dropout(self.encdec_attention(self.norms[1](x), encoder_output, encoder_decoder_attention_bias))
        return x + self.dropout(self.ffn(self.norms[2](x)))


class Transformer(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.input_embedding = nn.Embedding(len(GRAPHEMES), hparams.hidden_size)
        self.target_embedding = nn.Embedding(len(PHONEMES), hparams.hidden_size)
        self.encoder = nn.ModuleList(TransformerLayer(hparams, False) for _ in range(hparams.num_hidden_layers))
        self.decoder = nn.ModuleList(TransformerLayer(hparams, True) for _ in range(hparams.num_hidden_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(hparams.hidden_size), nn.LayerNorm(hparams.hidden_size)
        self.softmax = nn.Linear(hparams.hidden_size, len(PHONEMES))

    def bottom(self, ids, embedding):
        ret = embedding(ids) * self.hparams.hidden_size ** 0.5
        return ret * (ids != 0).unsqueeze(-1).to(ret.dtype)

    def encode(self, inputs):
        x = self.bottom(inputs, self.input_embedding)
        encoder_decoder_attention_bias = attention_bias_ignore_padding(embedding_to_padding(x))
        x = add_timing_signal_1d(x)
        for layer in self.encoder:
            x = layer(x, encoder_decoder_attention_bias)
        return self.encoder_norm(x), encoder_decoder_attention_bias

    def decode(self, targets, encoder_output, encoder_decoder_attention_bias):
        decoder_self_attention_bias = attention_bias_lower_triangle(shape_list(targets)[1])
        x = add_timing_signal_1d(shift_right_3d(self.bottom(targets, self.target_embedding)))
        for layer in self.decoder:
            x = layer(x, decoder_self_attention_bias, encoder_output, encoder_decoder_attention_bias)
        return self.softmax(self.decoder_norm(x))

    def forward(self, inputs, targets):
        return self.decode(targets, *self.encode(inputs))

    @torch.no_grad()
    def greedy_infer(self, inputs, decode_length=16):
        encoder_output, bias = self.encode(inputs)
        decoded = torch.zeros(inputs.shape[0], 0, dtype=torch.long)
        for _ in range(decode_length):
            logits = self.decode(F.pad(decoded, (0, 1)), encoder_output, bias)
            decoded = torch.cat([decoded, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return decoded


def main():
    rng = random.Random(3)
    torch.manual_seed(3)
    lexicon = make_lexicon(900, rng)
    rng.shuffle(lexicon)
    train, test = lexicon[:-100], lexicon[-100:]
    model = Transformer(HParams())
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98))
    for step in range(200):
        inputs, targets = encode_batch(rng.sample(train, 32))
        logits = model(inputs, targets)
        loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    decoded = [row + [1] for row in model.greedy_infer(encode_batch(test)[0]).tolist()]
    wer = sum([PHONEMES[i] for i in row[:row.index(1)]] != pronounce(w) for row, w in zip(decoded, test)) / len(test)
    print("train loss %.3f  test WER %.3f" % (loss.item(), wer))


if __name__ == "__main__":
    main()
