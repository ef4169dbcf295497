"""Held-out 10: a fastNLP-style sequence encoder that runs nn.MultiheadAttention (time-first) over
a padded batch, the padding mask made from lengths with fastNLP's `seq_len_to_mask`.

Source: pytorch/pytorch#27968 ("MultiheadAttention incorrectly handles mask": the reporter builds
`key_padding_mask = seq_len_to_mask([5, 3, 1, 0], max_len=5)` and passes it to
nn.MultiheadAttention; `seq_len_to_mask` is True at the real tokens while `key_padding_mask` hides
the positions that are True, so each sequence attends only to its padding, the length-5 sequence
to nothing, and the printed weights come out wrong or NaN).
Surroundings: the batch arrives as a fastNLP-style dict (`words`, `seq_len`), the mask is made by
a helper and carried under the name the API expects into a wrapper module, then by keyword.
"""

import torch
from torch import nn


def seq_len_to_mask(seq_len, max_len=None):
    """[batch] lengths -> [batch, max_len] bool mask, True at the real tokens (fastNLP.core.utils)."""
    batch_size = seq_len.size(0)
    max_len = int(max_len) if max_len else seq_len.max().long()
    broad_cast_seq_len = torch.arange(max_len).expand(batch_size, -1).to(seq_len)
    return broad_cast_seq_len.lt(seq_len.unsqueeze(1))


class AttnSeqEncoder(nn.Module):
    def __init__(self, vocab_size, embed_dim=20, num_heads=5, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.self_attn = MultiHeadSelfAttention(embed_dim, num_heads)
        self.fc = nn.Linear(embed_dim, num_classes)

    def forward(self, words, seq_len):
        x = self.embed(words)
        key_padding_mask = seq_len_to_mask(seq_len, max_len=words.size(1))  # expect: MC511 helper
        x, attn_weights = self.self_attn(x, key_padding_mask=key_padding_mask)
        x = x.masked_fill(~seq_len_to_mask(seq_len, max_len=words.size(1))[..., None], 0.0)
        pooled = x.sum(1) / seq_len.clamp(min=1)[:, None].float()
        return {"pred": self.fc(pooled), "attn": attn_weights}


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.1):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim=embed_dim, num_heads=num_heads, dropout=dropout)

    def forward(self, x, key_padding_mask=None):
        # x: [batch, seq, dim] -> nn.MultiheadAttention wants [seq, batch, dim]
        q = k = v = x.transpose(0, 1)
        ao, aow = self.attn(q, k, v, key_padding_mask=key_padding_mask)  # also: MC511
        return ao.transpose(0, 1), aow


def predict(model, batch_x):
    model.eval()
    with torch.no_grad():
        return model(batch_x["words"], batch_x["seq_len"])["pred"].argmax(-1)
