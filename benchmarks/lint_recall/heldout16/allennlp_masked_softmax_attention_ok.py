"""Held-out 16 (correct twin): an AllenNLP-style attentive reader. Module-level utilities in the manner of
`allennlp.nn.util` (`get_text_field_mask`, `masked_softmax`, `weighted_sum`, `masked_mean`), an
`Attention` base class whose `forward(vector, matrix, matrix_mask)` normalises the similarities
of its subclasses (`_forward_internal`), a `BilinearAttention` subclass, and a model that attends
from the question summary over the passage tokens to score answer options.

Source: georg-wolflein/good-features PR #1 (a binary mask multiplied into the scores: softmax "will
still treat zeros as full-fledged elements"), HKUST-KnowComp/R-Net#34 ("the output
is [1, 1, 0], then after softmax is [0.42, 0.42, 0.16], wrong!"). `masked_softmax` multiplies the
logits by the 0/1 mask and returns the softmax, without AllenNLP's second multiplication and
renormalisation, so every padding token keeps the weight of a zero logit.
Twin: `masked_softmax` multiplies the probabilities by the mask again and renormalises them, as AllenNLP does.
"""

from typing import Dict, Optional

import torch
from torch import nn


def get_text_field_mask(token_ids: torch.Tensor, padding_index: int = 0) -> torch.BoolTensor:
    """(batch, num_tokens) mask, True for real tokens."""
    return token_ids != padding_index


def masked_softmax(vector: torch.Tensor, mask: Optional[torch.BoolTensor], dim: int = -1) -> torch.Tensor:
    """Softmax over `vector` restricted to the positions where `mask` is True."""
    if mask is None:
        return torch.nn.functional.softmax(vector, dim=dim)
    mask = mask.float()
    while mask.dim() < vector.dim():
        mask = mask.unsqueeze(1)
    result = torch.nn.functional.softmax(vector * mask, dim=dim)
    result = result * mask
    return result / (result.sum(dim=dim, keepdim=True) + 1e-13)


def weighted_sum(matrix: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    return attention.unsqueeze(1).bmm(matrix).squeeze(1)


def masked_mean(vector: torch.Tensor, mask: torch.BoolTensor, dim: int) -> torch.Tensor:
    replaced = vector.masked_fill(~mask, 0.0)
    return replaced.sum(dim=dim) / mask.sum(dim=dim).clamp(min=1).to(vector.dtype)


class Attention(nn.Module):
    """Computes attention between a vector and the rows of a matrix; subclasses give the similarity."""

    def __init__(self, normalize: bool = True) -> None:
        super().__init__()
        self._normalize = normalize

    def forward(self, vector: torch.Tensor, matrix: torch.Tensor,
                matrix_mask: Optional[torch.BoolTensor] = None) -> torch.Tensor:
        similarities = self._forward_internal(vector, matrix)
        if self._normalize:
            return masked_softmax(similarities, matrix_mask)
        return similarities

    def _forward_internal(self, vector: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class BilinearAttention(Attention):
    def __init__(self, vector_dim: int, matrix_dim: int, normalize: bool = True) -> None:
        super().__init__(normalize)
        self._weight_matrix = nn.Parameter(torch.empty(vector_dim, matrix_dim))
        self._bias = nn.Parameter(torch.zeros(1))
        nn.init.xavier_uniform_(self._weight_matrix)

    def _forward_internal(self, vector: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        intermediate = vector.mm(self._weight_matrix).unsqueeze(1)
        return intermediate.bmm(matrix.transpose(1, 2)).squeeze(1) + self._bias


class AttentiveReader(nn.Module):
    def __init__(self, vocab_size: int, embedding_dim: int = 32, hidden_dim: int = 32, num_options: int = 4):
        super().__init__()
        self._embedder = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self._question_encoder = nn.GRU(embedding_dim, hidden_dim, batch_first=True)
        self._passage_encoder = nn.GRU(embedding_dim, hidden_dim, batch_first=True)
        self._attention = BilinearAttention(hidden_dim, hidden_dim)
        self._output = nn.Linear(2 * hidden_dim, num_options)

    def forward(self, question: torch.Tensor, passage: torch.Tensor,
                label: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        question_mask = get_text_field_mask(question)
        passage_mask = get_text_field_mask(passage)
        encoded_question, _ = self._question_encoder(self._embedder(question))
        encoded_passage, _ = self._passage_encoder(self._embedder(passage))
        question_vector = masked_mean(encoded_question, question_mask.unsqueeze(-1), dim=1)
        passage_attention = self._attention(question_vector, encoded_passage, passage_mask)
        attended_passage = weighted_sum(encoded_passage, passage_attention)
        logits = self._output(torch.cat([question_vector, attended_passage], dim=-1))
        output = {"logits": logits, "probs": logits.softmax(-1), "passage_attention": passage_attention}
        if label is not None:
            output["loss"] = nn.functional.cross_entropy(logits, label)
        return output


if __name__ == "__main__":
    torch.manual_seed(0)
    model = AttentiveReader(vocab_size=30).eval()
    question = torch.tensor([[3, 4, 5], [6, 7, 0]])
    passage = torch.tensor([[8, 9, 10, 11, 12, 13], [14, 15, 16, 0, 0, 0]])
    with torch.no_grad():
        out = model(question, passage)
        alone = model(question[1:, :2], passage[1:, :3])
    print("attention on the padding of passage 1:", float(out["passage_attention"][1, 3:].sum()))
    print("logits of the padded example vs alone:", float((out["logits"][1] - alone["logits"][0]).abs().max()))
