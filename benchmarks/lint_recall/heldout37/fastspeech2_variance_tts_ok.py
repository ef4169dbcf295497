"""FastSpeech 2 acoustic model with a duration / pitch / energy variance adaptor (ming024 layout).

Source: conventions.md §1 (HF 4.x AttentionMaskConverter row) and §2.9,
huggingface/transformers#32195 (conventions.md §3 item 25),
seed self_attention_mask_guide.txt §7 Q5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class FS2Config:
    n_symbols: int = 40
    encoder_hidden: int = 64
    decoder_hidden: int = 64
    encoder_layer: int = 2
    decoder_layer: int = 2
    encoder_head: int = 2
    conv_filter_size: int = 128
    conv_kernel_size: tuple[int, int] = (9, 1)
    dropout: float = 0.1
    n_mel_channels: int = 20
    n_bins: int = 16
    max_seq_len: int = 400


def get_mask_from_lengths(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    batch_size = lengths.shape[0]
    if max_len is None:
        max_len = int(torch.max(lengths).item())
    ids = torch.arange(0, max_len, device=lengths.device).unsqueeze(0).expand(batch_size, -1)
    return ids >= lengths.unsqueeze(1).expand(-1, max_len)


def get_sinusoid_encoding_table(n_position: int, d_hid: int) -> torch.Tensor:
    pos = np.arange(n_position)[:, None]
    table = pos / np.power(10000, 2 * (np.arange(d_hid)[None, :] // 2) / d_hid)
    table[:, 0::2], table[:, 1::2] = np.sin(table[:, 0::2]), np.cos(table[:, 1::2])
    return torch.FloatTensor(table)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.n_head, self.d_k = n_head, d_model // n_head
        self.w_qs, self.w_ks = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_vs, self.fc = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.layer_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        residual, (sz_b, len_q, _) = q, q.size()
        q = self.w_qs(q).view(sz_b, len_q, self.n_head, self.d_k).transpose(1, 2)
        k = self.w_ks(k).view(sz_b, -1, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_vs(v).view(sz_b, -1, self.n_head, self.d_k).transpose(1, 2)
        attn = torch.matmul(q, k.transpose(-1, -2)) / np.power(self.d_k, 0.5)
        if mask is not None:
            attn = attn.masked_fill(mask.unsqueeze(1), -np.inf)
        attn = self.dropout(torch.softmax(attn, dim=-1))
        output = torch.matmul(attn, v).transpose(1, 2).reshape(sz_b, len_q, -1)
        return self.layer_norm(self.dropout(self.fc(output)) + residual), attn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_in: int, d_hid: int, kernel_size: tuple[int, int], dropout: float) -> None:
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, kernel_size[0], padding=(kernel_size[0] - 1) // 2)
        self.w_2 = nn.Conv1d(d_hid, d_in, kernel_size[1], padding=(kernel_size[1] - 1) // 2)
        self.layer_norm = nn.LayerNorm(d_in)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.layer_norm(self.dropout(out) + x)


class FFTBlock(nn.Module):
    def __init__(self, cfg: FS2Config) -> None:
        super().__init__()
        d = cfg.encoder_hidden
        self.slf_attn = MultiHeadAttention(cfg.encoder_head, d, cfg.dropout)
        self.pos_ffn = PositionwiseFeedForward(
            d, cfg.conv_filter_size, cfg.conv_kernel_size, cfg.dropout
        )

    def forward(self, enc_input, mask=None, slf_attn_mask=None):
        enc_output, enc_slf_attn = self.slf_attn(
            enc_input, enc_input, enc_input, mask=slf_attn_mask
        )
        enc_output = enc_output.masked_fill(mask.unsqueeze(-1), 0)
        enc_output = self.pos_ffn(enc_output).masked_fill(mask.unsqueeze(-1), 0)
        return enc_output, enc_slf_attn


class FFTStack(nn.Module):
    def __init__(self, cfg: FS2Config, n_layers: int, embed_symbols: bool) -> None:
        super().__init__()
        self.src_word_emb = (
            nn.Embedding(cfg.n_symbols, cfg.encoder_hidden, padding_idx=0)
            if embed_symbols
            else None
        )
        table = get_sinusoid_encoding_table(cfg.max_seq_len + 1, cfg.encoder_hidden)
        self.register_buffer("position_enc", table.unsqueeze(0), persistent=False)
        self.layer_stack = nn.ModuleList(FFTBlock(cfg) for _ in range(n_layers))

    def forward(self, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch_size, max_len = mask.shape
        slf_attn_mask = mask.unsqueeze(1).expand(-1, max_len, -1)
        x = self.src_word_emb(seq) if self.src_word_emb is not None else seq
        x = x + self.position_enc[:, :max_len].expand(batch_size, -1, -1)
        for layer in self.layer_stack:
            x, _ = layer(x, mask=mask, slf_attn_mask=slf_attn_mask)
        return x


class VariancePredictor(nn.Module):
    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv1d(d, d, 3, padding=1), nn.Conv1d(d, d, 3, padding=1)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)
        self.linear_layer = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.ln1(F.relu(self.conv1(x.transpose(1, 2)).transpose(1, 2))))
        x = self.dropout(self.ln2(F.relu(self.conv2(x.transpose(1, 2)).transpose(1, 2))))
        return self.linear_layer(x).squeeze(-1).masked_fill(mask, 0.0)


class LengthRegulator(nn.Module):
    def forward(self, x: torch.Tensor, duration: torch.Tensor, max_len: int | None):
        output = [
            torch.repeat_interleave(xb, db.clamp(min=0), dim=0)
            for xb, db in zip(x, duration, strict=True)
        ]
        mel_len = torch.tensor([o.shape[0] for o in output], device=x.device)
        out = nn.utils.rnn.pad_sequence(output, batch_first=True)
        if max_len is not None and out.shape[1] < max_len:
            out = F.pad(out, (0, 0, 0, max_len - out.shape[1]))
        return out, mel_len


class VarianceAdaptor(nn.Module):
    def __init__(self, cfg: FS2Config) -> None:
        super().__init__()
        d = cfg.encoder_hidden
        self.duration_predictor = VariancePredictor(d, cfg.dropout)
        self.length_regulator = LengthRegulator()
        self.pitch_predictor = VariancePredictor(d, cfg.dropout)
        self.energy_predictor = VariancePredictor(d, cfg.dropout)
        self.register_buffer(
            "pitch_bins", torch.linspace(-2.0, 2.0, cfg.n_bins - 1), persistent=False
        )
        self.register_buffer(
            "energy_bins", torch.linspace(-2.0, 2.0, cfg.n_bins - 1), persistent=False
        )
        self.pitch_embedding = nn.Embedding(cfg.n_bins, d)
        self.energy_embedding = nn.Embedding(cfg.n_bins, d)

    def forward(self, x, src_mask, max_mel_len=None, p_target=None, e_target=None, d_target=None):
        log_d_prediction = self.duration_predictor(x, src_mask)
        pitch_prediction = self.pitch_predictor(x, src_mask)
        pitch = p_target if p_target is not None else pitch_prediction
        x = x + self.pitch_embedding(torch.bucketize(pitch, self.pitch_bins))
        energy_prediction = self.energy_predictor(x, src_mask)
        energy = e_target if e_target is not None else energy_prediction
        x = x + self.energy_embedding(torch.bucketize(energy, self.energy_bins))
        if d_target is not None:
            duration_rounded = d_target
        else:
            duration_rounded = torch.clamp(
                torch.round(torch.exp(log_d_prediction) - 1), min=0
            ).long()
            duration_rounded = duration_rounded.masked_fill(src_mask, 0)
        x, mel_len = self.length_regulator(x, duration_rounded, max_mel_len)
        mel_mask = get_mask_from_lengths(mel_len, x.shape[1])
        return x, pitch_prediction, energy_prediction, log_d_prediction, mel_len, mel_mask


class FastSpeech2(nn.Module):
    def __init__(self, cfg: FS2Config) -> None:
        super().__init__()
        self.encoder = FFTStack(cfg, cfg.encoder_layer, embed_symbols=True)
        self.variance_adaptor = VarianceAdaptor(cfg)
        self.decoder = FFTStack(cfg, cfg.decoder_layer, embed_symbols=False)
        self.mel_linear = nn.Linear(cfg.decoder_hidden, cfg.n_mel_channels)

    def forward(
        self,
        texts,
        src_lens,
        max_src_len,
        mel_lens=None,
        max_mel_len=None,
        p_targets=None,
        e_targets=None,
        d_targets=None,
    ):
        src_masks = get_mask_from_lengths(src_lens, max_src_len)
        output = self.encoder(texts, src_masks)
        output, p_pred, e_pred, log_d_pred, mel_lens, mel_masks = self.variance_adaptor(
            output, src_masks, max_mel_len, p_targets, e_targets, d_targets
        )
        output = self.mel_linear(self.decoder(output, mel_masks))
        return output, p_pred, e_pred, log_d_pred, src_masks, mel_masks, mel_lens


class FastSpeech2Loss(nn.Module):
    def forward(self, batch, predictions):
        mel_targets, pitch_targets, energy_targets, duration_targets = batch[4:8]
        mel_pred, p_pred, e_pred, log_d_pred, src_masks, mel_masks, _ = predictions
        src_masks, mel_masks = ~src_masks, ~mel_masks
        log_d_targets = torch.log(duration_targets.float() + 1)
        mel_loss = F.l1_loss(
            mel_pred.masked_select(mel_masks.unsqueeze(-1)),
            mel_targets.masked_select(mel_masks.unsqueeze(-1)),
        )
        pitch_loss = F.mse_loss(
            p_pred.masked_select(src_masks), pitch_targets.masked_select(src_masks)
        )
        energy_loss = F.mse_loss(
            e_pred.masked_select(src_masks), energy_targets.masked_select(src_masks)
        )
        duration_loss = F.mse_loss(
            log_d_pred.masked_select(src_masks), log_d_targets.masked_select(src_masks)
        )
        return mel_loss + pitch_loss + energy_loss + duration_loss


def synth_batch(cfg: FS2Config, n: int, gen: torch.Generator, protos: torch.Tensor):
    items = []
    for _ in range(n):
        t = int(torch.randint(4, 12, (1,), generator=gen))
        text = torch.randint(1, cfg.n_symbols, (t,), generator=gen)
        dur = 1 + text % 4
        pitch, energy = torch.tanh(protos[text, 0]), torch.tanh(protos[text, 1])
        mel = torch.repeat_interleave(protos[text] + pitch[:, None], dur, dim=0)
        items.append((text, mel, pitch, energy, dur))
    src_lens = torch.tensor([len(i[0]) for i in items])
    mel_lens = torch.tensor([i[1].shape[0] for i in items])

    def pad(k: int) -> torch.Tensor:
        return nn.utils.rnn.pad_sequence([i[k] for i in items], batch_first=True)

    return (pad(0), src_lens, int(src_lens.max()), mel_lens, pad(1), pad(2), pad(3), pad(4))


if __name__ == "__main__":
    torch.manual_seed(0)
    config = FS2Config()
    gen = torch.Generator().manual_seed(0)
    prototypes = torch.randn(config.n_symbols, config.n_mel_channels, generator=gen)
    model, loss_fn = FastSpeech2(config), FastSpeech2Loss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    for step in range(120):
        batch = synth_batch(config, 16, gen, prototypes)
        texts, src_lens, max_src_len, mel_lens, mels, pitches, energies, durations = batch
        preds = model(
            texts, src_lens, max_src_len, mel_lens, mels.shape[1], pitches, energies, durations
        )
        loss = loss_fn((None, None, None, None, mels, pitches, energies, durations), preds)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 40 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    texts, src_lens, max_src_len, *_ = synth_batch(config, 4, gen, prototypes)
    with torch.no_grad():
        mel, *_, mel_lens = model(texts, src_lens, max_src_len)
        alone, *_ = model(texts[:1, : src_lens[0]], src_lens[:1], int(src_lens[0]))
    print("mel lengths", mel_lens.tolist())
    n = min(alone.shape[1], int(mel_lens[0]))
    print("alone vs batched", (alone[0, :n] - mel[0, :n]).abs().max().item())
