"""Held-out 6: a context-aware ranker's query/document attention that inverts its length mask with
`1 -` before filling the scores.

Source: wasiahmad/context_attentive_ir#6 ("Mask inversion raises RuntimeError": training the CARS
model on torch 1.2 stops with "Subtraction, the `-` operator, with a bool tensor is not supported";
the fix is the `~` / `logical_not()` inversion the error message suggests).
Surroundings: a module-level `sequence_mask` helper returning a bool keep-mask from lengths, a
static-method attention scorer that receives it under another name and inverts it inline as the
`masked_fill_` condition, and the session encoder calling it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as f


def sequence_mask(lengths: torch.Tensor, max_len: int = None) -> torch.Tensor:
    """True for the real positions of each row."""
    batch_size = lengths.numel()
    max_len = max_len or int(lengths.max())
    return (torch.arange(0, max_len, device=lengths.device)
            .type_as(lengths)
            .repeat(batch_size, 1)
            .lt(lengths.unsqueeze(1)))


class AttentionScorer(nn.Module):
    def __init__(self, query_dim: int, doc_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(query_dim, doc_dim, bias=False)

    @staticmethod
    def masked_softmax(energies: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        energies = energies.clone()
        energies.masked_fill_(1 - valid, -float("inf"))  # expect: MC512 method
        return f.softmax(energies, dim=-1)

    def forward(self, query_rep: torch.Tensor, doc_rep: torch.Tensor,
                doc_len: torch.Tensor) -> torch.Tensor:
        energies = torch.bmm(doc_rep, self.proj(query_rep).unsqueeze(2)).squeeze(2)
        keep = sequence_mask(doc_len, max_len=doc_rep.size(1))
        weights = self.masked_softmax(energies, keep)
        return torch.bmm(weights.unsqueeze(1), doc_rep).squeeze(1)


class SessionEncoder(nn.Module):
    def __init__(self, vocab_size: int, emsize: int = 300, nhid: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emsize, padding_idx=0)
        self.doc_rnn = nn.GRU(emsize, nhid, batch_first=True)
        self.query_rnn = nn.GRU(emsize, nhid, batch_first=True)
        self.scorer = AttentionScorer(nhid, nhid)

    def forward(self, query_ids: torch.Tensor, doc_ids: torch.Tensor,
                doc_len: torch.Tensor) -> torch.Tensor:
        _, q_hidden = self.query_rnn(self.embed(query_ids))
        doc_out, _ = self.doc_rnn(self.embed(doc_ids))
        return self.scorer(q_hidden[-1], doc_out, doc_len)
