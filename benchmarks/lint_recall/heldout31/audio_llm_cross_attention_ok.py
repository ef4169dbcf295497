"""Audio-conditioned language model for captioning and audio question answering: an audio
encoder over padded log-mel clips (strided Conv1d, SDPA blocks with a frame keep mask), a
projector, and a text decoder whose blocks interleave causal self-attention with gated
cross-attention to the audio states. Batches mix audio-text pairs with text-only instruction
samples (no audio frames; ``has_audio`` closes the gate). Masks are additive, 0 / finfo.min,
expanded from 2-D keep masks as Hugging Face's ``_expand_mask`` does.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3 and §5 item 4, tools.md §0 P5
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class AudioLMConfig:
    n_mels: int = 16
    d_model: int = 32
    n_heads: int = 4
    n_audio_layers: int = 1
    n_text_layers: int = 2
    vocab_size: int = 40
    max_positions: int = 64


def expand_keep(keep, dtype):
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


class AudioEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.conv = nn.Conv1d(cfg.n_mels, cfg.d_model, kernel_size=3, stride=2, padding=1)
        self.qkv = nn.ModuleList(nn.Linear(cfg.d_model, 3 * cfg.d_model) for _ in range(cfg.n_audio_layers))
        self.n_heads = cfg.n_heads

    def forward(self, mel, mel_lens):
        frame_keep = torch.arange(mel.shape[-1])[None, :] < mel_lens[:, None]
        x = F.gelu(self.conv(mel * frame_keep[:, None, :])).transpose(1, 2)
        audio_keep = torch.arange(x.shape[1])[None, :] < (mel_lens[:, None] + 1) // 2
        for qkv in self.qkv:
            B, S, D = x.shape
            q, k, v = qkv(x).view(B, S, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
            h = F.scaled_dot_product_attention(q, k, v, attn_mask=audio_keep[:, None, None, :])
            x = x + h.transpose(1, 2).reshape(B, S, D)
        return x, audio_keep


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.self_qkv, self.self_out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.cross_q, self.cross_kv = nn.Linear(d_model, d_model), nn.Linear(d_model, 2 * d_model)
        self.cross_out, self.gate = nn.Linear(d_model, d_model), nn.Parameter(torch.tensor(0.5))
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def heads(self, t):
        return t.view(t.shape[0], t.shape[1], self.n_heads, -1).transpose(1, 2)

    def attend(self, q, k, v, bias):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
        out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).flatten(2)

    def forward(self, x, memory, self_bias, cross_bias, has_audio):
        q, k, v = map(self.heads, self.self_qkv(self.ln1(x)).chunk(3, dim=-1))
        x = x + self.self_out(self.attend(q, k, v, self_bias))
        k, v = map(self.heads, self.cross_kv(memory).chunk(2, dim=-1))
        cross = self.cross_out(self.attend(self.heads(self.cross_q(self.ln2(x))), k, v, cross_bias))
        x = x + torch.tanh(self.gate) * has_audio[:, None, None] * cross
        return x + self.mlp(self.ln3(x))


class AudioLM(nn.Module):
    def __init__(self, cfg: AudioLMConfig):
        super().__init__()
        self.audio_encoder = AudioEncoder(cfg)
        self.projector = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.GELU(), nn.Linear(cfg.d_model, cfg.d_model))
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.embed_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_text_layers))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, mel, mel_lens, labels=None):
        audio, audio_keep = self.audio_encoder(mel, mel_lens)
        memory = self.projector(audio)
        T = input_ids.shape[1]
        x = self.embed_tokens(input_ids) + self.embed_positions(torch.arange(T))
        dtype, text_keep = x.dtype, attention_mask.bool()
        has_audio = (mel_lens > 0).to(dtype)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        self_bias = torch.where(causal[None] & text_keep[:, None, :], 0.0, torch.finfo(dtype).min)[:, None]
        text_bias, audio_bias = expand_keep(text_keep, dtype), expand_keep(audio_keep, dtype)
        cross_bias = expand_keep(text_keep[:, :, None] & audio_keep[:, None, :], dtype)[:, None]
        for block in self.blocks:
            x = block(x, memory, self_bias, cross_bias, has_audio)
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return loss, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    model = AudioLM(AudioLMConfig()).eval()
    input_ids = torch.tensor([[1, 7, 12, 5, 9, 2], [1, 22, 3, 8, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    mel, mel_lens = torch.randn(2, 16, 20), torch.tensor([20, 0])
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.no_grad():
        loss, logits = model(input_ids, attention_mask, mel, mel_lens, labels)
        print("loss:", loss.item(), "NaN logits per sample:", torch.isnan(logits).any(dim=(1, 2)).tolist())
        _, alone = model(input_ids[1:, :4], attention_mask[1:, :4], torch.zeros(1, 16, 2), mel_lens[1:])
        print("text-only sample batched vs alone:", (logits[1, :4] - alone[0]).abs().max().item())
        _, alone = model(input_ids[:1], attention_mask[:1], mel[:1], mel_lens[:1])
        print("audio sample batched vs alone:", (logits[0] - alone[0]).abs().max().item())
