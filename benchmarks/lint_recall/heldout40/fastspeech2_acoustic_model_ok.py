"""FastSpeech 2 acoustic model: phonemes to mel-spectrogram frames with a variance adaptor.

The layout is ming024/FastSpeech2's (``transformer/Modules.py``, ``transformer/SubLayers.py``,
``transformer/Layers.py``, ``model/modules.py``, ``utils/tools.py``): ``ScaledDotProductAttention``
and ``MultiHeadAttention`` over ``bmm`` with the mask repeated per head, ``FFTBlock`` with the
convolutional position-wise feed-forward, ``get_mask_from_lengths``, ``VariancePredictor`` for
log-duration, pitch and energy, ``LengthRegulator`` and ``FastSpeech2Loss``. The corpus is a toy
one: each phoneme has its own spectral envelope, duration, pitch and energy.

Source: seed masked_fill_inplace.txt (区别, 非原地操作)
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_PHONEMES, N_MEL = 24, 20


def get_mask_from_lengths(lengths, max_len=None):
    batch_size = lengths.shape[0]
    if max_len is None:
        max_len = torch.max(lengths).item()
    ids = torch.arange(0, max_len, device=lengths.device).unsqueeze(0).expand(batch_size, -1)
    return ids >= lengths.unsqueeze(1).expand(-1, max_len)


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature
        self.softmax = nn.Softmax(dim=2)

    def forward(self, q, k, v, mask=None):
        attn = torch.bmm(q, k.transpose(1, 2))
        attn = attn / self.temperature
        if mask is not None:
            attn = attn.masked_fill(mask, -np.inf)
        attn = self.softmax(attn)
        return torch.bmm(attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k)
        self.w_ks = nn.Linear(d_model, n_head * d_k)
        self.w_vs = nn.Linear(d_model, n_head * d_v)
        self.attention = ScaledDotProductAttention(temperature=np.power(d_k, 0.5))
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(n_head * d_v, d_model)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x, w, d):
        sz_b, length, _ = x.size()
        return w(x).view(sz_b, length, self.n_head, d).permute(2, 0, 1, 3).reshape(-1, length, d)

    def forward(self, q, k, v, mask=None):
        sz_b, len_q, _ = q.size()
        residual = q
        q = self.split_heads(q, self.w_qs, self.d_k)
        k = self.split_heads(k, self.w_ks, self.d_k)
        v = self.split_heads(v, self.w_vs, self.d_v)
        mask = mask.repeat(self.n_head, 1, 1)
        output, attn = self.attention(q, k, v, mask=mask)
        output = (
            output.view(self.n_head, sz_b, len_q, self.d_v)
            .permute(1, 2, 0, 3)
            .reshape(sz_b, len_q, -1)
        )
        return self.layer_norm(self.dropout(self.fc(output)) + residual), attn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_in, d_hid, kernel_size=(9, 1), dropout=0.1):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, kernel_size[0], padding=(kernel_size[0] - 1) // 2)
        self.w_2 = nn.Conv1d(d_hid, d_in, kernel_size[1], padding=(kernel_size[1] - 1) // 2)
        self.layer_norm = nn.LayerNorm(d_in)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        output = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.layer_norm(self.dropout(output) + x)


class FFTBlock(nn.Module):
    def __init__(self, d_model, n_head, d_inner, dropout=0.1):
        super().__init__()
        self.slf_attn = MultiHeadAttention(
            n_head, d_model, d_model // n_head, d_model // n_head, dropout
        )
        self.pos_ffn = PositionwiseFeedForward(d_model, d_inner, dropout=dropout)

    def forward(self, enc_input, mask=None, slf_attn_mask=None):
        enc_output, _ = self.slf_attn(enc_input, enc_input, enc_input, mask=slf_attn_mask)
        enc_output = enc_output.masked_fill(mask.unsqueeze(-1), 0)
        enc_output = self.pos_ffn(enc_output)
        return enc_output.masked_fill(mask.unsqueeze(-1), 0)


def get_sinusoid_encoding_table(n_position, d_hid):
    position = np.arange(n_position)[:, None] / np.power(10000, 2 * (np.arange(d_hid) // 2) / d_hid)
    table = np.zeros((n_position, d_hid))
    table[:, 0::2], table[:, 1::2] = np.sin(position[:, 0::2]), np.cos(position[:, 1::2])
    return torch.FloatTensor(table)


class FFTStack(nn.Module):
    def __init__(self, d_model=64, n_layers=2, n_head=2, d_inner=128, max_seq_len=400):
        super().__init__()
        self.register_buffer("position_enc", get_sinusoid_encoding_table(max_seq_len, d_model))
        self.layer_stack = nn.ModuleList(
            [FFTBlock(d_model, n_head, d_inner) for _ in range(n_layers)]
        )

    def forward(self, x, mask):
        slf_attn_mask = mask.unsqueeze(1).expand(-1, x.shape[1], -1)
        x = x + self.position_enc[: x.shape[1]].unsqueeze(0)
        for layer in self.layer_stack:
            x = layer(x, mask=mask, slf_attn_mask=slf_attn_mask)
        return x


class VariancePredictor(nn.Module):
    def __init__(self, d_model=64, kernel=3):
        super().__init__()
        self.conv1 = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2)
        self.ln1 = nn.LayerNorm(d_model)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2)
        self.ln2 = nn.LayerNorm(d_model)
        self.linear_layer = nn.Linear(d_model, 1)

    def forward(self, x, mask):
        x = self.ln1(F.relu(self.conv1(x.transpose(1, 2))).transpose(1, 2))
        x = self.ln2(F.relu(self.conv2(x.transpose(1, 2))).transpose(1, 2))
        return self.linear_layer(x).squeeze(-1).masked_fill(mask, 0.0)


class LengthRegulator(nn.Module):
    def forward(self, x, duration, max_len):
        output = [torch.repeat_interleave(x_i, d_i, dim=0) for x_i, d_i in zip(x, duration)]
        mel_len = torch.tensor([o.shape[0] for o in output])
        output = torch.stack([F.pad(o, (0, 0, 0, max_len - o.shape[0])) for o in output])
        return output, mel_len


class FastSpeech2(nn.Module):
    def __init__(self, d_model=64):
        super().__init__()
        self.src_word_emb = nn.Embedding(N_PHONEMES + 1, d_model, padding_idx=0)
        self.encoder, self.decoder = FFTStack(d_model), FFTStack(d_model)
        self.duration_predictor = VariancePredictor(d_model)
        self.pitch_predictor = VariancePredictor(d_model)
        self.energy_predictor = VariancePredictor(d_model)
        self.pitch_embedding = nn.Linear(1, d_model)
        self.energy_embedding = nn.Linear(1, d_model)
        self.length_regulator = LengthRegulator()
        self.mel_linear = nn.Linear(d_model, N_MEL)

    def forward(self, texts, src_lens, max_src_len, d_targets, p_targets, e_targets, max_mel_len):
        src_masks = get_mask_from_lengths(src_lens, max_src_len)
        output = self.encoder(self.src_word_emb(texts), src_masks)
        log_d_predictions = self.duration_predictor(output, src_masks)
        p_predictions = self.pitch_predictor(output, src_masks)
        e_predictions = self.energy_predictor(output, src_masks)
        output = (
            output
            + self.pitch_embedding(p_targets[..., None])
            + self.energy_embedding(e_targets[..., None])
        )
        output, mel_lens = self.length_regulator(output, d_targets, max_mel_len)
        mel_masks = get_mask_from_lengths(mel_lens, max_mel_len)
        output = self.mel_linear(self.decoder(output, mel_masks))
        return output, p_predictions, e_predictions, log_d_predictions, src_masks, mel_masks


def fastspeech2_loss(inputs, predictions):
    mel_targets, d_targets, p_targets, e_targets = inputs
    mel_predictions, p_predictions, e_predictions, log_d_predictions, src_masks, mel_masks = (
        predictions
    )
    src_keep, mel_keep = ~src_masks, ~mel_masks
    mel_loss = F.l1_loss(mel_predictions[mel_keep], mel_targets[mel_keep])
    pitch_loss = F.mse_loss(p_predictions[src_keep], p_targets[src_keep])
    energy_loss = F.mse_loss(e_predictions[src_keep], e_targets[src_keep])
    duration_loss = F.mse_loss(
        log_d_predictions[src_keep], torch.log(d_targets.float() + 1)[src_keep]
    )
    return mel_loss + pitch_loss + energy_loss + duration_loss, mel_loss


def make_batch(n, rng, envelopes):
    src_lens = rng.integers(4, 12, n)
    max_src_len = int(src_lens.max())
    texts = np.zeros((n, max_src_len), dtype=np.int64)
    durations = np.zeros((n, max_src_len), dtype=np.int64)
    for i, length in enumerate(src_lens):
        texts[i, :length] = rng.integers(1, N_PHONEMES + 1, length)
        durations[i, :length] = 1 + texts[i, :length] % 4
    texts, durations = torch.from_numpy(texts), torch.from_numpy(durations)
    pitch = torch.sin(texts.float()).masked_fill(texts == 0, 0.0)
    energy = torch.cos(texts.float()).masked_fill(texts == 0, 0.0)
    frames = [
        torch.repeat_interleave(envelopes[t[t > 0]], d[t > 0], dim=0)
        for t, d in zip(texts, durations)
    ]
    max_mel_len = max(f.shape[0] for f in frames)
    mels = torch.stack([F.pad(f, (0, 0, 0, max_mel_len - f.shape[0])) for f in frames])
    return (
        texts,
        torch.from_numpy(src_lens),
        max_src_len,
        durations,
        pitch,
        energy,
        mels,
        max_mel_len,
    )


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    envelopes = torch.randn(N_PHONEMES + 1, N_MEL)
    model = FastSpeech2()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    for step in range(200):
        texts, src_lens, max_src_len, d, p, e, mels, max_mel_len = make_batch(16, rng, envelopes)
        predictions = model(texts, src_lens, max_src_len, d, p, e, max_mel_len)
        loss, mel_loss = fastspeech2_loss((mels, d, p, e), predictions)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 49:
            print(f"step {step} total {loss.item():.4f} mel L1 {mel_loss.item():.4f}")
    model.eval()
    texts, src_lens, max_src_len, d, p, e, mels, max_mel_len = make_batch(8, rng, envelopes)
    with torch.no_grad():
        batch_out = model(texts, src_lens, max_src_len, d, p, e, max_mel_len)[0]
        n, m = int(src_lens[0]), int(d[0].sum())
        alone = model(texts[:1, :n], src_lens[:1], n, d[:1, :n], p[:1, :n], e[:1, :n], m)[0]
    print(
        "first utterance alone vs padded in its batch",
        f"{(alone[0] - batch_out[0, :m]).abs().max():.2e}",
    )
