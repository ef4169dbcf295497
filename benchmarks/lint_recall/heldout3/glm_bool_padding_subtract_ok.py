"""Held-out 3 twin: the same masks inverted with `~` / `.int()` before any arithmetic.

Source: the fixes of minghaochen/chatglm3-base-tuning#1 (`padding_mask.unsqueeze(-1).int() - 1`),
OpenNMT/OpenNMT-py#1524 (`~mask`) and yhenon/pytorch-retinanet PR #110.
"""

from typing import Optional

import torch
import torch.nn as nn


class GLMMaskBuilder(nn.Module):
    def __init__(self, pad_token_id: int) -> None:
        super().__init__()
        self.pad_token_id = pad_token_id

    def get_masks(self, input_ids: torch.Tensor, past_length: int = 0) -> torch.Tensor:
        batch_size, seq_length = input_ids.shape
        padding_mask = input_ids.ne(self.pad_token_id)
        full_attention_mask = torch.ones(batch_size, seq_length, seq_length, device=input_ids.device)
        full_attention_mask.tril_()
        if past_length:
            full_attention_mask = torch.cat(
                (torch.ones(batch_size, seq_length, past_length, device=input_ids.device), full_attention_mask), dim=-1
            )
        full_attention_mask = full_attention_mask * padding_mask.unsqueeze(1)
        if not past_length:
            full_attention_mask -= padding_mask.unsqueeze(-1).int() - 1
        full_attention_mask = (full_attention_mask < 0.5).bool()
        full_attention_mask.unsqueeze_(1)
        return full_attention_mask


def collate(batch: list[dict], pad_token_id: int) -> dict:
    max_len = max(len(item["input_ids"]) for item in batch)
    ids = torch.full((len(batch), max_len), pad_token_id, dtype=torch.long)
    for i, item in enumerate(batch):
        ids[i, : len(item["input_ids"])] = torch.tensor(item["input_ids"])
    attention_mask = ids != pad_token_id
    labels = ids.masked_fill(~attention_mask, -100)
    return {"input_ids": ids, "attention_mask": attention_mask, "labels": labels}


def sequence_mask(lengths: torch.Tensor, max_len: Optional[int] = None) -> torch.Tensor:
    batch_size = lengths.numel()
    max_len = max_len or int(lengths.max())
    return torch.arange(0, max_len, device=lengths.device).type_as(lengths).repeat(batch_size, 1).lt(lengths.unsqueeze(1))


class GatedRNNEncoder(nn.Module):
    def __init__(self, vocab: int, hidden: int, pad_idx: int = 0) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden, padding_idx=pad_idx)
        self.cell = nn.GRUCell(hidden, hidden)
        self.pad_idx = pad_idx

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = tokens.new_zeros(tokens.size(0), self.cell.hidden_size, dtype=torch.float)
        is_pad = tokens.eq(self.pad_idx)
        states = []
        for t in range(tokens.size(1)):
            h_new = self.cell(self.embed(tokens[:, t]), h)
            step_pad = is_pad[:, t].unsqueeze(1)
            h = torch.where(step_pad, h, h_new)
            states.append(h)
        return torch.stack(states, dim=1)


class PointerAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear_in = nn.Linear(dim, dim, bias=False)

    def forward(self, source: torch.Tensor, memory_bank: torch.Tensor, memory_lengths: torch.Tensor) -> torch.Tensor:
        align = torch.bmm(self.linear_in(source).unsqueeze(1), memory_bank.transpose(1, 2)).squeeze(1)
        keep = sequence_mask(memory_lengths, max_len=align.size(-1))
        align = align.masked_fill(~keep, float("-inf"))
        return torch.softmax(align, dim=-1)
