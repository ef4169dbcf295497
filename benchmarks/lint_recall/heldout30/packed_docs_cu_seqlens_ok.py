"""Packed causal-LM pre-training batches: documents concatenated into rows of fixed length.

The collator packs tokenized documents greedily into rows of `seq_len` tokens and records the
boundaries of each row as `cu_seqlens`, the cumulative offsets that flash_attn_varlen_func and
torch.nn.attention.varlen.varlen_attn take (the padding tail of a row is a segment of its own).
Position ids restart at every document. The eager reference path turns the offsets into a dense
block-diagonal causal bias, and the labels never cross a document boundary.

Source: seed self_attention_mask_guide.txt §6; conventions.md §1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0
IGNORE_INDEX = -100


def pack_documents(docs, seq_len):
    rows, cu_rows = [], []
    cur, cu = [], [0]
    for doc in docs:
        doc = doc[:seq_len]
        if len(cur) + len(doc) > seq_len:
            rows.append(cur)
            cu_rows.append(cu)
            cur, cu = [], [0]
        cur = cur + doc
        cu.append(len(cur))
    rows.append(cur)
    cu_rows.append(cu)
    for row, cu in zip(rows, cu_rows):
        if cu[-1] < seq_len:
            cu.append(seq_len)
        row.extend([PAD_ID] * (seq_len - len(row)))
    return torch.tensor(rows), [torch.tensor(cu, dtype=torch.int32) for cu in cu_rows]


def position_ids_from_cu_seqlens(cu_seqlens, seq_len):
    pos = torch.zeros(seq_len, dtype=torch.long)
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        pos[start:end] = torch.arange(end - start)
    return pos


def block_causal_bias(cu_seqlens, seq_len):
    doc_ids = torch.zeros(seq_len, dtype=torch.long)
    bias = torch.zeros(seq_len, seq_len)
    for i, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        doc_ids[start:end] = i
        bias[start:end, start:end] = 0.0
    bias[doc_ids[:, None] != doc_ids[None, :]] = float("-inf")
    future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
    return bias.masked_fill(future, float("-inf")), doc_ids


def packed_labels(input_ids, doc_ids):
    labels = input_ids[:, 1:].clone()
    crosses = doc_ids[:, 1:] != doc_ids[:, :-1]
    labels = labels.masked_fill(crosses | (labels == PAD_ID), IGNORE_INDEX)
    return labels


class EagerAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, attn_bias):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        weights = torch.softmax(scores + attn_bias[:, None], dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))


class PackedLM(nn.Module):
    def __init__(self, vocab=64, d_model=32, n_heads=4, n_layers=2, max_pos=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_pos, d_model)
        self.layers = nn.ModuleList(EagerAttention(d_model, n_heads) for _ in range(n_layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, input_ids, position_ids, attn_bias):
        h = self.tok(input_ids) + self.pos(position_ids)
        for layer in self.layers:
            h = h + layer(h, attn_bias)
        return self.head(h)


def packed_loss(model, input_ids, cu_seqlens_list):
    seq_len = input_ids.shape[1]
    position_ids = torch.stack([position_ids_from_cu_seqlens(cu, seq_len) for cu in cu_seqlens_list])
    biases, doc_ids = zip(*(block_causal_bias(cu, seq_len) for cu in cu_seqlens_list))
    logits = model(input_ids, position_ids, torch.stack(biases))
    labels = packed_labels(input_ids, torch.stack(doc_ids))
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=IGNORE_INDEX), logits


if __name__ == "__main__":
    torch.manual_seed(0)
    docs = [[5, 9, 3, 7], [11, 4, 6], [8, 2, 13, 15, 17], [21, 22], [30, 31, 32]]
    input_ids, cu_seqlens_list = pack_documents(docs, seq_len=10)
    model = PackedLM().eval()
    with torch.no_grad():
        loss, logits = packed_loss(model, input_ids, cu_seqlens_list)
    print("rows", input_ids.tolist())
    print("cu_seqlens", [cu.tolist() for cu in cu_seqlens_list])
    print("loss", loss.item(), "nan logits", torch.isnan(logits).any().item())
