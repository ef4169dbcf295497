"""Decoder-only LM fine-tuned to turn English requests into Bash one-liners (NL2Bash).

Written like a Hugging Face 4.x ``modeling_*.py``: a config dataclass, eager attention
with an additive 4-D mask prepared once per forward by ``_prepare_decoder_attention_mask``
from ``_make_causal_mask`` and ``_expand_mask``, left-padded prompts with position ids
from the attention mask's cumsum, a per-layer ``(key, value)`` cache and greedy decoding.
Prompts look like ``# <request>\\n$ `` and the loss covers only the command.

Source: huggingface/transformers PR #27114 (conventions.md §3 item 15),
NVIDIA-NeMo/Automodel PR #2658 (item 16), conventions.md §2.3, §5 item 4
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class NL2BashConfig:
    vocab_size: int = 259
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    max_position_embeddings: int = 128
    pad_token_id: int = 256
    eos_token_id: int = 257


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _prepare_decoder_attention_mask(attention_mask, input_shape, inputs_embeds, past_key_values_length):
    combined_attention_mask = None
    if input_shape[-1] > 1:
        combined_attention_mask = _make_causal_mask(input_shape, inputs_embeds.dtype, inputs_embeds.device,
                                                    past_key_values_length)
    if attention_mask is not None:
        expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])
        combined_attention_mask = expanded_attn_mask if combined_attention_mask is None else expanded_attn_mask + combined_attention_mask  # expect: MC513 sum
    return combined_attention_mask


class BashAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, layer_past=None):
        bsz, q_len, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(bsz, q_len, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        if layer_past is not None:
            key = torch.cat([layer_past[0], key], dim=2)
            value = torch.cat([layer_past[1], value], dim=2)
        attn_weights = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.out_proj(attn_output), (key, value)


class BashBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size)
        self.attn = BashAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))

    def forward(self, hidden_states, attention_mask, layer_past):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, present = self.attn(hidden_states, attention_mask, layer_past)
        return residual + attn_output + self.mlp(hidden_states), present


class BashGPTForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList(BashBlock(config) for _ in range(config.num_hidden_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None):
        past_length = 0 if past_key_values is None else past_key_values[0][0].size(2)
        if position_ids is None:
            position_ids = torch.arange(past_length, past_length + input_ids.size(1))[None]
        inputs_embeds = self.wte(input_ids)
        mask = _prepare_decoder_attention_mask(attention_mask, input_ids.shape, inputs_embeds, past_length)
        hidden_states = inputs_embeds + self.wpe(position_ids)
        presents = []
        for i, block in enumerate(self.h):
            hidden_states, present = block(hidden_states, mask, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.lm_head(self.ln_f(hidden_states)), tuple(presents)


def encode_batch(requests, commands=None, cfg=NL2BashConfig()):
    rows, targets = [], []
    for i, request in enumerate(requests):
        prompt = list(f"# {request}\n$ ".encode())
        target = list(commands[i].encode()) + [cfg.eos_token_id] if commands else []
        rows.append(prompt + target)
        targets.append([-100] * len(prompt) + target)
    width = max(map(len, rows))
    input_ids = torch.tensor([[cfg.pad_token_id] * (width - len(r)) + r for r in rows])
    labels = torch.tensor([[-100] * (width - len(t)) + t for t in targets])
    attention_mask = (input_ids != cfg.pad_token_id).long()
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
    return input_ids, attention_mask, position_ids, labels


@torch.no_grad()
def generate(model, requests, max_new_tokens=16):
    input_ids, attention_mask, position_ids, _ = encode_batch(requests)
    logits, past = model(input_ids, attention_mask, position_ids)
    out = []
    for _ in range(max_new_tokens):
        next_ids = logits[:, -1].argmax(-1, keepdim=True)
        out.append(next_ids)
        attention_mask = torch.cat([attention_mask, torch.ones_like(next_ids)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        logits, past = model(next_ids, attention_mask, position_ids, past)
    return [bytes(t for t in row if t < 256).decode(errors="replace") for row in torch.cat(out, 1).tolist()]


NL2BASH = [
    ("list all files in the current directory", "ls -a"),
    ("count lines in data.txt", "wc -l data.txt"),
    ("find python files under src", "find src -name '*.py'"),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BashGPTForCausalLM(NL2BashConfig())
    input_ids, attention_mask, position_ids, labels = encode_batch(*zip(*NL2BASH))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(4):
        logits, _ = model(input_ids, attention_mask, position_ids)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    print(generate(model, ["count lines in data.txt", "list all files in the current directory"]))
