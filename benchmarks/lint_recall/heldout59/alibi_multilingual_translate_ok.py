"""BLOOM-style multilingual decoder with ALiBi, prompted for batched translation.

Prompts of different lengths are left-padded; ALiBi offsets follow each row's own token
positions. The model runs SDPA with the additive mask plus ALiBi, or an eager path that returns
attention probabilities, which the word-alignment extractor reads (target tokens attending to
source tokens). Inference can run in bfloat16.

Source: huggingface/transformers PR #27114 (conventions.md §3 item 15), NVIDIA-NeMo/Automodel PR #2658 (item 16), conventions.md §2.3, §5 item 4
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def alibi_slopes(heads):
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(heads - closest)]
    return torch.tensor(slopes)


def build_alibi(keep, heads, dtype):
    positions = ((keep.cumsum(-1) - 1) * keep)[:, None, None, :]
    return (alibi_slopes(heads).to(keep.device)[None, :, None, None] * positions).to(dtype)


def prepare_attention_mask(keep, dtype):
    b, t = keep.shape
    min_value = torch.finfo(dtype).min
    future = torch.ones(t, t, dtype=torch.bool, device=keep.device).triu(1)
    causal = torch.zeros(t, t, dtype=dtype, device=keep.device).masked_fill(future, min_value)
    padding = torch.zeros(b, 1, 1, t, dtype=dtype, device=keep.device).masked_fill(~keep[:, None, None, :], min_value)
    return torch.minimum(causal, padding)


class BloomAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dense = nn.Linear(dim, dim)

    def forward(self, x, alibi, mask, output_attentions=False):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, self.heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        if not output_attentions:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi + mask)
            return self.dense(y.transpose(1, 2).reshape(b, t, d)), None
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + alibi + mask
        probs = scores.float().softmax(dim=-1).to(x.dtype)
        y = (probs @ v).transpose(1, 2).reshape(b, t, d)
        return self.dense(y), probs


class BloomBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = BloomAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, alibi, mask, output_attentions=False):
        h, probs = self.attn(self.ln1(x), alibi, mask, output_attentions)
        x = x + h
        return x + self.mlp(self.ln2(x)), probs


class BloomLM(nn.Module):
    def __init__(self, vocab=300, dim=64, heads=4, depth=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.embed_ln = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(BloomBlock(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, attention_mask, output_attentions=False):
        x = self.embed_ln(self.embed(input_ids))
        keep = attention_mask.bool()
        alibi = build_alibi(keep, self.heads, x.dtype)
        mask = prepare_attention_mask(keep, x.dtype)
        all_probs = []
        for block in self.blocks:
            x, probs = block(x, alibi, mask, output_attentions)
            all_probs.append(probs)
        return self.lm_head(self.ln_f(x)), all_probs


def left_pad(sequences, pad_id=0):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, width - len(s):] = torch.as_tensor(s)
        attention_mask[i, width - len(s):] = 1
    return ids, attention_mask


@torch.no_grad()
def translate(model, prompts, max_new_tokens=8, eos_id=2, dtype=torch.float32):
    model = model.to(dtype).eval()
    ids, attention_mask = left_pad(prompts)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits, _ = model(ids, attention_mask)
        next_ids = logits[:, -1].float().argmax(-1).masked_fill(done, eos_id)
        ids = torch.cat([ids, next_ids[:, None]], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(next_ids)[:, None]], dim=1)
        done |= next_ids == eos_id
        if done.all():
            break
    return ids, attention_mask


@torch.no_grad()
def extract_alignments(model, ids, attention_mask, src_lengths, layer=-1):
    _, all_probs = model(ids, attention_mask, output_attentions=True)
    probs = all_probs[layer].float().mean(dim=1)
    pad = (attention_mask == 0).sum(-1)
    links = []
    for i, src_len in enumerate(src_lengths):
        start = int(pad[i])
        src = slice(start, start + src_len)
        tgt = probs[i, start + src_len:, src]
        links.append([(int(j), t) for t, j in enumerate(tgt.argmax(-1).tolist())])
    return links
