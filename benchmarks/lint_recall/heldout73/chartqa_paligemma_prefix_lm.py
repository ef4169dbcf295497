"""Chart question answering with a PaliGemma-style prefix-LM.

SigLIP-like patch tokens and the prompt ``answer en <question>`` form the
prefix, read with full attention; the answer is the suffix, generated
left to right. Batches are right-padded; the loss covers the suffix only.

Source: conventions.md §1 (direction cheat-sheet, additive masks), §2.3; seed self_attention_mask_guide.txt §3 (generate_causal_mask), §7 Q3.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class PaliGemmaConfig:
    vocab_size: int = 320
    hidden_size: int = 48
    num_heads: int = 4
    num_layers: int = 2
    image_size: int = 32
    patch_size: int = 8
    image_token_index: int = 319
    pad_token_id: int = 0
    bos_token_id: int = 2
    eos_token_id: int = 1
    rope_theta: float = 10000.0

    @property
    def num_image_tokens(self):
        return (self.image_size // self.patch_size) ** 2


class PaliGemmaProcessor:
    def __init__(self, config):
        self.config = config

    def encode(self, text):
        return [4 + sum(map(ord, w)) % (self.config.vocab_size - 6) for w in text.lower().split()]

    def __call__(self, questions, answers):
        cfg = self.config
        rows, types = [], []
        for q, a in zip(questions, answers):
            prefix = [cfg.image_token_index] * cfg.num_image_tokens + [cfg.bos_token_id] + self.encode("answer en " + q) + [3]
            suffix = self.encode(a) + [cfg.eos_token_id]
            rows.append(prefix + suffix)
            types.append([0] * len(prefix) + [1] * len(suffix))
        width = max(map(len, rows))
        out = {k: torch.zeros(len(rows), width, dtype=torch.long) for k in ("input_ids", "attention_mask", "token_type_ids")}
        out["labels"] = torch.full((len(rows), width), -100, dtype=torch.long)
        for i, (ids, tt) in enumerate(zip(rows, types)):
            n = len(ids)
            out["input_ids"][i, :n] = torch.tensor(ids)
            out["attention_mask"][i, :n] = 1
            out["token_type_ids"][i, :n] = torch.tensor(tt)
            out["labels"][i, :n] = torch.where(torch.tensor(tt) == 1, torch.tensor(ids), torch.tensor(-100))
        return out


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, position_ids, theta):
    dim = q.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    return q * emb.cos() + rotate_half(q) * emb.sin(), k * emb.cos() + rotate_half(k) * emb.sin()


class GemmaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(approximate="tanh"), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, hidden_states, causal_mask, position_ids):
        b, n, _ = hidden_states.shape
        h = self.input_layernorm(hidden_states)
        q, k, v = self.qkv(h).view(b, n, 3, self.cfg.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, k, position_ids, self.cfg.rope_theta)
        attn_weights = q @ k.transpose(2, 3) * self.head_dim ** -0.5 + causal_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn = (attn_weights @ v).transpose(1, 2).reshape(b, n, -1)
        hidden_states = hidden_states + self.o_proj(attn)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class PaliGemmaForConditionalGeneration(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.vision_tower = nn.Sequential(nn.Conv2d(3, 64, cfg.patch_size, cfg.patch_size), nn.Flatten(2))
        self.vision_encoder = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.multi_modal_projector = nn.Linear(64, cfg.hidden_size)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.layers = nn.ModuleList([GemmaDecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = nn.RMSNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def get_image_features(self, pixel_values):
        patches = self.vision_tower(pixel_values).transpose(1, 2)
        return self.multi_modal_projector(self.vision_encoder(patches)) / self.config.hidden_size ** 0.5

    def _update_causal_mask(self, attention_mask, token_type_ids, dtype):
        seq_len = attention_mask.shape[1]
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device).tril()
        is_prefix = (token_type_ids == 0) & attention_mask.bool()
        bidirectional = is_prefix[:, :, None] & is_prefix[:, None, :]
        allowed = (causal[None] | bidirectional) & attention_mask.bool()[:, None, :]
        return ((1.0 - allowed.to(dtype)) * float("-inf"))[:, None]  # expect: MC522 nan

    def forward(self, input_ids, pixel_values, attention_mask, token_type_ids, labels=None):
        cfg = self.config
        inputs_embeds = self.embed_tokens(input_ids) * cfg.hidden_size ** 0.5
        image_features = self.get_image_features(pixel_values).to(inputs_embeds.dtype)
        special_image_mask = (input_ids == cfg.image_token_index).unsqueeze(-1).expand_as(inputs_embeds)
        inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)
        causal_mask = self._update_causal_mask(attention_mask, token_type_ids, inputs_embeds.dtype)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = inputs_embeds
        for layer in self.layers:
            hidden = layer(hidden, causal_mask, position_ids)
        logits = self.lm_head(self.norm(hidden))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return loss, logits


def relaxed_accuracy(pred, target, tolerance=0.05):
    try:
        return abs(float(pred) - float(target)) <= tolerance * abs(float(target))
    except ValueError:
        return pred.strip().lower() == target.strip().lower()


if __name__ == "__main__":
    torch.manual_seed(0)
    config = PaliGemmaConfig()
    processor = PaliGemmaProcessor(config)
    questions = ["what is the highest bar value in 2019", "which country has the lowest share"]
    answers = ["42.5", "the united kingdom"]
    batch = processor(questions, answers)
    pixel_values = torch.randn(2, 3, config.image_size, config.image_size)
    model = PaliGemmaForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss, logits = model(pixel_values=pixel_values, **batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    print("relaxed acc", relaxed_accuracy("44.0", "42.5"), relaxed_accuracy("The United Kingdom", answers[1]))
