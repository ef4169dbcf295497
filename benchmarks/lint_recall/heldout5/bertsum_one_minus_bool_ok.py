"""Held-out 5 twin: the summariser's batch builder inverting its comparison masks with `~`.

Source: the fix given in the PyTorch error message quoted on nlpyang/BertSum#73 ("use the `~` or
`logical_not()` operator instead").
"""

import torch
import torch.nn as nn


def sequence_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    return ~(ids == pad_id)


class Batch:
    @staticmethod
    def _pad(data: list, pad_id: int, width: int = -1) -> list:
        if width == -1:
            width = max(len(d) for d in data)
        return [d + [pad_id] * (width - len(d)) for d in data]

    def __init__(self, data: list, device: str, is_test: bool = False) -> None:
        pre_src = [x[0] for x in data]
        pre_segs = [x[2] for x in data]
        pre_clss = [x[3] for x in data]
        pre_labels = [x[1] for x in data]
        src = torch.tensor(self._pad(pre_src, 0))
        labels = torch.tensor(self._pad(pre_labels, 0))
        segs = torch.tensor(self._pad(pre_segs, 0))
        mask = ~(src == 0)
        clss = torch.tensor(self._pad(pre_clss, -1))
        mask_cls = ~(clss == -1)
        clss[clss == -1] = 0
        self.src, self.labels, self.segs = src.to(device), labels.to(device), segs.to(device)
        self.mask, self.clss, self.mask_cls = mask.to(device), clss.to(device), mask_cls.to(device)


class Summarizer(nn.Module):
    def __init__(self, bert: nn.Module, hidden: int) -> None:
        super().__init__()
        self.bert = bert
        self.classifier = nn.Linear(hidden, 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        top_vec = self.bert(batch.src, token_type_ids=batch.segs, attention_mask=batch.mask)[0]
        sents_vec = top_vec[torch.arange(top_vec.size(0)).unsqueeze(1), batch.clss]
        sents_vec = sents_vec * batch.mask_cls[:, :, None].float()
        return torch.sigmoid(self.classifier(sents_vec).squeeze(-1)) * batch.mask_cls.float()
