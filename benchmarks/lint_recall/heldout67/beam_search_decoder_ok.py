"""Batched beam search over a decoder-only LM with a key/value cache.

Prompts arrive left-padded from the tokenizer.  Every prompt is expanded to
`num_beams` rows; after each step the cache and the attention mask are
reordered by the surviving beams' parents.  Finished hypotheses are kept per
prompt with a length penalty, as in the usual BeamHypotheses bookkeeping.

Source: conventions.md section 1 (Hugging Face 4.x AttentionMaskConverter row); huggingface/transformers#32195.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 120
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    max_positions: int = 128
    pad_token_id: int = 0
    eos_token_id: int = 2


def padding_bias(attention_mask, dtype):
    inverted = 1 - attention_mask[:, None, None, :].to(dtype)
    return inverted.to(dtype) * torch.finfo(dtype).min


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x, bias, past):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + bias
        if t > 1:
            future = torch.ones(t, k.size(2), dtype=torch.bool, device=x.device).triu(k.size(2) - t + 1)
            scores = scores.masked_fill(future, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d)), (k, v)


class DecoderLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.attn = nn.ModuleList(Attention(cfg) for _ in range(cfg.layers))
        self.ln = nn.ModuleList(nn.LayerNorm(cfg.hidden) for _ in range(2 * cfg.layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(cfg.hidden, 2 * cfg.hidden), nn.ReLU(), nn.Linear(2 * cfg.hidden, cfg.hidden)) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, input_ids, attention_mask, past_key_values=None):
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -input_ids.size(1):]
        x = self.tok(input_ids) + self.pos(position_ids)
        bias = padding_bias(attention_mask, x.dtype)
        presents = []
        for i, (attn, ff) in enumerate(zip(self.attn, self.ff)):
            a, kv = attn(self.ln[2 * i](x), bias, None if past_key_values is None else past_key_values[i])
            x = x + a
            x = x + ff(self.ln[2 * i + 1](x))
            presents.append(kv)
        return self.head(x), presents


class Tokenizer:
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __call__(self, texts):
        rows = [[self.bos_token_id] + [3 + ord(c) % 117 for c in t] for t in texts]
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad_token_id] * (width - len(r)) + r for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != self.pad_token_id).long()}


@torch.no_grad()
def beam_search(model, input_ids, attention_mask=None, num_beams=3, max_new_tokens=10, length_penalty=1.0):
    cfg = model.config
    if attention_mask is None:
        attention_mask = input_ids != cfg.pad_token_id
    batch, prompt_len = input_ids.shape
    input_ids = input_ids.repeat_interleave(num_beams, dim=0)
    attention_mask = attention_mask.repeat_interleave(num_beams, dim=0)
    beam_scores = torch.full((batch, num_beams), float("-inf"))
    beam_scores[:, 0] = 0.0
    beam_scores = beam_scores.view(-1)
    finished = [[] for _ in range(batch)]
    logits, past = model(input_ids, attention_mask)
    for step in range(max_new_tokens):
        logprobs = F.log_softmax(logits[:, -1], dim=-1) + beam_scores[:, None]
        vocab = logprobs.size(-1)
        top_scores, top_ids = logprobs.view(batch, -1).topk(2 * num_beams, dim=-1)
        next_scores = torch.full((batch, num_beams), float("-inf"))
        next_tokens = torch.full((batch, num_beams), cfg.pad_token_id, dtype=torch.long)
        next_parents = torch.zeros(batch, num_beams, dtype=torch.long)
        for b in range(batch):
            slot = 0
            for score, idx in zip(top_scores[b].tolist(), top_ids[b].tolist()):
                parent, token = b * num_beams + idx // vocab, idx % vocab
                if token == cfg.eos_token_id:
                    hyp = input_ids[parent, prompt_len:].tolist()
                    finished[b].append((score / (len(hyp) + 1) ** length_penalty, hyp))
                    continue
                next_scores[b, slot], next_tokens[b, slot], next_parents[b, slot] = score, token, parent
                slot += 1
                if slot == num_beams:
                    break
        parents = next_parents.view(-1)
        beam_scores, tokens = next_scores.view(-1), next_tokens.view(-1, 1)
        input_ids = torch.cat([input_ids[parents], tokens], dim=1)
        attention_mask = torch.cat([attention_mask[parents], torch.ones_like(attention_mask[:, :1])], dim=1)
        past = [(k[parents], v[parents]) for k, v in past]
        logits, past = model(tokens, attention_mask, past)
    results = []
    for b in range(batch):
        for j in range(num_beams):
            row = b * num_beams + j
            hyp = input_ids[row, prompt_len:].tolist()
            finished[b].append((beam_scores[row].item() / len(hyp) ** length_penalty, hyp))
        results.append(max(finished[b], key=lambda h: h[0]))
    return results


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DecoderLM(Config()).eval()
    enc = Tokenizer()(["translate: good morning", "hi", "the quick brown fox"])
    for score, hyp in beam_search(model, enc["input_ids"], enc["attention_mask"], num_beams=3, max_new_tokens=8):
        print(round(score, 3), hyp)
