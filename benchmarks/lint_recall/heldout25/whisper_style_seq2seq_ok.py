"""A Whisper-style speech encoder-decoder (log-mel in, text tokens out), eager attention.

Two 1-D convolutions (the second with stride 2) and sinusoidal positions in front of a
pre-norm Transformer encoder; a decoder with learned positions, causal self-attention and
cross-attention to the audio frames; a language-ID head pooling the encoder frames. Batches
are ragged on both sides: audio is right-padded (per-utterance frame counts), decoder prompts
are left-padded for batched prompting. Masks are additive float tensors of shape
(batch, 1, q, kv) holding 0 or torch.finfo(dtype).min, as in the Hugging Face 4.x eager
attention classes; a mask that hides a position for two reasons must still hold finfo.min
there, never a sum of two of them.

Source: huggingface/transformers PR #27114 ([AttentionMaskConverter] fix-mask-inf, a causal
finfo.min plane and a padding finfo.min plane summed into -inf) and NVIDIA-NeMo/Automodel
PR #2658; conventions.md §2.3 and §5 item 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TinyWhisperConfig:
    num_mel_bins: int = 16
    d_model: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 2
    attention_heads: int = 4
    ffn_dim: int = 128
    vocab_size: int = 64
    max_source_positions: int = 64
    max_target_positions: int = 32
    pad_token_id: int = 0
    decoder_start_token_id: int = 1
    num_languages: int = 5


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


def frames_keep(lengths, max_len):
    """(batch, max_len) bool, True for the real frames of each utterance."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def prepare_4d_attention_mask(keep, dtype, tgt_len=None):
    """Padding of the keys only: (batch, 1, tgt_len or 1, src_len), 0 / finfo.min."""
    expanded = ~keep[:, None, None, :]
    if tgt_len is not None:
        expanded = expanded.expand(keep.shape[0], 1, tgt_len, keep.shape[1])
    return torch.zeros(expanded.shape, dtype=dtype, device=keep.device).masked_fill(expanded, torch.finfo(dtype).min)


def prepare_decoder_attention_mask(decoder_attention_mask, dtype):
    """Causal + key padding for the decoder self-attention: (batch, 1, tgt, tgt), 0 / finfo.min."""
    bsz, tgt_len = decoder_attention_mask.shape
    min_value = torch.finfo(dtype).min
    future = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=decoder_attention_mask.device).triu(diagonal=1)
    causal = torch.zeros(tgt_len, tgt_len, dtype=dtype, device=future.device).masked_fill(future, min_value)
    padding = torch.zeros(bsz, 1, 1, tgt_len, dtype=dtype, device=future.device)
    padding = padding.masked_fill(decoder_attention_mask[:, None, None, :] == 0, min_value)
    return torch.minimum(causal[None, None], padding)


class WhisperAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, x):
        bsz, seq_len, _ = x.shape
        return x.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, key_value_states=None, attention_mask=None, return_weights=False):
        source = hidden_states if key_value_states is None else key_value_states
        query = self._shape(self.q_proj(hidden_states) * self.scaling)
        key = self._shape(self.k_proj(source))
        value = self._shape(self.v_proj(source))
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights.float(), dim=-1).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value).transpose(1, 2).flatten(2)
        out = self.out_proj(attn_output)
        return (out, attn_weights) if return_weights else out


class WhisperEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = WhisperAttention(config.d_model, config.attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, hidden_states, attention_mask):
        hidden_states = hidden_states + self.self_attn(self.self_attn_layer_norm(hidden_states), attention_mask=attention_mask)
        return hidden_states + self.fc2(F.gelu(self.fc1(self.final_layer_norm(hidden_states))))


class WhisperDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = WhisperAttention(config.d_model, config.attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = WhisperAttention(config.d_model, config.attention_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask):
        hidden_states = hidden_states + self.self_attn(self.self_attn_layer_norm(hidden_states), attention_mask=attention_mask)
        normed = self.encoder_attn_layer_norm(hidden_states)
        hidden_states = hidden_states + self.encoder_attn(normed, encoder_hidden_states, attention_mask=encoder_attention_mask)
        return hidden_states + self.fc2(F.gelu(self.fc1(self.final_layer_norm(hidden_states))))


class WhisperEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.d_model, config.d_model, kernel_size=3, stride=2, padding=1)
        self.register_buffer("embed_positions", sinusoids(config.max_source_positions, config.d_model), persistent=False)
        self.layers = nn.ModuleList(WhisperEncoderLayer(config) for _ in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)

    @staticmethod
    def output_lengths(input_lengths):
        return (input_lengths - 1) // 2 + 1

    def forward(self, input_features, input_lengths):
        """input_features (batch, mel, frames), zero beyond each utterance's input_lengths."""
        keep_in = frames_keep(input_lengths, input_features.shape[-1])
        hidden = F.gelu(self.conv1(input_features))
        hidden = hidden * keep_in[:, None, :]
        hidden = F.gelu(self.conv2(hidden)).transpose(1, 2)
        lengths = self.output_lengths(input_lengths)
        keep = frames_keep(lengths, hidden.shape[1])
        hidden = hidden + self.embed_positions[: hidden.shape[1]]
        attention_mask = prepare_4d_attention_mask(keep, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask)
        hidden = self.layer_norm(hidden)
        return hidden.masked_fill(~keep[..., None], 0.0), keep


class WhisperDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_positions = nn.Embedding(config.max_target_positions, config.d_model)
        self.layers = nn.ModuleList(WhisperDecoderLayer(config) for _ in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids, decoder_attention_mask, encoder_hidden_states, encoder_keep):
        # left padding: positions count from the first real token
        position_ids = (decoder_attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        self_mask = prepare_decoder_attention_mask(decoder_attention_mask, hidden.dtype)
        cross_mask = prepare_4d_attention_mask(encoder_keep, hidden.dtype, tgt_len=input_ids.shape[1])
        for layer in self.layers:
            hidden = layer(hidden, self_mask, encoder_hidden_states, cross_mask)
        return self.layer_norm(hidden)


def shift_tokens_right(labels, pad_token_id, decoder_start_token_id):
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class TinyWhisperForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.encoder = WhisperEncoder(config)
        self.decoder = WhisperDecoder(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lang_head = nn.Linear(config.d_model, config.num_languages)

    def detect_language(self, encoder_hidden_states, encoder_keep):
        """Mean over the real frames only."""
        weights = encoder_keep.to(encoder_hidden_states.dtype)[..., None]
        pooled = (encoder_hidden_states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.lang_head(pooled)

    def forward(self, input_features, input_lengths, decoder_input_ids=None, decoder_attention_mask=None, labels=None):
        encoder_hidden_states, encoder_keep = self.encoder(input_features, input_lengths)
        if decoder_input_ids is None:
            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        if decoder_attention_mask is None:
            decoder_attention_mask = (decoder_input_ids != self.config.pad_token_id).long()
            decoder_attention_mask[:, 0] = 1
        hidden = self.decoder(decoder_input_ids, decoder_attention_mask, encoder_hidden_states, encoder_keep)
        logits = self.proj_out(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return logits, loss

    @torch.no_grad()
    def generate(self, input_features, input_lengths, prompt_ids, prompt_mask, max_new_tokens=4):
        """Greedy decoding from left-padded prompts (no cache: the whole prefix is re-run)."""
        ids, mask = prompt_ids, prompt_mask
        for _ in range(max_new_tokens):
            logits, _ = self(input_features, input_lengths, ids, mask)
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, next_token], dim=1)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        return ids


def pad_features(features):
    """List of (mel, frames) tensors -> (batch, mel, max_frames) zero-padded, and lengths."""
    lengths = torch.tensor([f.shape[-1] for f in features])
    batch = torch.zeros(len(features), features[0].shape[0], int(lengths.max()))
    for i, f in enumerate(features):
        batch[i, :, : f.shape[-1]] = f
    return batch, lengths


def left_pad(sequences, pad_token_id):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, width - len(s) :] = torch.tensor(s)
        mask[i, width - len(s) :] = 1
    return ids, mask


if __name__ == "__main__":
    torch.manual_seed(0)
    config = TinyWhisperConfig()
    model = TinyWhisperForConditionalGeneration(config).eval()
    short, long = torch.randn(16, 11), torch.randn(16, 20)
    feats, lengths = pad_features([short, long])
    prompts, prompt_mask = left_pad([[1, 7], [1, 9, 12, 5]], config.pad_token_id)

    with torch.no_grad():
        logits, _ = model(feats, lengths, prompts, prompt_mask)
        alone, _ = model(short[None], torch.tensor([11]), prompts[:1, 2:], prompt_mask[:1, 2:])
        print("short utterance: batched vs alone, real tokens:", (logits[0, 2:] - alone[0]).abs().max().item())
        enc, keep = model.encoder(feats, lengths)
        print("language logits finite:", bool(model.detect_language(enc, keep).isfinite().all()))

    mask = prepare_decoder_attention_mask(prompt_mask, torch.float32)
    print("decoder mask holds -inf:", bool(torch.isinf(mask).any()))
    row = mask[0, 0, 0].softmax(-1)
    print("fully masked query row 0 weights:", [round(w, 3) for w in row.tolist()], "uniform:", bool(torch.allclose(row, row.mean().expand_as(row))))
    labels = torch.tensor([[5, 6, 7, -100], [8, 9, 10, 11]])
    _, loss = model(feats, lengths, labels=labels)
    print("loss", round(loss.item(), 4))
    print("generated", model.generate(feats, lengths, prompts, prompt_mask).tolist())
