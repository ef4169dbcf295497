"""Held-out 4 twin: the future mask starts at diagonal 1 and the ALiBi mask is added to the
attention weights.

Source: baichuan-inc/Baichuan-13B#172, ofirpress/attention_with_linear_biases#7.
"""

import math

import torch
import torch.nn as nn


def _get_interleave(n: int) -> list:
    def _get_interleave_power_of_2(n: int) -> list:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return _get_interleave_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (_get_interleave_power_of_2(closest_power_of_2)
            + _get_interleave(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def _fill_with_neg_inf(t: torch.Tensor) -> torch.Tensor:
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


def _gen_alibi_mask(n_head: int, max_pos: int) -> torch.Tensor:
    slopes = torch.Tensor(_get_interleave(n_head))
    alibi = slopes.unsqueeze(1).unsqueeze(1) * torch.arange(max_pos).unsqueeze(0).unsqueeze(0).expand(n_head, -1, -1)
    alibi = alibi.view(n_head, 1, max_pos)
    alibi_mask = torch.triu(_fill_with_neg_inf(torch.zeros([max_pos, max_pos])), 1)
    return alibi_mask.unsqueeze(0) + alibi


class BaichuanAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.W_pack = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, hidden_states: torch.Tensor, alibi_mask: torch.Tensor) -> torch.Tensor:
        bsz, q_len, _ = hidden_states.size()
        proj = self.W_pack(hidden_states).unflatten(-1, (3, self.num_heads, self.head_dim))
        q, k, v = proj.permute(2, 0, 3, 1, 4)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + alibi_mask
        attn_weights = torch.softmax(attn_weights, dim=-1)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out)


class BaichuanModel(nn.Module):
    def __init__(self, vocab: int, hidden: int, heads: int, layers: int, max_pos: int) -> None:
        super().__init__()
        self.n_head = heads
        self.max_pos = max_pos
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(BaichuanAttention(hidden, heads) for _ in range(layers))

    def get_alibi_mask(self, tensor: torch.Tensor, seq_length: int) -> torch.Tensor:
        mask = _gen_alibi_mask(self.n_head, self.max_pos).to(tensor)
        return mask[:, :seq_length, :seq_length]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        alibi_mask = self.get_alibi_mask(h, input_ids.shape[1])
        for layer in self.layers:
            h = h + layer(h, alibi_mask)
        return h
