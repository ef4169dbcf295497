"""MC508 correct twin: the keep-masks go to SDPA as bool, or are turned into 0 / -inf first.

Source: the fixes proposed in huggingface/diffusers#13621 (pass the bool pair mask) and
pytorch/pytorch#103963 (a bool attn_mask); torch's documented SDPA reference implementation
(pytorch/pytorch#163026: a float mask is added, a bool one is filled).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

q = k = v = torch.randn(2, 2, 4, 8)
raw = torch.rand(1, 1, 4, 4)
raw[..., 2:, :] = 0
out = F.scaled_dot_product_attention(q, k, v, raw.to(torch.bool))


class CogViewAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.to_out = nn.Linear(dim, dim)

    def forward(self, query, key, value, text_attn_mask, image_seq_length):
        batch_size, text_seq_length = text_attn_mask.shape
        text_attn_mask = text_attn_mask.float().to(query.device)
        mix = torch.ones((batch_size, text_seq_length + image_seq_length), device=query.device)
        mix[:, :text_seq_length] = text_attn_mask
        mix = mix.unsqueeze(2)
        pairs = mix @ mix.transpose(1, 2)
        attention_mask = (pairs > 0).unsqueeze(1)
        hidden = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        return self.to_out(hidden.transpose(1, 2).flatten(2, 3))


def encode(tokenizer, texts, q, k, v):
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    keep = enc["attention_mask"][:, None, None, :].to(q.dtype)
    keep = (1.0 - keep) * torch.finfo(q.dtype).min

    def attend(query):
        return sdpa(query, k, v, attn_mask=keep)

    return attend(q)


def eager_scores(q, k, input_ids, pad_token_id):
    scores = q @ k.transpose(-1, -2)
    pad_keep = (input_ids != pad_token_id)[:, None, None, :].float()
    scores += (1.0 - pad_keep) * -1e4
    return scores.softmax(-1)


def causal_float(q, k, v):
    n = q.size(-2)
    causal = torch.ones(n, n).tril()
    causal = causal.masked_fill(causal == 0, float("-inf")).masked_fill(causal == 1, 0.0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
