"""Conformer encoder with CTC for speech recognition (ESPnet / WeNet layout).

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet),
seed self_attention_mask_guide.txt §7 Q1, seed masked_fill_inplace.txt (作用).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ConformerConfig:
    idim: int = 20
    odim: int = 12
    attention_dim: int = 64
    attention_heads: int = 4
    linear_units: int = 128
    num_blocks: int = 2
    cnn_module_kernel: int = 7
    dropout_rate: float = 0.1
    blank_id: int = 0


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    max_len = max(max_len, int(lengths.max()))
    seq_range = torch.arange(max_len, device=lengths.device)
    return seq_range[None, :] >= lengths[:, None]


class Conv2dSubsampling4(nn.Module):
    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU()
        )
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, x_mask[:, :, 2::2][:, :, 2::2]


class RelPositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.xscale = math.sqrt(d_model)
        pos = torch.arange(max_len - 1, -max_len, -1.0).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe = torch.zeros(2 * max_len - 1, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)
        self.max_len = max_len

    def forward(self, x: torch.Tensor):
        t = x.size(1)
        center = self.max_len - 1
        return x * self.xscale, self.pe[:, center - t + 1 : center + t]


class RelPositionMultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float) -> None:
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.dropout = nn.Dropout(dropout_rate)

    @staticmethod
    def rel_shift(x: torch.Tensor) -> torch.Tensor:
        b, h, t1, t2 = x.size()
        x = F.pad(x, (1, 0)).view(b, h, t2 + 1, t1)[:, :, 1:].view(b, h, t1, t2)
        return x[:, :, :, : t2 // 2 + 1]

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(~mask.unsqueeze(1), min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(~mask.unsqueeze(1), 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(self.dropout(attn), value)
        return self.linear_out(x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k))

    def forward(self, query, key, value, mask, pos_emb):
        b = query.size(0)
        q = self.linear_q(query).view(b, -1, self.h, self.d_k)
        k = self.linear_k(key).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(b, -1, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(1, -1, self.h, self.d_k).transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul(q_with_bias_v, p.transpose(-2, -1)))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class ConvolutionModule(nn.Module):
    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(
            channels, channels, kernel_size, padding=(kernel_size - 1) // 2, groups=channels
        )
        self.norm = nn.BatchNorm1d(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor, mask_pad: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2).masked_fill(~mask_pad, 0.0)
        x = F.glu(self.pointwise_conv1(x), dim=1).masked_fill(~mask_pad, 0.0)
        x = F.silu(self.norm(self.depthwise_conv(x)))
        x = self.pointwise_conv2(x).masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2)


class ConformerEncoderLayer(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.attention_dim

        def ffn() -> nn.Module:
            return nn.Sequential(
                nn.Linear(d, cfg.linear_units),
                nn.SiLU(),
                nn.Dropout(cfg.dropout_rate),
                nn.Linear(cfg.linear_units, d),
            )

        self.feed_forward_macaron, self.feed_forward = ffn(), ffn()
        self.self_attn = RelPositionMultiHeadedAttention(cfg.attention_heads, d, cfg.dropout_rate)
        self.conv_module = ConvolutionModule(d, cfg.cnn_module_kernel)
        self.norm_ff_macaron, self.norm_mha = nn.LayerNorm(d), nn.LayerNorm(d)
        self.norm_conv, self.norm_ff, self.norm_final = (
            nn.LayerNorm(d),
            nn.LayerNorm(d),
            nn.LayerNorm(d),
        )
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, x, mask, pos_emb):
        x = x + 0.5 * self.dropout(self.feed_forward_macaron(self.norm_ff_macaron(x)))
        xn = self.norm_mha(x)
        x = x + self.dropout(self.self_attn(xn, xn, xn, mask, pos_emb))
        x = x + self.dropout(self.conv_module(self.norm_conv(x), mask))
        x = x + 0.5 * self.dropout(self.feed_forward(self.norm_ff(x)))
        return self.norm_final(x), mask


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.embed = Conv2dSubsampling4(cfg.idim, cfg.attention_dim)
        self.pos_enc = RelPositionalEncoding(cfg.attention_dim)
        self.encoders = nn.ModuleList(ConformerEncoderLayer(cfg) for _ in range(cfg.num_blocks))

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        masks = ~make_pad_mask(ilens, xs_pad.size(1))[:, None, :]
        xs, masks = self.embed(xs_pad, masks)
        xs, pos_emb = self.pos_enc(xs)
        for layer in self.encoders:
            xs, masks = layer(xs, masks, pos_emb)
        return xs, masks.squeeze(1).sum(1)


class CTCModel(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ConformerEncoder(cfg)
        self.ctc_lo = nn.Linear(cfg.attention_dim, cfg.odim)

    def forward(self, speech, speech_lengths, text, text_lengths):
        hs, hlens = self.encoder(speech, speech_lengths)
        log_probs = self.ctc_lo(hs).log_softmax(-1).transpose(0, 1)
        return F.ctc_loss(
            log_probs,
            text,
            hlens,
            text_lengths,
            blank=self.cfg.blank_id,
            reduction="mean",
            zero_infinity=True,
        )

    @torch.no_grad()
    def ctc_greedy_search(self, speech, speech_lengths) -> list[list[int]]:
        hs, hlens = self.encoder(speech, speech_lengths)
        best = self.ctc_lo(hs).argmax(-1)
        hyps = []
        for seq, n in zip(best.tolist(), hlens.tolist(), strict=True):
            prev, out = self.cfg.blank_id, []
            for tok in seq[:n]:
                if tok != prev and tok != self.cfg.blank_id:
                    out.append(tok)
                prev = tok
            hyps.append(out)
        return hyps


def edit_distance(a: list[int], b: list[int]) -> int:
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


def synth_batch(cfg: ConformerConfig, n: int, gen: torch.Generator, protos: torch.Tensor):
    feats, ilens, texts = [], [], []
    for _ in range(n):
        toks = torch.randint(
            1, cfg.odim, (int(torch.randint(3, 8, (1,), generator=gen)),), generator=gen
        )
        frames = [
            protos[t].expand(int(torch.randint(6, 10, (1,), generator=gen)), -1) for t in toks
        ]
        x = torch.cat(frames) + 0.3 * torch.randn(
            sum(f.shape[0] for f in frames), cfg.idim, generator=gen
        )
        feats.append(x), ilens.append(x.shape[0]), texts.append(toks)
    xs_pad = nn.utils.rnn.pad_sequence(feats, batch_first=True)
    ys_pad = nn.utils.rnn.pad_sequence(texts, batch_first=True, padding_value=0)
    return xs_pad, torch.tensor(ilens), ys_pad, torch.tensor([len(t) for t in texts])


if __name__ == "__main__":
    torch.manual_seed(0)
    config = ConformerConfig()
    gen = torch.Generator().manual_seed(0)
    prototypes = torch.randn(config.odim, config.idim, generator=gen)
    model = CTCModel(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(120):
        batch = synth_batch(config, 16, gen, prototypes)
        loss = model(*batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        if step % 40 == 0:
            print(f"step {step} ctc {loss.item():.3f}")
    model.eval()
    xs, ilens, ys, ylens = synth_batch(config, 32, gen, prototypes)
    hyps = model.ctc_greedy_search(xs, ilens)
    errs = sum(edit_distance(h, y[:n].tolist()) for h, y, n in zip(hyps, ys, ylens, strict=True))
    print(f"token error rate {errs / ylens.sum().item():.3f}")
    shortest = int(ilens.argmin())
    alone, _ = model.encoder(
        xs[shortest : shortest + 1, : ilens[shortest]], ilens[shortest : shortest + 1]
    )
    batched, _ = model.encoder(xs, ilens)
    print("alone vs batched", (alone[0] - batched[shortest, : alone.shape[1]]).abs().max().item())
