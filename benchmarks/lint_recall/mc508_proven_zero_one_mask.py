"""MC508 with the 0/1 values proven in the file: a keep-mask cast to float and added.

Source: huggingface/diffusers#13621 ("Text attention masks do not actually mask tokens":
CogView4's `(attn_mask_matrix > 0).unsqueeze(1).to(query.dtype)` given to SDPA),
pytorch/pytorch#103963 (`attn_mask.to(torch.bool).to(torch.float)` gives plausible but wrong
numbers), timeseriesAI/tsai#171 (a non-bool attn_mask is not masked).
Surroundings: top of file, a method, a closure, `+=` in a helper, a positional argument, an alias.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

q = k = v = torch.randn(2, 2, 4, 8)
raw = torch.rand(1, 1, 4, 4)
raw[..., 2:, :] = 0
out = F.scaled_dot_product_attention(q, k, v, raw.to(torch.bool).to(torch.float))  # expect: MC508 positional


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
        attention_mask = (pairs > 0).unsqueeze(1).to(query.dtype)  # expect: MC508 method
        hidden = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)  # also: MC508
        return self.to_out(hidden.transpose(1, 2).flatten(2, 3))


def encode(tokenizer, texts, q, k, v):
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    keep = enc["attention_mask"][:, None, None, :].to(q.dtype)  # expect: MC508 alias

    def attend(query):
        return sdpa(query, k, v, attn_mask=keep)  # also: MC508

    return attend(q)


def eager_scores(q, k, input_ids, pad_token_id):
    scores = q @ k.transpose(-1, -2)
    pad_keep = (input_ids != pad_token_id)[:, None, None, :].float()  # expect: MC508 augmented
    scores += pad_keep  # also: MC508
    return scores.softmax(-1)


def causal_float(q, k, v):
    n = q.size(-2)
    causal = torch.ones(n, n).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal)  # expect: MC508 closure
