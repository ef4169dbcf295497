"""Music Transformer: symbolic music generation with relative global attention (Huang et al., 2018).

Written in the layout of jason9693/MusicTransformer-pytorch (`midi_processor`-style event
vocabulary of 388 note-on / note-off / time-shift / velocity events plus pad, sos and eos;
utils.py `sequence_mask` and `get_masked_with_pad_tensor`; custom/layers.py
`DynamicPositionEmbedding`, `RelativeGlobalAttention` with `_get_left_embedding`,
`_qe_masking` and `_skewing`, `EncoderLayer`, the decoder-only `Encoder`;
custom/criterion.py `SmoothCrossEntropyLoss`; `slide_seq2seq_batch`; `generate`), on
synthetic arpeggio performances padded to `max_seq`.

Source: seed self_attention_mask_guide.txt §3 and §7 Q3; conventions.md §1 (direction
cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

RANGE_NOTE_ON, RANGE_NOTE_OFF, RANGE_TIME_SHIFT, RANGE_VEL = 128, 128, 100, 32
START_IDX = {
    "note_on": 0,
    "note_off": RANGE_NOTE_ON,
    "time_shift": RANGE_NOTE_ON + RANGE_NOTE_OFF,
    "velocity": RANGE_NOTE_ON + RANGE_NOTE_OFF + RANGE_TIME_SHIFT,
}


@dataclass
class MusicConfig:
    event_dim: int = RANGE_NOTE_ON + RANGE_NOTE_OFF + RANGE_TIME_SHIFT + RANGE_VEL
    pad_token: int = 388
    token_sos: int = 389
    token_eos: int = 390
    vocab_size: int = 391
    embedding_dim: int = 64
    num_layers: int = 2
    max_seq: int = 128
    dropout: float = 0.1
    label_smooth: float = 0.1


def sequence_mask(length, max_length=None):
    if max_length is None:
        max_length = length.max()
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


def get_masked_with_pad_tensor(size, src, trg, pad_token):
    src = src[:, None, None, :]
    trg = trg[:, None, None, :]
    src_mask = src == pad_token
    dec_trg_mask = trg == pad_token
    seq_mask = ~sequence_mask(torch.arange(1, size + 1).to(trg.device), size)
    look_ahead_mask = dec_trg_mask | seq_mask
    return src_mask, dec_trg_mask, look_ahead_mask


def look_ahead_bias(look_ahead_mask, dtype=torch.float32):
    bias = torch.zeros(look_ahead_mask.shape, dtype=dtype, device=look_ahead_mask.device)
    return bias.masked_fill(look_ahead_mask, float("-inf"))


class DynamicPositionEmbedding(torch.nn.Module):
    def __init__(self, embedding_dim, max_seq=2048):
        super().__init__()
        pos = np.arange(max_seq)[:, None]
        i = np.arange(embedding_dim)[None, :]
        angle = pos * np.exp(-np.log(10000) * (2 * (i // 2)) / embedding_dim)
        embed = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
        self.register_buffer("positional_embedding", torch.tensor(embed, dtype=torch.float32)[None])

    def forward(self, x):
        return x + self.positional_embedding[:, : x.size(1), :]


class RelativeGlobalAttention(torch.nn.Module):
    def __init__(self, h=4, d=256, add_emb=False, max_seq=2048):
        super().__init__()
        self.len_k = self.len_q = None
        self.max_seq, self.h, self.d = max_seq, h, d
        self.dh = d // h
        self.Wq = torch.nn.Linear(self.d, self.d)
        self.Wk = torch.nn.Linear(self.d, self.d)
        self.Wv = torch.nn.Linear(self.d, self.d)
        self.fc = torch.nn.Linear(d, d)
        self.additional = add_emb
        self.E = torch.nn.Parameter(torch.randn([self.max_seq, int(self.dh)]) * 0.02)

    def forward(self, inputs, mask=None):
        q, k, v = inputs
        q = self.Wq(q).reshape(q.size(0), q.size(1), self.h, -1).permute(0, 2, 1, 3)
        k = self.Wk(k).reshape(k.size(0), k.size(1), self.h, -1).permute(0, 2, 1, 3)
        v = self.Wv(v).reshape(v.size(0), v.size(1), self.h, -1).permute(0, 2, 1, 3)
        self.len_k, self.len_q = k.size(2), q.size(2)
        E = self._get_left_embedding(self.len_q, self.len_k).to(q.device)
        QE = torch.einsum("bhld,md->bhlm", [q, E])
        QE = self._qe_masking(QE)
        Srel = self._skewing(QE)
        QKt = torch.matmul(q, k.permute(0, 1, 3, 2))
        logits = (QKt + Srel) / math.sqrt(self.dh)
        if mask is not None:
            logits = logits + mask
        attention_weights = F.softmax(logits, -1)
        attention = torch.matmul(attention_weights, v)
        out = attention.permute(0, 2, 1, 3).reshape(attention.size(0), -1, self.d)
        return self.fc(out), attention_weights

    def _get_left_embedding(self, len_q, len_k):
        starting_point = max(0, self.max_seq - len_q)
        return self.E[starting_point:, :]

    @staticmethod
    def _qe_masking(qe):
        mask = sequence_mask(
            torch.arange(qe.size()[-1] - 1, qe.size()[-1] - qe.size()[-2] - 1, -1).to(qe.device),
            qe.size()[-1],
        )
        mask = ~mask.to(mask.device)
        return mask.to(qe.dtype) * qe

    def _skewing(self, tensor: torch.Tensor):
        padded = F.pad(tensor, [1, 0, 0, 0, 0, 0, 0, 0])
        reshaped = torch.reshape(
            padded, shape=[padded.size(0), padded.size(1), padded.size(-1), padded.size(-2)]
        )
        Srel = reshaped[:, :, 1:, :]
        if self.len_k > self.len_q:
            Srel = F.pad(Srel, [0, 0, 0, 0, 0, 0, 0, self.len_k - self.len_q])
        elif self.len_k < self.len_q:
            Srel = Srel[:, :, :, : self.len_k]
        return Srel


class EncoderLayer(torch.nn.Module):
    def __init__(self, d_model, rate=0.1, h=16, additional=False, max_seq=2048):
        super().__init__()
        self.d_model = d_model
        self.rga = RelativeGlobalAttention(h=h, d=d_model, max_seq=max_seq, add_emb=additional)
        self.FFN_pre = torch.nn.Linear(self.d_model, self.d_model // 2)
        self.FFN_suf = torch.nn.Linear(self.d_model // 2, self.d_model)
        self.layernorm1 = torch.nn.LayerNorm(self.d_model, eps=1e-6)
        self.layernorm2 = torch.nn.LayerNorm(self.d_model, eps=1e-6)
        self.dropout1 = torch.nn.Dropout(rate)
        self.dropout2 = torch.nn.Dropout(rate)

    def forward(self, x, mask=None):
        attn_out, w = self.rga([x, x, x], mask)
        out1 = self.layernorm1(self.dropout1(attn_out) + x)
        ffn_out = self.dropout2(self.FFN_suf(F.relu(self.FFN_pre(out1))))
        return self.layernorm2(out1 + ffn_out), w


class Encoder(torch.nn.Module):
    def __init__(self, num_layers, d_model, input_vocab_size, rate=0.1, max_len=None):
        super().__init__()
        self.d_model, self.num_layers = d_model, num_layers
        self.embedding = torch.nn.Embedding(num_embeddings=input_vocab_size, embedding_dim=d_model)
        self.pos_encoding = DynamicPositionEmbedding(self.d_model, max_seq=max_len)
        self.enc_layers = torch.nn.ModuleList(
            EncoderLayer(d_model, rate, h=max(1, self.d_model // 32), max_seq=max_len)
            for _ in range(num_layers)
        )
        self.dropout = torch.nn.Dropout(rate)

    def forward(self, x, mask=None):
        weights = []
        x = self.embedding(x.to(torch.long)) * math.sqrt(self.d_model)
        x = self.dropout(self.pos_encoding(x))
        for i in range(self.num_layers):
            x, w = self.enc_layers[i](x, mask)
            weights.append(w)
        return x, weights


class MusicTransformer(torch.nn.Module):
    def __init__(self, config: MusicConfig):
        super().__init__()
        self.config = config
        self.max_seq = config.max_seq
        self.Decoder = Encoder(
            config.num_layers,
            config.embedding_dim,
            config.vocab_size,
            config.dropout,
            config.max_seq,
        )
        self.fc = torch.nn.Linear(config.embedding_dim, config.vocab_size)

    def forward(self, x):
        _, _, look_ahead_mask = get_masked_with_pad_tensor(x.size(1), x, x, self.config.pad_token)
        decoder, _ = self.Decoder(x, mask=look_ahead_bias(look_ahead_mask))
        return self.fc(decoder).contiguous()

    @torch.no_grad()
    def generate(self, prior, length=64, temperature=1.0, generator=None):
        decode_array = prior
        for _ in range(length):
            logits = self.forward(decode_array[:, -self.max_seq :])[:, -1] / temperature
            probs = F.softmax(logits[:, : self.config.event_dim], dim=-1)
            next_event = torch.multinomial(probs, 1, generator=generator)
            decode_array = torch.cat([decode_array, next_event], dim=-1)
        return decode_array


class SmoothCrossEntropyLoss(torch.nn.Module):
    def __init__(self, label_smoothing, vocab_size, ignore_index=-100):
        super().__init__()
        self.ignore_index, self.label_smoothing, self.vocab_size = (
            ignore_index,
            label_smoothing,
            vocab_size,
        )

    def forward(self, input, target):
        mask = (target == self.ignore_index).unsqueeze(-1)
        q = F.one_hot(target.long(), self.vocab_size).type(torch.float32)
        q_prime = (1.0 - self.label_smoothing) * q + self.label_smoothing / self.vocab_size
        q_prime = q_prime.masked_fill(mask, 0)
        ce = -torch.sum(q_prime * (input - input.logsumexp(dim=-1, keepdim=True)), dim=-1)
        return ce.sum() / torch.sum(target != self.ignore_index)


def synthetic_performance(rng, config: MusicConfig):
    root = int(rng.integers(48, 72))
    chord = [0, 4, 7, 12] if rng.random() < 0.5 else [0, 3, 7, 12]
    events = [config.token_sos]
    for _ in range(int(rng.integers(8, 32))):
        for step in chord:
            pitch = root + step
            events += [
                START_IDX["velocity"] + int(rng.integers(16, 24)),
                START_IDX["note_on"] + pitch,
            ]
            events += [START_IDX["time_shift"] + 24, START_IDX["note_off"] + pitch]
        root = root + int(rng.choice([-5, 2, 5, 7])) if 40 < root < 80 else 60
    return (events + [config.token_eos])[: config.max_seq + 1]


def slide_seq2seq_batch(pieces, config: MusicConfig):
    batch = torch.full((len(pieces), config.max_seq + 1), config.pad_token, dtype=torch.long)
    for i, piece in enumerate(pieces):
        batch[i, : len(piece)] = torch.tensor(piece)
    return batch[:, :-1], batch[:, 1:]


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    config = MusicConfig()
    model = MusicTransformer(config)
    criterion = SmoothCrossEntropyLoss(config.label_smooth, config.vocab_size, config.pad_token)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    for step in range(40):
        x, y = slide_seq2seq_batch([synthetic_performance(rng, config) for _ in range(8)], config)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    prior = torch.tensor([synthetic_performance(rng, config)[:12]])
    sample = model.generate(prior, length=24, generator=torch.Generator().manual_seed(0))
    print("generated events:", sample[0, 12:].tolist())


if __name__ == "__main__":
    main()
