"""Four causal multi-head attention implementations side by side, LLMs-from-scratch bonus style.

Source: rasbt/LLMs-from-scratch#1061 ("Bug in Ch03 Bonus02: PyTorch's SDPA without
FlashAttention": the `torch.triu(..., diagonal=1).bool()` buffer, True = masked as
nn.MultiheadAttention wants it, passed to scaled_dot_product_attention, where True = attend),
pytorch/pytorch#29546 (flipped look-ahead mask), conventions.md §3 items 9 and 14.
"""

import torch
import torch.nn as nn


class Ch03_MHA(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        shape = (b, num_tokens, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(shape).transpose(1, 2)
        queries = self.W_query(x).view(shape).transpose(1, 2)
        values = self.W_value(x).view(shape).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class MHAPyTorchScaledDotProduct(nn.Module):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "embed_dim is indivisible by num_heads"
        self.num_heads, self.context_length = num_heads, context_length
        self.head_dim, self.d_out = d_out // num_heads, d_out
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.dropout = dropout

    def forward(self, x):
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x).view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)
        queries, keys, values = qkv.permute(2, 0, 3, 1, 4)
        use_dropout = 0.0 if not self.training else self.dropout
        context_vec = nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=None, dropout_p=use_dropout, is_causal=True)
        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)
        return self.proj(context_vec)


class MHAPyTorchSDPAWithoutFlash(MHAPyTorchScaledDotProduct):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__(d_in, d_out, num_heads, context_length, dropout, qkv_bias)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())  # expect: MC521 notebook

    def forward(self, x):
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x).view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)
        queries, keys, values = qkv.permute(2, 0, 3, 1, 4)
        use_dropout = 0.0 if not self.training else self.dropout
        # Ensure attn_mask is compatible with expected shape and `batch_first=True`
        # No need to manually adjust for num_heads; ensure it's right for the sequence
        if self.context_length >= num_tokens:
            attn_mask = self.mask[:num_tokens, :num_tokens]
        else:
            attn_mask = self.mask[: self.context_length, : self.context_length]
        context_vec = nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask, dropout_p=use_dropout, is_causal=False)  # also: MC521
        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)
        return self.proj(context_vec)


class MHAPyTorchClass(nn.Module):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False, need_weights=True):
        super().__init__()
        self.context_length = context_length
        self.multihead_attn = nn.MultiheadAttention(embed_dim=d_out, num_heads=num_heads, dropout=dropout,
                                                    bias=qkv_bias, add_bias_kv=qkv_bias, batch_first=True)
        self.need_weights = need_weights
        self.proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        batch_size, num_tokens, _ = x.shape
        if self.context_length >= num_tokens:
            attn_mask = self.mask[:num_tokens, :num_tokens]
        else:
            attn_mask = self.mask[: self.context_length, : self.context_length]
        attn_output, _ = self.multihead_attn(x, x, x, attn_mask=attn_mask, need_weights=self.need_weights)
        return self.proj(attn_output)


if __name__ == "__main__":
    torch.manual_seed(123)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch_size, context_len, embed_dim = 2, 16, 64
    embeddings = torch.randn((batch_size, context_len, embed_dim), device=device)
    changed = embeddings.clone()
    changed[:, -1] = torch.randn(batch_size, embed_dim)  # only the last token changes

    variants = {
        "1) Ch03 MHA": Ch03_MHA(embed_dim, embed_dim, context_len, 0.0, num_heads=8),
        "2) PyTorch SDPA": MHAPyTorchScaledDotProduct(embed_dim, embed_dim, 8, context_len),
        "3) PyTorch SDPA w/o Flash": MHAPyTorchSDPAWithoutFlash(embed_dim, embed_dim, 8, context_len),
        "4) nn.MultiheadAttention": MHAPyTorchClass(embed_dim, embed_dim, 8, context_len),
    }
    for name, mha in variants.items():
        mha = mha.to(device).eval()
        with torch.no_grad():
            out, out2 = mha(embeddings), mha(changed)
        leak = (out[:, :-1] - out2[:, :-1]).abs().max().item()
        print(f"{name:28s} out {tuple(out.shape)}  earlier tokens moved by {leak:.3g}")
