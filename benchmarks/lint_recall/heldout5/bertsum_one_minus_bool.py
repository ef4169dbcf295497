"""Held-out 5: an extractive summariser's batch builder that inverts comparison masks with `1 -`.

Source: nlpyang/BertSum#73 ("RuntimeError: Subtraction, the `-` operator, with a bool tensor is not
supported" at `mask = 1 - (src == 0)` in `Batch.__init__`, data_loader.py; the same builder makes
`mask_cls = 1 - (clss == -1)`).
Surroundings: a batch class's __init__ building several masks, a module-level helper, the summariser
that consumes them.
"""

import torch
import torch.nn as nn


def sequence_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    return 1 - (ids == pad_id)  # expect: MC512 function


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
        mask = 1 - (src == 0)  # expect: MC512 method
        clss = torch.tensor(self._pad(pre_clss, -1))
        mask_cls = 1 - (clss == -1)  # expect: MC512 method
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
