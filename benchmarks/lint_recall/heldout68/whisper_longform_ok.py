"""Long-form podcast transcription with a Whisper port.

Audio is cut into 30-second windows (here: tiny random log-mel windows); each
window is decoded greedily with the text of the previous windows as a
<|startofprev|> prompt. The prompt is run through the decoder once and kept in the
key/value cache, then the start-of-transcript sequence and the new tokens follow.

Source: pytorch/pytorch PR #111007; conventions.md section 1, section 2.7 and section 5 item 8.
"""
from typing import Dict, Iterable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

N_VOCAB = 64
NO_TIMESTAMPS, TRANSCRIBE, LANG_EN, SOT, SOT_PREV, EOT = 58, 59, 57, 60, 61, 62
SOT_SEQUENCE = (SOT, LANG_EN, TRANSCRIBE, NO_TIMESTAMPS)
SUPPRESS = torch.zeros(N_VOCAB, dtype=torch.bool)
SUPPRESS[LANG_EN:EOT] = True


class LayerNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.float()).type(x.dtype)


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: Tensor, xa: Optional[Tensor] = None, mask: Optional[Tensor] = None, kv_cache: Optional[dict] = None):
        q = self.query(x)
        if xa is None:
            k, v = self.key(x), self.value(x)
            if kv_cache is not None:
                if self in kv_cache:
                    k = torch.cat([kv_cache[self][0], k], dim=1)
                    v = torch.cat([kv_cache[self][1], v], dim=1)
                kv_cache[self] = (k, v)
        elif kv_cache is not None and self in kv_cache:
            k, v = kv_cache[self]
        else:
            k, v = self.key(xa), self.value(xa)
            if kv_cache is not None:
                kv_cache[self] = (k, v)
        return self.out(self.qkv_attention(q, k, v, mask))

    def qkv_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        n_batch, n_ctx, n_state = q.shape
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[k.shape[2] - n_ctx : k.shape[2], : k.shape[2]] if mask is not None else None)
        return a.permute(0, 2, 1, 3).flatten(start_dim=2)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, n_state * 4), nn.GELU(), nn.Linear(n_state * 4, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x, xa=None, mask=None, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)
        if self.cross_attn:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, n_mels, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks: Iterable[ResidualAttentionBlock] = nn.ModuleList(ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer))
        self.ln_post = LayerNorm(n_state)

    def forward(self, x: Tensor):
        x = F.gelu(self.conv2(F.gelu(self.conv1(x)))).permute(0, 2, 1)
        x = (x + self.positional_embedding).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self, n_vocab, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state).normal_(std=0.02))
        self.blocks: Iterable[ResidualAttentionBlock] = nn.ModuleList(ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer))
        self.ln = LayerNorm(n_state)
        mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: Tensor, xa: Tensor, kv_cache: Optional[dict] = None):
        first = self.blocks[0].attn
        offset = kv_cache[first][0].shape[1] if kv_cache and first in kv_cache else 0
        x = self.token_embedding(x) + self.positional_embedding[offset : offset + x.shape[-1]]
        for block in self.blocks:
            x = block(x, xa, mask=self.mask, kv_cache=kv_cache)
        x = self.ln(x)
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()


class Whisper(nn.Module):
    def __init__(self, n_mels=16, n_audio_ctx=12, n_text_ctx=32, n_state=48, n_head=4, n_layer=2):
        super().__init__()
        self.n_text_ctx = n_text_ctx
        self.encoder = AudioEncoder(n_mels, n_audio_ctx, n_state, n_head, n_layer)
        self.decoder = TextDecoder(N_VOCAB, n_text_ctx, n_state, n_head, n_layer)

    def forward(self, mel, tokens):
        return self.decoder(tokens, self.encoder(mel))


@torch.no_grad()
def transcribe(model: Whisper, windows: Iterable[Tensor], max_tokens: int = 6):
    prev_text, results = [], []
    for mel in windows:
        audio_features = model.encoder(mel[None])
        cache: Dict[nn.Module, tuple] = {}
        if prev_text:
            prompt = [SOT_PREV] + prev_text[-(model.n_text_ctx // 2 - 1):]
            model.decoder(torch.tensor([prompt]), audio_features, kv_cache=cache)
        logits = model.decoder(torch.tensor([SOT_SEQUENCE]), audio_features, kv_cache=cache)
        tokens = []
        for _ in range(max_tokens):
            next_token = logits[:, -1].masked_fill(SUPPRESS, float("-inf")).argmax(-1)
            if next_token.item() == EOT:
                break
            tokens.append(next_token.item())
            logits = model.decoder(next_token[:, None], audio_features, kv_cache=cache)
        prev_text += tokens
        results.append(tokens)
    return results


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Whisper()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mel = torch.randn(2, 16, 24)
    text = torch.randint(1, 57, (2, 6))
    tokens = torch.cat([torch.tensor([SOT_SEQUENCE] * 2), text, torch.full((2, 1), EOT)], dim=1)
    for step in range(3):
        logits = model(mel, tokens[:, :-1])
        loss = F.cross_entropy(logits[:, len(SOT_SEQUENCE) - 1 :].transpose(1, 2), tokens[:, len(SOT_SEQUENCE) :])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    for i, seg in enumerate(transcribe(model, torch.randn(3, 16, 24))):
        print(f"window {i}: {seg}")
