"""Held-out 9: deepvoice3_pytorch's convolutional decoder with per-layer attention
(`deepvoice3_pytorch/modules.py` `get_mask_from_lengths`, `deepvoice3.py` `AttentionLayer` and the
`Decoder` that builds the memory mask when `use_memory_mask` is set).

Source: r9y9/deepvoice3_pytorch#172 ("Mask tensor can take 0 and 1 values only" at
`x.data.masked_fill_(mask, mask_value)`: `get_mask_from_lengths` builds a uint8 mask with 1 at the
real text positions and returns `~mask`, which on a byte tensor is bitwise NOT, 254 and 255, not the
padding mask; the reply proposes `mask ^ 1`, the repository later builds a bool mask).
Surroundings: the mask made by a helper in another module-level function from a byte tensor filled
in a loop, chosen by a constructor flag, and handed to every attention layer of the decoder.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def Linear(in_features, out_features, dropout=0):
    m = nn.Linear(in_features, out_features)
    m.weight.data.normal_(mean=0, std=math.sqrt((1 - dropout) / in_features))
    m.bias.data.zero_()
    return m


def get_mask_from_lengths(memory, memory_lengths):
    """Get mask tensor from list of length
    Args:
        memory: (batch, max_time, dim)
        memory_lengths: array like
    """
    mask = memory.data.new(memory.size(0), memory.size(1)).byte().zero_()
    for idx, l in enumerate(memory_lengths):
        mask[idx][:l] = 1
    return ~mask  # expect: MC518 helper


class AttentionLayer(nn.Module):
    def __init__(self, conv_channels, embed_dim, dropout=0.1, window_ahead=3, window_backward=1):
        super(AttentionLayer, self).__init__()
        self.query_projection = Linear(conv_channels, embed_dim)
        self.key_projection = Linear(embed_dim, embed_dim)
        self.value_projection = Linear(embed_dim, embed_dim)
        self.out_projection = Linear(embed_dim, conv_channels)
        self.dropout = dropout
        self.window_ahead = window_ahead
        self.window_backward = window_backward

    def forward(self, query, encoder_out, mask=None, last_attended=None):
        keys, values = encoder_out
        residual = query
        values = self.value_projection(values)
        keys = self.key_projection(keys.transpose(1, 2)).transpose(1, 2)

        # attention
        x = self.query_projection(query)
        x = torch.bmm(x, keys)

        mask_value = -float("inf")
        if mask is not None:
            mask = mask.view(query.size(0), 1, -1)
            x.data.masked_fill_(mask, mask_value)

        if last_attended is not None:
            backward = last_attended - self.window_backward
            if backward > 0:
                x[:, :, :backward] = mask_value
            ahead = last_attended + self.window_ahead
            if ahead < x.size(-1):
                x[:, :, ahead:] = mask_value

        # softmax over last dim
        # (B, tgt_len, src_len)
        sz = x.size()
        x = F.softmax(x.view(sz[0] * sz[1], sz[2]), dim=1)
        x = x.view(sz)
        attn_scores = x

        x = F.dropout(x, p=self.dropout, training=self.training)
        x = torch.bmm(x, values)

        # scale attention output
        s = values.size(1)
        x = x * (s * math.sqrt(1.0 / s))

        # project back
        x = self.out_projection(x)
        x = (x + residual) * math.sqrt(0.5)
        return x, attn_scores


class Decoder(nn.Module):
    def __init__(self, embed_dim, in_dim=80, r=5, channels=256, num_attention_layers=4,
                 dropout=0.1, use_memory_mask=False):
        super(Decoder, self).__init__()
        self.dropout = dropout
        self.in_dim = in_dim
        self.r = r
        self.preattention = Linear(in_dim * r, channels)
        self.attention = nn.ModuleList(
            [AttentionLayer(channels, embed_dim, dropout=dropout) for _ in range(num_attention_layers)]
        )
        self.last_conv = Linear(channels, in_dim * r)
        self.use_memory_mask = use_memory_mask

    def forward(self, encoder_out, inputs=None, text_positions=None, lengths=None):
        # Grouping multiple frames if necessary
        if inputs.size(-1) == self.in_dim:
            inputs = inputs.view(inputs.size(0), inputs.size(1) // self.r, -1)
        assert inputs.size(-1) == self.in_dim * self.r

        keys, values = encoder_out

        if self.use_memory_mask and lengths is not None:
            mask = get_mask_from_lengths(keys, lengths)
        else:
            mask = None

        # transpose only once to speed up attention layers
        keys = keys.transpose(1, 2).contiguous()

        x = F.dropout(inputs, p=self.dropout, training=self.training)
        x = self.preattention(x)
        alignments = []
        for attention in self.attention:
            x, alignment = attention(x, (keys, values), mask=mask)
            alignments.append(alignment)

        outputs = torch.sigmoid(self.last_conv(x))
        return outputs, torch.stack(alignments)
