"""Padding-free SFT packing: flattening collator, 4-D block-causal mask, HF-style eager attention (correct twin).

Source: huggingface/transformers#32195 (custom 4-D masks and the 4.x inversion
`inverted_mask = 1.0 - attention_mask` followed by `masked_fill(..., torch.finfo(dtype).min)`)
and huggingface/transformers#32113 (boolean masks fed to `_prepare_4d_causal_attention_mask`);
conventions.md §1 ("HF 4.x AttentionMaskConverter" row). The 4-D mask is built as a bool keep-mask
and then inverted the 4.x way, and torch has no `-` for bool tensors.
Twin: the bool mask is cast to `dtype` before the inversion, `1.0 - expanded_mask.to(dtype)`.
"""

import torch
from torch import nn


class DataCollatorWithFlattening:
    """Concatenate examples into one row; position_ids restart at 0 for each example."""

    def __init__(self, ignore_index=-100):
        self.ignore_index = ignore_index

    def __call__(self, features):
        input_ids, labels, position_ids = [], [], []
        for f in features:
            ids = list(f["input_ids"])
            input_ids += ids
            labels += [self.ignore_index] + ids[1:]
            position_ids += list(range(len(ids)))
        as_row = lambda xs: torch.tensor([xs], dtype=torch.long)
        return {"input_ids": as_row(input_ids), "labels": as_row(labels), "position_ids": as_row(position_ids)}


def prepare_packed_4d_attention_mask(position_ids, dtype):
    """(B, L) position ids -> (B, 1, L, L) additive mask, 0 = attend, finfo.min = masked."""
    seq_len = position_ids.shape[-1]
    seq_idx = (position_ids == 0).cumsum(dim=-1)
    same_seq = seq_idx[:, :, None] == seq_idx[:, None, :]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=position_ids.device).tril()
    expanded_mask = (same_seq & causal)[:, None, :, :]
    # invert it and fill with negative infinity, as for a user-provided 4D mask
    inverted_mask = 1.0 - expanded_mask.to(dtype)
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    return torch.matmul(attn_weights, value).transpose(1, 2).contiguous()


class PackedAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask):
        bsz, q_len, _ = hidden_states.shape
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        attn_output = eager_attention_forward(self, query, key, value, attention_mask, self.scaling)
        return self.o_proj(attn_output.reshape(bsz, q_len, -1))


class PackedLM(nn.Module):
    def __init__(self, vocab_size=100, hidden_size=64, max_position_embeddings=128):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.embed_positions = nn.Embedding(max_position_embeddings, hidden_size)
        self.self_attn = PackedAttention(hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, position_ids, labels=None):
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        attention_mask = prepare_packed_4d_attention_mask(position_ids, hidden_states.dtype)
        hidden_states = hidden_states + self.self_attn(hidden_states, attention_mask)
        logits = self.lm_head(self.norm(hidden_states))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return loss, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PackedLM().eval()
    examples = [{"input_ids": [5, 17, 42, 9]}, {"input_ids": [7, 3, 11]}, {"input_ids": [60, 61, 62, 63, 64]}]
    batch = DataCollatorWithFlattening()(examples)
    with torch.no_grad():
        loss, logits = model(**batch)
        single = DataCollatorWithFlattening()(examples[1:2])
        _, alone = model(**single)
    print("packed loss:", round(loss.item(), 4))
    print("example 2, packed vs alone:", (logits[0, 4:7] - alone[0]).abs().max().item())
