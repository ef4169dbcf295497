"""Audio question answering with an audio-language model (SALMONN / Qwen-Audio layout).

A Whisper-like audio encoder turns each clip into frames, a window-level pooler
condenses every window of frames into one audio token, and a projector maps the
tokens into the embedding space of a small decoder-only LLM. The prompt holds one
<|AUDIO|> placeholder per audio token; questions are left padded as in batched
generation, and the LLM uses eager attention with an HF 4.x style 4-D mask.

Source: huggingface/transformers PR #27114 (conventions.md section 3 item 15),
NVIDIA-NeMo/Automodel PR #2658 (item 16); conventions.md section 2.3 and section 5 item 4.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class AudioLMConfig:
    vocab_size: int = 96
    audio_token_id: int = 95
    pad_token_id: int = 0
    n_mels: int = 16
    audio_dim: int = 32
    window: int = 4
    hidden_size: int = 48
    num_heads: int = 4
    num_layers: int = 2
    max_positions: int = 64


class PromptTokenizer:
    padding_side = "left"

    def __init__(self, config):
        self.config = config

    def encode(self, text):
        return [3 + (sum(map(ord, w)) % (self.config.vocab_size - 4)) for w in text.split()]

    def __call__(self, prompts, n_audio_tokens, return_tensors="pt"):
        ids = [[self.config.audio_token_id] * n_audio_tokens + self.encode(p) for p in prompts]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.config.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, width - len(x):] = torch.tensor(x)
            attention_mask[i, width - len(x):] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def _make_causal_mask(bsz, tgt_len, dtype, device):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def prepare_decoder_attention_mask(attention_mask, input_shape, inputs_embeds):
    combined_attention_mask = _make_causal_mask(input_shape[0], input_shape[-1], inputs_embeds.dtype, inputs_embeds.device)
    expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])
    combined_attention_mask = expanded_attn_mask + combined_attention_mask  # expect: MC513 sum
    return combined_attention_mask


class AudioEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.conv = nn.Conv1d(cfg.n_mels, cfg.audio_dim, 3, stride=2, padding=1)
        self.layer = nn.TransformerEncoderLayer(cfg.audio_dim, 4, 2 * cfg.audio_dim, dropout=0.0, batch_first=True)
        self.proj = nn.Linear(cfg.audio_dim, cfg.hidden_size)

    def forward(self, mel, mel_lengths):
        x = F.gelu(self.conv(mel)).transpose(1, 2)
        frame_lengths = (mel_lengths + 1) // 2
        frame_pad = torch.arange(x.size(1))[None, :] >= frame_lengths[:, None]
        x = self.layer(x, src_key_padding_mask=frame_pad)
        w = self.cfg.window
        keep = (~frame_pad).float().unflatten(1, (-1, w)).unsqueeze(-1)
        pooled = (x.unflatten(1, (-1, w)) * keep).sum(2) / keep.sum(2).clamp(min=1.0)
        return self.proj(pooled)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.qkv_proj = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.SiLU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, hidden_states, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        qkv = self.qkv_proj(self.input_layernorm(hidden_states)).view(bsz, q_len, 3, self.num_heads, self.head_dim)
        query_states, key_states, value_states = qkv.permute(2, 0, 3, 1, 4)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).reshape(bsz, q_len, -1)
        hidden_states = hidden_states + self.o_proj(attn_output)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class AudioLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.audio_encoder = AudioEncoder(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.embed_positions = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, audio_embeds):
        inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds[input_ids == self.cfg.audio_token_id] = audio_embeds.reshape(-1, audio_embeds.size(-1)).to(inputs_embeds.dtype)
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        hidden_states = inputs_embeds + self.embed_positions(position_ids)
        mask_4d = prepare_decoder_attention_mask(attention_mask, input_ids.shape, inputs_embeds)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask_4d)
        return self.lm_head(self.norm(hidden_states))

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, audio_embeds, max_new_tokens=4):
        for _ in range(max_new_tokens):
            next_token = self(input_ids, attention_mask, audio_embeds)[:, -1].argmax(-1, keepdim=True)
            input_ids = torch.cat([input_ids, next_token], dim=1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(next_token)], dim=1)
        return input_ids[:, -max_new_tokens:]


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = AudioLMConfig()
    model, tokenizer = AudioLM(cfg), PromptTokenizer(cfg)
    mel, mel_lengths = torch.randn(2, cfg.n_mels, 32), torch.tensor([32, 20])
    questions = ["what instrument is playing in this clip", "is anyone speaking"]
    answers = torch.randint(3, 90, (2, 3))
    audio_embeds = model.audio_encoder(mel, mel_lengths)
    batch = tokenizer(questions, n_audio_tokens=audio_embeds.size(1))
    input_ids = torch.cat([batch["input_ids"], answers], dim=1)
    attention_mask = torch.cat([batch["attention_mask"], torch.ones_like(answers)], dim=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        logits = model(input_ids, attention_mask, model.audio_encoder(mel, mel_lengths))
        loss = F.cross_entropy(logits[:, -4:-1].transpose(1, 2), answers)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} answer loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        audio_embeds = model.audio_encoder(mel, mel_lengths)
    print("answers", model.generate(batch["input_ids"], batch["attention_mask"], audio_embeds).tolist())
