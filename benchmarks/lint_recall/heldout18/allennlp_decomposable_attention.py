"""AllenNLP-style decomposable attention (premise / hypothesis) on AllenNLP 1.x boolean masks.

`get_text_field_mask` returns a bool mask (True = real token), and the module-level helpers follow
`allennlp.nn.util`: `replace_masked_values` uses `~mask`, `masked_max` fills `min_value_of_dtype`.
The memory-efficient branch of `masked_softmax` still inverts the mask the 0.x way, `(1 - mask)`,
which AllenNLP 0.9 did on float masks and which torch refuses on a bool tensor.

Source: huggingface/transformers#32195 (the `1 - mask` inversion of an attention mask) and #32113
(boolean masks reaching code written for 0/1 masks), conventions.md §1 (HF 4.x converter row).
"""
from typing import Dict

import torch
from torch import nn
from torch.nn import functional as F


def min_value_of_dtype(dtype: torch.dtype):
    return torch.finfo(dtype).min


def tiny_value_of_dtype(dtype: torch.dtype):
    return 1e-13 if dtype in (torch.float, torch.double) else 1e-4


def get_text_field_mask(text_field_tensors: Dict[str, Dict[str, torch.Tensor]], padding_id: int = 0) -> torch.BoolTensor:
    token_ids = text_field_tensors["tokens"]["tokens"]
    return token_ids != padding_id


def replace_masked_values(tensor: torch.Tensor, mask: torch.BoolTensor, replace_with: float) -> torch.Tensor:
    return tensor.masked_fill(~mask, replace_with)


def masked_softmax(vector: torch.Tensor, mask: torch.BoolTensor, dim: int = -1, memory_efficient: bool = False) -> torch.Tensor:
    if mask is None:
        return F.softmax(vector, dim=dim)
    while mask.dim() < vector.dim():
        mask = mask.unsqueeze(1)
    if not memory_efficient:
        result = F.softmax(vector * mask, dim=dim)
        result = result * mask
        return result / (result.sum(dim=dim, keepdim=True) + tiny_value_of_dtype(result.dtype))
    masked_vector = vector.masked_fill((1 - mask).to(dtype=torch.bool), min_value_of_dtype(vector.dtype))  # expect: MC512 allennlp
    return F.softmax(masked_vector, dim=dim)


def weighted_sum(matrix: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    return attention.bmm(matrix)


def masked_max(vector: torch.Tensor, mask: torch.BoolTensor, dim: int) -> torch.Tensor:
    return vector.masked_fill(~mask, min_value_of_dtype(vector.dtype)).max(dim=dim)[0]


class DecomposableAttention(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 32, num_labels: int = 3):
        super().__init__()
        self._text_field_embedder = nn.Embedding(vocab_size, dim, padding_idx=0)
        self._attend_feedforward = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self._compare_feedforward = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU())
        self._aggregate_feedforward = nn.Linear(2 * dim, num_labels)

    def forward(self, premise, hypothesis) -> Dict[str, torch.Tensor]:
        embedded_premise = self._text_field_embedder(premise["tokens"]["tokens"])
        embedded_hypothesis = self._text_field_embedder(hypothesis["tokens"]["tokens"])
        premise_mask = get_text_field_mask(premise)
        hypothesis_mask = get_text_field_mask(hypothesis)

        projected_premise = self._attend_feedforward(embedded_premise)
        projected_hypothesis = self._attend_feedforward(embedded_hypothesis)
        similarity_matrix = projected_premise.bmm(projected_hypothesis.transpose(1, 2))

        p2h_attention = masked_softmax(similarity_matrix, hypothesis_mask, memory_efficient=True)
        attended_hypothesis = weighted_sum(embedded_hypothesis, p2h_attention)
        h2p_attention = masked_softmax(similarity_matrix.transpose(1, 2).contiguous(), premise_mask, memory_efficient=True)
        attended_premise = weighted_sum(embedded_premise, h2p_attention)

        compared_premise = self._compare_feedforward(torch.cat([embedded_premise, attended_hypothesis], dim=-1))
        compared_premise = replace_masked_values(compared_premise, premise_mask.unsqueeze(-1), 0.0)
        compared_hypothesis = self._compare_feedforward(torch.cat([embedded_hypothesis, attended_premise], dim=-1))
        compared_hypothesis = masked_max(compared_hypothesis, hypothesis_mask.unsqueeze(-1), dim=1)

        aggregate_input = torch.cat([compared_premise.sum(dim=1), compared_hypothesis], dim=-1)
        label_logits = self._aggregate_feedforward(aggregate_input)
        return {"label_logits": label_logits, "label_probs": F.softmax(label_logits, dim=-1),
                "h2p_attention": h2p_attention}


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DecomposableAttention(vocab_size=30).eval()
    premise = {"tokens": {"tokens": torch.tensor([[4, 9, 12, 7, 0, 0], [3, 5, 8, 2, 6, 11]])}}
    hypothesis = {"tokens": {"tokens": torch.tensor([[13, 6, 0, 0], [7, 14, 9, 10]])}}
    with torch.no_grad():
        out = model(premise, hypothesis)
        alone = model({"tokens": {"tokens": premise["tokens"]["tokens"][:1, :4]}},
                      {"tokens": {"tokens": hypothesis["tokens"]["tokens"][:1, :2]}})
    print("label probs:", out["label_probs"][0].tolist())
    print("padded vs alone:", (out["label_logits"][0] - alone["label_logits"][0]).abs().max().item())
