"""OpenNMT-py-style RNN decoder with Luong global attention over a transformer encoder.

The encoder keeps OpenNMT's conventions: `mask = ~sequence_mask(lengths).unsqueeze(1)` (True at
padding) and `scores.float().masked_fill(mask, -1e18)`. The decoder's GlobalAttention multiplies the
alignment scores by the 0/1 length mask before the softmax instead of filling them.

Source: seed self_attention_mask_guide.txt §3 "常见误区" (a mask is added, not multiplied) and Q3
(additive -inf mask vs multiplicative 0 mask), conventions.md §1 direction cheat-sheet.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sequence_mask(lengths, max_len=None):
    """Creates a boolean mask from sequence lengths."""
    batch_size = lengths.numel()
    max_len = max_len or lengths.max()
    return torch.arange(0, max_len, device=lengths.device).type_as(lengths).repeat(batch_size, 1).lt(lengths.unsqueeze(1))


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, dropout=0.1):
        super().__init__()
        self.dim_per_head = model_dim // head_count
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, model_dim)
        self.linear_values = nn.Linear(model_dim, model_dim)
        self.linear_query = nn.Linear(model_dim, model_dim)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask=None):
        batch_size = key.size(0)

        def shape(x):
            return x.view(batch_size, -1, self.head_count, self.dim_per_head).transpose(1, 2)

        key, value, query = shape(self.linear_keys(key)), shape(self.linear_values(value)), shape(self.linear_query(query))
        query = query / math.sqrt(self.dim_per_head)
        scores = torch.matmul(query, key.transpose(2, 3)).float()
        if mask is not None:
            mask = mask.unsqueeze(1)  # [B, 1, 1, T_values]
            scores = scores.masked_fill(mask, -1e18)
        attn = self.softmax(scores).to(query.dtype)
        context = torch.matmul(self.dropout(attn), value)
        context = context.transpose(1, 2).contiguous().view(batch_size, -1, self.head_count * self.dim_per_head)
        return self.final_linear(context)


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, vocab_size, dropout=0.1):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model, padding_idx=1)
        self.attns = nn.ModuleList([MultiHeadedAttention(heads, d_model, dropout) for _ in range(num_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model, eps=1e-6) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, src, lengths):
        out = self.embeddings(src)
        mask = ~sequence_mask(lengths).unsqueeze(1)
        for attn, norm in zip(self.attns, self.norms):
            input_norm = norm(out)
            out = attn(input_norm, input_norm, input_norm, mask=mask) + out
        return self.layer_norm(out), lengths


class GlobalAttention(nn.Module):
    """Luong attention, attn_type "general"."""

    def __init__(self, dim):
        super().__init__()
        self.linear_in = nn.Linear(dim, dim, bias=False)
        self.linear_out = nn.Linear(dim * 2, dim, bias=False)

    def forward(self, source, memory_bank, memory_lengths=None):
        source = source.unsqueeze(1)  # one step: batch x 1 x dim
        batch, source_l, dim = memory_bank.size()
        align = torch.bmm(self.linear_in(source), memory_bank.transpose(1, 2))
        if memory_lengths is not None:
            mask = sequence_mask(memory_lengths, max_len=align.size(-1))
            mask = mask.unsqueeze(1)  # Make it broadcastable.
            align = align * mask  # expect: MC520 opennmt
        align_vectors = F.softmax(align.view(batch, source_l), -1).view(batch, 1, source_l)  # also: MC520
        c = torch.bmm(align_vectors, memory_bank)
        attn_h = torch.tanh(self.linear_out(torch.cat([c, source], 2)))
        return attn_h.squeeze(1), align_vectors.squeeze(1)


class RNNDecoder(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model, padding_idx=1)
        self.rnn = nn.GRUCell(d_model, d_model)
        self.attn = GlobalAttention(d_model)

    def forward(self, tgt, memory_bank, memory_lengths):
        hidden = memory_bank.new_zeros(memory_bank.size(0), memory_bank.size(2))
        dec_outs, attns = [], []
        for emb_t in self.embeddings(tgt).split(1, dim=1):
            hidden = self.rnn(emb_t.squeeze(1), hidden)
            decoder_output, p_attn = self.attn(hidden, memory_bank, memory_lengths=memory_lengths)
            dec_outs.append(decoder_output)
            attns.append(p_attn)
        return torch.stack(dec_outs, 1), torch.stack(attns, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder, decoder = TransformerEncoder(2, 32, 4, 40).eval(), RNNDecoder(32, 40).eval()
    src = torch.tensor([[5, 9, 12, 7, 3, 1, 1], [8, 4, 6, 2, 11, 13, 10]])  # pad = 1
    lengths, tgt = torch.tensor([5, 7]), torch.tensor([[2, 6, 9], [2, 3, 4]])
    with torch.no_grad():
        memory_bank, lengths = encoder(src, lengths)
        out, attns = decoder(tgt, memory_bank, lengths)
        alone_mb, _ = encoder(src[:1, :5], lengths[:1])
        alone, _ = decoder(tgt[:1], alone_mb, lengths[:1])
    print("attention on padding:", attns[0, :, 5:].sum(-1).tolist())
    print("padded vs alone:", (out[0] - alone[0]).abs().max().item())
