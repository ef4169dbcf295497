"""UvA Deep Learning tutorial 6 ("Transformers and Multi-Head Attention"), run in float16 (correct twin).

The notebook's `scaled_dot_product`, `expand_mask` (2-D / 3-D / 4-D masks to
(batch, heads, seq, seq)), `MultiheadAttention` from scratch with `return_attention`,
`EncoderBlock`, `TransformerEncoder.get_attention_maps`, used by a learner on padded sequences
and then converted with `.half()` for faster inference. The learner had replaced the notebook's
`-9e15` (which overflows float16) by "the most negative float", `torch.finfo(torch.float32).min`,
which does not fit in float16 either: `masked_fill` on the half-precision logits raises.

Twin: fills with `torch.finfo(attn_logits.dtype).min`, the minimum of the logits' own dtype.

Source: huggingface/lerobot PR #710 (a float32 minimum used for half-precision masking);
conventions.md §2.3 and §3 item 19.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def scaled_dot_product(q, k, v, mask=None):
    d_k = q.size()[-1]
    attn_logits = torch.matmul(q, k.transpose(-2, -1))
    attn_logits = attn_logits / math.sqrt(d_k)
    if mask is not None:
        attn_logits = attn_logits.masked_fill(mask == 0, torch.finfo(attn_logits.dtype).min)
    attention = F.softmax(attn_logits, dim=-1)
    values = torch.matmul(attention, v)
    return values, attention


# Helper function to support different mask shapes.
# Output shape supports (batch_size, number of heads, seq length, seq length)
# If 2D: broadcasted over batch size and number of heads
# If 3D: broadcasted over number of heads
# If 4D: leave as is
def expand_mask(mask):
    assert mask.ndim >= 2, "Mask must be at least 2-dimensional with seq_length x seq_length"
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)
    while mask.ndim < 4:
        mask = mask.unsqueeze(0)
    return mask


class MultiheadAttention(nn.Module):

    def __init__(self, input_dim, embed_dim, num_heads):
        super().__init__()
        assert embed_dim % num_heads == 0, "Embedding dimension must be 0 modulo number of heads."
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        # Stack all weight matrices 1...h together for efficiency
        self.qkv_proj = nn.Linear(input_dim, 3 * embed_dim)
        self.o_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x, mask=None, return_attention=False):
        batch_size, seq_length, _ = x.size()
        if mask is not None:
            mask = expand_mask(mask)
        qkv = self.qkv_proj(x)
        # Separate Q, K, V from linear output
        qkv = qkv.reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim)
        qkv = qkv.permute(0, 2, 1, 3)  # [Batch, Head, SeqLen, Dims]
        q, k, v = qkv.chunk(3, dim=-1)
        values, attention = scaled_dot_product(q, k, v, mask=mask)
        values = values.permute(0, 2, 1, 3)  # [Batch, SeqLen, Head, Dims]
        values = values.reshape(batch_size, seq_length, self.embed_dim)
        o = self.o_proj(values)
        if return_attention:
            return o, attention
        return o


class EncoderBlock(nn.Module):

    def __init__(self, input_dim, num_heads, dim_feedforward, dropout=0.0):
        super().__init__()
        self.self_attn = MultiheadAttention(input_dim, input_dim, num_heads)
        self.linear_net = nn.Sequential(
            nn.Linear(input_dim, dim_feedforward), nn.Dropout(dropout), nn.ReLU(inplace=True),
            nn.Linear(dim_feedforward, input_dim))
        self.norm1 = nn.LayerNorm(input_dim)
        self.norm2 = nn.LayerNorm(input_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attn_out = self.self_attn(x, mask=mask)
        x = self.norm1(x + self.dropout(attn_out))
        return self.norm2(x + self.dropout(self.linear_net(x)))


class TransformerEncoder(nn.Module):

    def __init__(self, num_layers, **block_args):
        super().__init__()
        self.layers = nn.ModuleList([EncoderBlock(**block_args) for _ in range(num_layers)])

    def forward(self, x, mask=None):
        for l in self.layers:
            x = l(x, mask=mask)
        return x

    @torch.no_grad()
    def get_attention_maps(self, x, mask=None):
        attention_maps = []
        for l in self.layers:
            _, attn_map = l.self_attn(x, mask=mask, return_attention=True)
            attention_maps.append(attn_map)
            x = l(x, mask=mask)
        return attention_maps


if __name__ == "__main__":
    torch.manual_seed(42)
    encoder = TransformerEncoder(num_layers=2, input_dim=32, num_heads=4, dim_feedforward=64).eval()
    x = torch.randn(3, 7, 32)
    lengths = torch.tensor([7, 5, 2])
    pad_mask = (torch.arange(7)[None, :] < lengths[:, None]).unsqueeze(1)  # (B, 1, S): 1 = real key
    out32 = encoder(x, mask=pad_mask)
    print("fp32 padded vs alone:", (out32[2, :2] - encoder(x[2:, :2], mask=pad_mask[2:, :, :2])[0]).abs().max().item())
    print("fp32 weight on padding:", encoder.get_attention_maps(x, mask=pad_mask)[0][2, :, :, 2:].sum().item())
    encoder = encoder.half()  # inference in float16
    with torch.no_grad():
        out16 = encoder(x.half(), mask=pad_mask)
    print("fp16 vs fp32:", (out16.float() - out32).abs().max().item())
