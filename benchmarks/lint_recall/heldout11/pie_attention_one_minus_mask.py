"""Held-out 11: emanjavacas/pie (pie/models/attention.py `Attention` with general / bahdanau scorers,
pie/torch_utils.py `make_length_mask`), the attentional decoder of the lemmatizer.

Source: emanjavacas/pie PR #37 ("Torch 1.3": "Most of it was the use of int mask used as boolean,
which was touched by a breaking change inserted in 1.2.0"). Its diff of pie/models/attention.py
replaces `weights.masked_fill_(1 - mask, -float('inf'))` with `weights.masked_fill_(~(mask),
-float('inf'))` ("Torch 1.1 -> 1.2: (1 - mask) becomes ~(mask)"). `make_length_mask` returns a
comparison, a bool tensor since torch 1.2, and `1 - mask` on it raises at the first decoding step.
Surroundings: the mask made by a torch_utils helper from the source lengths inside the attention's
forward, expanded over the target steps, and used in place on the weights.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_length_mask(lengths):
    """
    Compute binary length mask.

    lengths: torch.Tensor(batch, dtype=int) should be on the desired
        output device.

    Returns
    =======

    mask: torch.ByteTensor(batch x seq_len)
    """
    maxlen, batch = lengths.detach().max(), len(lengths)
    return torch.arange(0, maxlen, dtype=torch.int64, device=lengths.device) \
        .repeat(batch, 1) \
        .lt(lengths.unsqueeze(1))


class Attention(nn.Module):
    """
    Global attention implementing the three scorer modules from Luong 15.

    Parameters:
    -----------
    - hid_dim: int, dimensionality of the query vector
    - att_dim: (optional) int, dimensionality of the attention space (only
        used by the bahdanau scorer). If not given it will default to hid_dim.
    - scorer: str, one of ('dot', 'general', 'bahdanau')
    """
    def __init__(self, hid_dim, att_dim=None, scorer='general'):
        self.att_dim = att_dim or hid_dim
        self.scorer = scorer
        super().__init__()
        if scorer == 'general':
            self.W_s = nn.Linear(hid_dim, hid_dim, bias=False)
        elif scorer == 'bahdanau':
            self.W_s = nn.Linear(hid_dim, self.att_dim, bias=False)
            self.W_t = nn.Linear(hid_dim, self.att_dim, bias=True)
            self.v_a = nn.Parameter(torch.randn(self.att_dim) * 0.1)
        self.linear_out = nn.Linear(hid_dim * 2, hid_dim)

    def forward(self, dec_out, enc_outs, lengths):
        """
        dec_out: (trg_seq_len x batch x hid_dim)
        enc_outs: (src_seq_len x batch x hid_dim)
        lengths: LongTensor (batch)
        """
        if self.scorer == 'general':
            # (batch x trg_seq_len x hid_dim) * (batch x hid_dim x src_seq_len)
            weights = torch.bmm(self.W_s(dec_out).transpose(0, 1),
                                enc_outs.transpose(0, 1).transpose(1, 2)).transpose(0, 1)
        else:
            src = self.W_s(enc_outs).unsqueeze(0)   # (1 x src_seq_len x batch x att_dim)
            trg = self.W_t(dec_out).unsqueeze(1)    # (trg_seq_len x 1 x batch x att_dim)
            weights = (torch.tanh(src + trg) @ self.v_a).transpose(1, 2)
        # weights: (trg_seq_len x batch x src_seq_len)

        mask = make_length_mask(lengths)
        # (batch x src_seq_len) => (trg_seq_len x batch x src_seq_len)
        mask = mask.unsqueeze(0).expand_as(weights)
        # weights = weights * mask.float()
        weights.masked_fill_(1 - mask, -float('inf'))  # expect: MC512 helper

        weights = F.softmax(weights, dim=2)
        # (eq 7) (batch x trg_seq_len x src_seq_len) * (batch x src_seq_len x hid_dim)
        context = torch.bmm(weights.transpose(0, 1), enc_outs.transpose(0, 1)).transpose(0, 1)
        # (eq 5) linear out combining context and hidden
        context = torch.tanh(self.linear_out(torch.cat([context, dec_out], 2)))

        return context, weights


class AttentionalDecoder(nn.Module):
    def __init__(self, hid_dim=32, vocab=40, scorer='general'):
        super().__init__()
        self.embs = nn.Embedding(vocab, hid_dim)
        self.rnn = nn.GRU(hid_dim, hid_dim)
        self.attn = Attention(hid_dim, scorer=scorer)
        self.proj = nn.Linear(hid_dim, vocab)

    def forward(self, targets, enc_outs, lengths):
        outs, _ = self.rnn(self.embs(targets))
        context, _ = self.attn(outs, enc_outs, lengths)
        return self.proj(context)
