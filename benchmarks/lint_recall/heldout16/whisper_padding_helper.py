"""Held-out 16: an openai/whisper-style model.py (ModelDimensions, fp32-safe LayerNorm, sinusoidal
audio positions, `MultiHeadAttention.qkv_attention`, `ResidualAttentionBlock` with
cross-attention, `AudioEncoder` with two Conv1d layers, `TextDecoder` with its non-persistent
-inf causal buffer) adapted to batches of short clips that are not padded to 30 s: a
`mel_padding` mask (True = padded frame) is downsampled after the stride-2 convolution and hides
the padded audio frames from the encoder's self-attention and the decoder's cross-attention. The
padded keys are hidden by a module-level helper, `mask_padded_keys`.

Source: lucidrains/flamingo-pytorch#10 ("you are not using the inplace version of the function
... so I think this line does not have an effect"), seed article on `masked_fill` vs
`masked_fill_` (the out-of-place form returns a new tensor and leaves the original unchanged). The
helper calls `qk.masked_fill(...)` as a statement and returns the unmasked `qk`.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class ModelDimensions:
    n_mels: int = 16
    n_audio_ctx: int = 32
    n_audio_state: int = 64
    n_audio_head: int = 4
    n_audio_layer: int = 2
    n_vocab: int = 80
    n_text_ctx: int = 16
    n_text_state: int = 64
    n_text_head: int = 4
    n_text_layer: int = 2


class LayerNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.float()).type(x.dtype)


def sinusoids(length: int, channels: int, max_timescale: int = 10000) -> Tensor:
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def mask_padded_keys(qk: Tensor, key_padding: Optional[Tensor]) -> Tensor:
    """qk: (n_batch, n_head, n_ctx, n_key); key_padding: (n_batch, n_key), True at padded frames."""
    if key_padding is not None:
        qk.masked_fill(key_padding[:, None, None, :], float("-inf"))  # expect: MC525 helper
    return qk


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query, self.key = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False)
        self.value, self.out = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state)

    def forward(self, x: Tensor, xa: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                key_padding: Optional[Tensor] = None) -> Tensor:
        q = self.query(x)
        k, v = self.key(x if xa is None else xa), self.value(x if xa is None else xa)
        return self.out(self.qkv_attention(q, k, v, mask, key_padding))

    def qkv_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], key_padding: Optional[Tensor]) -> Tensor:
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q, k, v = (t.view(*t.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        qk = mask_padded_keys(qk.float(), key_padding)
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x, xa=None, mask=None, self_padding=None, cross_padding=None) -> Tensor:
        x = x + self.attn(self.attn_ln(x), mask=mask, key_padding=self_padding)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, key_padding=cross_padding)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer)])
        self.ln_post = LayerNorm(dims.n_audio_state)

    def forward(self, mel: Tensor, mel_padding: Optional[Tensor] = None):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        x = x + self.positional_embedding[: x.shape[1]]
        padding = mel_padding[:, ::2] if mel_padding is not None else None
        for block in self.blocks:
            x = block(x, self_padding=padding)
        return self.ln_post(x), padding


class TextDecoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        self.positional_embedding = nn.Parameter(torch.randn(dims.n_text_ctx, dims.n_text_state) * 0.02)
        self.blocks = nn.ModuleList([ResidualAttentionBlock(dims.n_text_state, dims.n_text_head, cross_attention=True) for _ in range(dims.n_text_layer)])
        self.ln = LayerNorm(dims.n_text_state)
        self.register_buffer("mask", torch.empty(dims.n_text_ctx, dims.n_text_ctx).fill_(-np.inf).triu_(1), persistent=False)

    def forward(self, tokens: Tensor, xa: Tensor, xa_padding: Optional[Tensor] = None) -> Tensor:
        x = self.token_embedding(tokens) + self.positional_embedding[: tokens.shape[-1]]
        for block in self.blocks:
            x = block(x, xa, mask=self.mask, cross_padding=xa_padding)
        return (self.ln(x) @ self.token_embedding.weight.T).float()


if __name__ == "__main__":
    torch.manual_seed(0)
    dims = ModelDimensions()
    encoder, decoder = AudioEncoder(dims).eval(), TextDecoder(dims).eval()
    mel = torch.randn(2, dims.n_mels, 40)
    mel[1, :, 24:] = 0.0
    mel_padding = torch.zeros(2, 40, dtype=torch.bool)
    mel_padding[1, 24:] = True
    tokens = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 10]])
    with torch.no_grad():
        audio, padding = encoder(mel, mel_padding)
        alone, _ = encoder(mel[1:, :, :24])
        logits, logits_alone = decoder(tokens, audio, padding), decoder(tokens[1:], alone)
    print("short clip, encoder frames padded vs alone:", float((audio[1, :12] - alone[0]).abs().max()))
    print("short clip, decoder logits padded vs alone:", float((logits[1] - logits_alone[0]).abs().max()))
