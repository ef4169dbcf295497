"""MusicGen-style text-to-music language model over EnCodec-like codebooks.

A small version of the audiocraft layout: a `DelayedPatternProvider` interleaving ``n_q``
codebooks with the delay pattern, a text conditioner, a `StreamingTransformer` decoder with
cross-attention to the condition tensors, one embedding and one output head per codebook,
and `LMModel.compute_predictions` / `LMModel.generate` on the patterned sequence. The demo
trains on synthetic codes whose contour is chosen by the text description.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749
(conventions.md §3 item 5); conventions.md §2.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LMConfig:
    n_q: int = 4
    card: int = 24
    dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    hidden_scale: int = 4
    text_vocab: int = 16
    dropout: float = 0.0
    delays: list[int] = field(default_factory=lambda: [0, 1, 2, 3])


class DelayedPatternProvider:
    def __init__(self, n_q: int, delays: list[int]):
        assert len(delays) == n_q
        self.n_q = n_q
        self.delays = delays
        self.max_delay = max(delays)

    def get_sequence_length(self, timesteps: int) -> int:
        return timesteps + self.max_delay + 1

    def valid_mask(self, timesteps: int, device: torch.device) -> torch.Tensor:
        S = self.get_sequence_length(timesteps)
        mask = torch.zeros(self.n_q, S, dtype=torch.bool, device=device)
        for k, d in enumerate(self.delays):
            mask[k, 1 + d : 1 + d + timesteps] = True
        return mask

    def build_pattern_sequence(self, codes: torch.Tensor, special_token: int):
        B, K, T = codes.shape
        seq = codes.new_full((B, K, self.get_sequence_length(T)), special_token)
        for k, d in enumerate(self.delays):
            seq[:, k, 1 + d : 1 + d + T] = codes[:, k]
        return seq, self.valid_mask(T, codes.device)

    def revert_pattern_sequence(self, seq: torch.Tensor, timesteps: int) -> torch.Tensor:
        parts = [seq[:, k, 1 + d : 1 + d + timesteps] for k, d in enumerate(self.delays)]
        return torch.stack(parts, dim=1)


def create_sin_embedding(positions: torch.Tensor, dim: int, max_period: float = 10000.0):
    half_dim = dim // 2
    adim = torch.arange(half_dim, device=positions.device).view(1, 1, -1)
    phase = positions / (max_period ** (adim / (half_dim - 1)))
    return torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1)


def causal_attn_bias(length: int, device: torch.device, dtype=torch.float32) -> torch.Tensor:
    return torch.triu(torch.full((length, length), float("-inf"), device=device, dtype=dtype))  # expect: MC503 musicgen


class StreamingMultiheadAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, cross_attention=False):
        super().__init__()
        self.num_heads = num_heads
        self.cross_attention = cross_attention
        self.in_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)
        self.dropout = dropout

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.num_heads, C // self.num_heads).transpose(1, 2)

    def forward(self, query, key, value, attn_bias=None, key_padding_mask=None):
        dim = query.shape[-1]
        w_q, w_k, w_v = self.in_proj.weight.split(dim, dim=0)
        q = self._split(F.linear(query, w_q))
        k = self._split(F.linear(key, w_k))
        v = self._split(F.linear(value, w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if attn_bias is not None:
            scores = scores + attn_bias
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = F.dropout(scores.softmax(dim=-1), self.dropout, self.training)
        out = (weights @ v).transpose(1, 2).reshape(query.shape)
        return self.out_proj(out)


class StreamingTransformerLayer(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.self_attn = StreamingMultiheadAttention(cfg.dim, cfg.num_heads, cfg.dropout)
        self.cross_attention = StreamingMultiheadAttention(
            cfg.dim, cfg.num_heads, cfg.dropout, cross_attention=True
        )
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.norm_cross = nn.LayerNorm(cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.linear1 = nn.Linear(cfg.dim, cfg.hidden_scale * cfg.dim, bias=False)
        self.linear2 = nn.Linear(cfg.hidden_scale * cfg.dim, cfg.dim, bias=False)

    def forward(self, x, attn_bias, cross_attention_src, cross_padding_mask):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, attn_bias=attn_bias)
        h = self.norm_cross(x)
        x = x + self.cross_attention(
            h, cross_attention_src, cross_attention_src, key_padding_mask=cross_padding_mask
        )
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class StreamingTransformer(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.dim = cfg.dim
        self.layers = nn.ModuleList(StreamingTransformerLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x, cross_attention_src, cross_padding_mask):
        B, T, C = x.shape
        positions = torch.arange(T, device=x.device).view(1, -1, 1)
        x = x + create_sin_embedding(positions, C)
        attn_bias = causal_attn_bias(T, x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, attn_bias, cross_attention_src, cross_padding_mask)
        return x


class TextConditioner(nn.Module):
    def __init__(self, cfg: LMConfig, pad_id: int = 0):
        super().__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(cfg.text_vocab, cfg.dim, padding_idx=pad_id)
        self.encoder = nn.TransformerEncoderLayer(
            cfg.dim, cfg.num_heads, 2 * cfg.dim, dropout=0.0, batch_first=True
        )
        self.output_proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, text_tokens: torch.Tensor):
        padding_mask = text_tokens == self.pad_id
        pos = torch.arange(text_tokens.shape[1], device=text_tokens.device).view(1, -1, 1)
        h = self.embed(text_tokens) + create_sin_embedding(pos, self.embed.embedding_dim)
        h = self.encoder(h, src_key_padding_mask=padding_mask)
        return self.output_proj(h), padding_mask


class LMModel(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.special_token_id = cfg.card
        self.pattern_provider = DelayedPatternProvider(cfg.n_q, cfg.delays)
        self.condition_provider = TextConditioner(cfg)
        self.emb = nn.ModuleList(nn.Embedding(cfg.card + 1, cfg.dim) for _ in range(cfg.n_q))
        self.transformer = StreamingTransformer(cfg)
        self.out_norm = nn.LayerNorm(cfg.dim)
        self.linears = nn.ModuleList(nn.Linear(cfg.dim, cfg.card) for _ in range(cfg.n_q))

    def forward(self, sequence: torch.Tensor, condition_tensors):
        cond, cond_padding = condition_tensors
        x = sum(self.emb[k](sequence[:, k]) for k in range(self.cfg.n_q))
        out = self.out_norm(self.transformer(x, cond, cond_padding))
        return torch.stack([linear(out) for linear in self.linears], dim=1)

    def compute_predictions(self, codes: torch.Tensor, text_tokens: torch.Tensor):
        sequence, valid = self.pattern_provider.build_pattern_sequence(codes, self.special_token_id)
        condition_tensors = self.condition_provider(text_tokens)
        logits = self(sequence[:, :, :-1], condition_tensors)
        targets = sequence[:, :, 1:]
        return logits, targets, valid[:, 1:].expand(codes.shape[0], -1, -1)

    @torch.no_grad()
    def generate(self, text_tokens: torch.Tensor, timesteps: int, temperature: float = 0.0):
        B = text_tokens.shape[0]
        condition_tensors = self.condition_provider(text_tokens)
        valid = self.pattern_provider.valid_mask(timesteps, text_tokens.device)
        S = self.pattern_provider.get_sequence_length(timesteps)
        seq = text_tokens.new_full((B, self.cfg.n_q, 1), self.special_token_id)
        for step in range(1, S):
            logits = self(seq, condition_tensors)[:, :, -1]
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs.view(-1, self.cfg.card), 1).view(B, -1)
            else:
                nxt = logits.argmax(dim=-1)
            nxt = torch.where(valid[:, step][None], nxt, self.special_token_id)
            seq = torch.cat([seq, nxt[:, :, None]], dim=2)
        return self.pattern_provider.revert_pattern_sequence(seq, timesteps)


def make_batch(cfg: LMConfig, batch_size: int, timesteps: int, generator: torch.Generator):
    """Text: a contour word (1-4) and 0-3 style words (5-15); codes follow the contour."""
    contour = torch.randint(0, 4, (batch_size,), generator=generator)
    n_style = torch.randint(0, 4, (batch_size,), generator=generator)
    text = torch.zeros(batch_size, 4, dtype=torch.long)
    text[:, 0] = contour + 1
    for b in range(batch_size):
        n = int(n_style[b])
        text[b, 1 : 1 + n] = torch.randint(5, cfg.text_vocab, (n,), generator=generator)
    t = torch.arange(timesteps)
    base = torch.randint(0, cfg.card, (batch_size, 1), generator=generator)
    slope = torch.tensor([1, -1, 0, 2])[contour][:, None]
    melody = (base + slope * t[None]) % cfg.card
    codes = torch.stack([(melody + 3 * k) % cfg.card for k in range(cfg.n_q)], dim=1)
    return codes, text


def train(model: LMModel, steps: int = 150, batch_size: int = 16, timesteps: int = 12):
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        codes, text = make_batch(model.cfg, batch_size, timesteps, gen)
        logits, targets, mask = model.compute_predictions(codes, text)
        loss = F.cross_entropy(logits[mask], targets[mask])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.manual_seed(0)
    cfg = LMConfig()
    model = LMModel(cfg)
    losses = train(model)
    print(f"train CE: first {losses[0]:.3f} last {losses[-1]:.3f}")
    model.eval()
    codes, text = make_batch(cfg, 8, 12, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, targets, mask = model.compute_predictions(codes, text)
        eval_loss = F.cross_entropy(logits[mask], targets[mask]).item()
    generated = model.generate(text, timesteps=12)
    step_ok = (generated[:, 0, 1:] - generated[:, 0, :-1]) % cfg.card
    expected = (torch.tensor([1, -1, 0, 2])[text[:, 0] - 1] % cfg.card)[:, None]
    acc = (step_ok == expected).float().mean().item()
    print(f"eval CE {eval_loss:.3f}; contour-following steps in generations {acc:.2f}")


if __name__ == "__main__":
    main()
