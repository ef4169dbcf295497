"""Infini-attention memory for multi-session chat (Multi-Session Chat style dialogues).

Each session is one segment: causal local attention inside the segment, a
compressive linear-attention memory read with ELU+1 features, a delta-rule
memory update from the segment's non-padding keys, and a learned gate mixing
the two, after Munkhdalai et al. (2024). Sessions are padded to the segment
length; the memory is carried from session to session.

Source: huggingface/transformers#32195 (conventions.md §3 item 25); conventions.md §1 (HF 4.x AttentionMaskConverter row)
"""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class InfiniConfig:
    vocab_size: int = 128
    hidden_size: int = 32
    num_heads: int = 4
    segment_len: int = 12
    delta_rule: bool = True
    attn_impl: str = "sdpa"
    pad_token_id: int = 0


class DialogueTokenizer:
    pad_token_id = 0

    def __call__(self, dialogues, segment_len, return_tensors="pt"):
        rows, masks = [], []
        for sessions in dialogues:
            ids, mask = [], []
            for text in sessions:
                toks = [1 + ord(c) % 127 for c in text][:segment_len]
                ids += toks + [self.pad_token_id] * (segment_len - len(toks))
                mask += [1] * len(toks) + [0] * (segment_len - len(toks))
            rows.append(ids)
            masks.append(mask)
        return {"input_ids": torch.tensor(rows), "attention_mask": torch.tensor(masks)}


def elu_plus_one(x):
    return F.elu(x) + 1.0


class InfiniAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.h, self.dh = config.num_heads, config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.beta = nn.Parameter(torch.zeros(1, self.h, 1, 1))

    def _local(self, q, k, v, keep):
        n = q.shape[-2]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        if self.config.attn_impl == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, None, None, :])
        scores = q @ k.transpose(-1, -2) / self.dh ** 0.5
        scores = scores + (1.0 - keep[:, None, None, :].float()) * torch.finfo(scores.dtype).min
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ v

    def forward(self, x, keep, memory=None, norm_term=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        local = self._local(q, k, v, keep)

        sigma_q, sigma_k = elu_plus_one(q), elu_plus_one(k) * keep[:, None, :, None]
        if memory is None:
            memory = q.new_zeros(b, self.h, self.dh, self.dh)
            norm_term = q.new_zeros(b, self.h, self.dh, 1)
        retrieved = (sigma_q @ memory) / (sigma_q @ norm_term).clamp(min=1e-6)
        if self.config.delta_rule:
            prev = (sigma_k @ memory) / (sigma_k @ norm_term).clamp(min=1e-6)
            memory = memory + sigma_k.transpose(-1, -2) @ (v - prev)
        else:
            memory = memory + sigma_k.transpose(-1, -2) @ v
        norm_term = norm_term + sigma_k.sum(dim=-2).unsqueeze(-1)

        gate = torch.sigmoid(self.beta)
        out = gate * retrieved + (1 - gate) * local
        return self.o_proj(out.transpose(1, 2).reshape(b, n, d)), memory, norm_term


class InfiniChatLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.pos = nn.Embedding(config.segment_len, config.hidden_size)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.attn = InfiniAttention(config)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 64), nn.GELU(), nn.Linear(64, config.hidden_size))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask):
        L = self.config.segment_len
        memory = norm_term = None
        logits = []
        for ids, keep in zip(input_ids.split(L, dim=1), attention_mask.split(L, dim=1)):
            x = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            h, memory, norm_term = self.attn(self.norm1(x), keep.bool(), memory, norm_term)
            x = x + h
            x = x + self.mlp(self.norm2(x))
            logits.append(self.lm_head(x))
        return torch.cat(logits, dim=1)


def lm_loss(logits, input_ids, attention_mask):
    target = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), target, ignore_index=-100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--attn-impl", default="sdpa", choices=["sdpa", "eager"])
    args = parser.parse_args()
    torch.manual_seed(0)
    config = InfiniConfig(attn_impl=args.attn_impl)
    dialogues = [["hi! i adopted a puppy", "how is the puppy?", "she chewed my shoes"],
                 ["i start a new job monday", "good luck!", "how was the first week?"]]
    batch = DialogueTokenizer()(dialogues, segment_len=config.segment_len)
    model = InfiniChatLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = lm_loss(model(**batch), batch["input_ids"], batch["attention_mask"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
