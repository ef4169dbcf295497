"""ESPnet-style joint CTC / attention speech recognizer, decoded with a half-precision copy.

Laid out after espnet/espnet's ``e2e_asr_transformer.py``: ``make_pad_mask``,
``Conv2dSubsampling`` (the mask subsampled with ``[:, :, :-2:2][:, :, :-2:2]``),
``PositionalEncoding``, ``MultiHeadedAttention`` with ``forward_qkv`` / ``forward_attention``,
``EncoderLayer`` / ``DecoderLayer``, ``subsequent_mask`` / ``target_mask``, the sos / eos
targets, label-smoothed attention loss, CTC and the ``mtlalpha`` interpolation, and
``Speech2Text`` with a ``dtype`` option for greedy attention decoding.

Source: NVIDIA/apex#1052 and facebookresearch/fairseq#3575 (conventions.md §3 item 18),
huggingface/lerobot PR #710 (conventions.md §3 item 19), conventions.md §2.3.
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

TOKENS = ["<blank>", "a", "e", "i", "o", "u", "k", "s", "t", "<sos/eos>"]


@dataclass
class ASRConfig:
    idim: int = 20
    adim: int = 64
    aheads: int = 4
    eunits: int = 128
    elayers: int = 2
    dlayers: int = 1
    odim: int = len(TOKENS)
    mtlalpha: float = 0.3
    lsm_weight: float = 0.1
    ignore_id: int = -1


def make_pad_mask(lengths: torch.Tensor, maxlen: int | None = None) -> torch.Tensor:
    maxlen = int(lengths.max()) if maxlen is None else maxlen
    return torch.arange(maxlen, device=lengths.device)[None, :] >= lengths[:, None]


def subsequent_mask(size: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


def target_mask(ys_in_pad: torch.Tensor, ignore_id: int) -> torch.Tensor:
    ys_mask = ys_in_pad != ignore_id
    return ys_mask.unsqueeze(-2) & subsequent_mask(ys_mask.size(-1), ys_in_pad.device).unsqueeze(0)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 256):
        super().__init__()
        self.xscale = math.sqrt(d_model)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.xscale + self.pe[:, : x.size(1)].to(x.dtype)


class Conv2dSubsampling(nn.Module):
    def __init__(self, idim: int, odim: int):
        super().__init__()
        layers = [nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)
        self.pos_enc = PositionalEncoding(odim)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.pos_enc(self.out(x.transpose(1, 2).contiguous().view(b, t, c * f)))
        return x, x_mask[:, :, :-2:2][:, :, :-2:2]


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float = 0.0):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
            self.attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            self.attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(self.dropout(self.attn), value)
        return self.linear_out(x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k))

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class PositionwiseFeedForward(nn.Sequential):
    def __init__(self, idim: int, hidden_units: int):
        super().__init__(nn.Linear(idim, hidden_units), nn.ReLU(), nn.Linear(hidden_units, idim))


class EncoderLayer(nn.Module):
    def __init__(self, size: int, self_attn: nn.Module, feed_forward: nn.Module):
        super().__init__()
        self.self_attn, self.feed_forward = self_attn, feed_forward
        self.norm1, self.norm2 = nn.LayerNorm(size), nn.LayerNorm(size)

    def forward(self, x, mask):
        residual = x
        x = self.norm1(x)
        x = residual + self.self_attn(x, x, x, mask)
        return x + self.feed_forward(self.norm2(x)), mask


class DecoderLayer(nn.Module):
    def __init__(self, size: int, self_attn, src_attn, feed_forward):
        super().__init__()
        self.self_attn, self.src_attn, self.feed_forward = self_attn, src_attn, feed_forward
        self.norm1, self.norm2 = nn.LayerNorm(size), nn.LayerNorm(size)
        self.norm3 = nn.LayerNorm(size)

    def forward(self, tgt, tgt_mask, memory, memory_mask):
        q = self.norm1(tgt)
        x = tgt + self.self_attn(q, q, q, tgt_mask)
        x = x + self.src_attn(self.norm2(x), memory, memory, memory_mask)
        return x + self.feed_forward(self.norm3(x)), tgt_mask, memory, memory_mask


class E2E(nn.Module):
    def __init__(self, cfg: ASRConfig):
        super().__init__()
        self.cfg, self.sos, self.eos = cfg, cfg.odim - 1, cfg.odim - 1
        self.embed = Conv2dSubsampling(cfg.idim, cfg.adim)
        d, h = cfg.adim, cfg.aheads
        self.encoders = nn.ModuleList(
            EncoderLayer(d, MultiHeadedAttention(h, d), PositionwiseFeedForward(d, cfg.eunits))
            for _ in range(cfg.elayers)
        )
        self.after_norm = nn.LayerNorm(d)
        self.dec_embed = nn.Sequential(nn.Embedding(cfg.odim, d), PositionalEncoding(d))
        self.decoders = nn.ModuleList()
        for _ in range(cfg.dlayers):
            src_attn, ffn = MultiHeadedAttention(h, d), PositionwiseFeedForward(d, cfg.eunits)
            self.decoders.append(DecoderLayer(d, MultiHeadedAttention(h, d), src_attn, ffn))
        self.dec_norm, self.output_layer = nn.LayerNorm(cfg.adim), nn.Linear(cfg.adim, cfg.odim)
        self.ctc_lo = nn.Linear(cfg.adim, cfg.odim)

    def encode(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        src_mask = (~make_pad_mask(ilens, xs_pad.size(1)))[:, None, :]
        hs_pad, hs_mask = self.embed(xs_pad, src_mask)
        for layer in self.encoders:
            hs_pad, hs_mask = layer(hs_pad, hs_mask)
        return self.after_norm(hs_pad), hs_mask

    def decode(self, ys_in_pad, memory, memory_mask):
        x = self.dec_embed(ys_in_pad)
        tgt_mask = target_mask(ys_in_pad, self.cfg.ignore_id)
        for layer in self.decoders:
            x, tgt_mask, memory, memory_mask = layer(x, tgt_mask, memory, memory_mask)
        return self.output_layer(self.dec_norm(x))

    def forward(self, xs_pad, ilens, ys_pad):
        hs_pad, hs_mask = self.encode(xs_pad, ilens)
        ys = [y[y != self.cfg.ignore_id] for y in ys_pad]
        sos, eos = ys[0].new_tensor([self.sos]), ys[0].new_tensor([self.eos])
        ys_in = pad_sequence([torch.cat([sos, y]) for y in ys], True, self.eos)
        ys_out = pad_sequence([torch.cat([y, eos]) for y in ys], True, self.cfg.ignore_id)
        logits = self.decode(ys_in, hs_pad, hs_mask).transpose(1, 2)
        lsm = self.cfg.lsm_weight
        loss_att = F.cross_entropy(logits, ys_out, ignore_index=-1, label_smoothing=lsm)
        log_probs = self.ctc_lo(hs_pad).log_softmax(-1).transpose(0, 1)
        hlens, olens = hs_mask.squeeze(1).sum(1), torch.tensor([len(y) for y in ys])
        loss_ctc = F.ctc_loss(log_probs, torch.cat(ys), hlens, olens, zero_infinity=True)
        return self.cfg.mtlalpha * loss_ctc + (1 - self.cfg.mtlalpha) * loss_att


class Speech2Text:
    def __init__(self, model: E2E, dtype: str = "float32", maxlen: int = 12):
        self.model = model.to(dtype=getattr(torch, dtype)).eval()
        self.dtype, self.maxlen = getattr(torch, dtype), maxlen

    @torch.no_grad()
    def __call__(self, speech: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
        memory, memory_mask = self.model.encode(speech.to(self.dtype), lengths)
        ys = torch.full((speech.size(0), 1), self.model.sos)
        for _ in range(self.maxlen):
            logits = self.model.decode(ys, memory, memory_mask)[:, -1]
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
        eos = self.model.eos
        return [row[: row.index(eos)] if eos in row else row for row in ys[:, 1:].tolist()]


def synth_utterances(rng: random.Random, prototypes: torch.Tensor, n: int):
    ys, feats = [], []
    for _ in range(n):
        y = [rng.randint(1, len(TOKENS) - 2) for _ in range(rng.randint(2, 6))]
        frames = [
            prototypes[t] + 0.3 * torch.randn(rng.randint(6, 10), prototypes.shape[1]) for t in y
        ]
        ys.append(torch.tensor(y))
        feats.append(torch.cat(frames))
    ilens = torch.tensor([len(f) for f in feats])
    return pad_sequence(feats, batch_first=True), ilens, pad_sequence(ys, True, padding_value=-1)


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), ASRConfig()
    prototypes = torch.randn(len(TOKENS), cfg.idim)
    model = E2E(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        loss = model(*synth_utterances(rng, prototypes, 16))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    xs_pad, ilens, ys_pad = synth_utterances(rng, prototypes, 32)
    refs = [y[y != -1].tolist() for y in ys_pad]
    for dtype in ("float32", "float16"):
        hyps = Speech2Text(model, dtype=dtype)(xs_pad, ilens)
        acc = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
        print(f"{dtype}: sentence accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
