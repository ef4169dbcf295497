"""Held-out 9: a variable-length sequence classifier on `nn.TransformerEncoder` whose padding mask
is made by the collate function as a float tensor and handed to `src_key_padding_mask`.

Source: pytorch/pytorch#147209 ("Passing `src_key_padding_mask` as `bool` vs `float` causes
different outputs from `nn.TransformerEncoderLayer`": a float key-padding mask is not a selection,
it is added to the scores, so a 1.0 / 0.0 padding mask adds +1 to the padded keys and masks nothing;
closed as expected behaviour, the bool mask is the one that masks).
Surroundings: the mask built in a `collate_fn` next to the padded batch, returned in a dict, taken
out in the model's forward and passed by keyword to the encoder.
"""

from typing import Dict, List

import torch
from torch import nn


def collate_sequences(batch: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Pads per-sample (T_i, F) feature tensors to (B, T_max, F)."""
    lengths = torch.tensor([item["features"].shape[0] for item in batch])
    max_len = int(lengths.max())
    n_features = batch[0]["features"].shape[1]
    features = torch.zeros(len(batch), max_len, n_features)
    for i, item in enumerate(batch):
        features[i, : lengths[i]] = item["features"]
    positions = torch.arange(max_len)
    padding_mask = (positions[None, :] >= lengths[:, None]).float()  # 1.0 at padding
    labels = torch.stack([item["label"] for item in batch])
    return {"features": features, "padding_mask": padding_mask, "labels": labels}


class SequenceClassifier(nn.Module):
    def __init__(self, n_features: int, d_model: int = 64, nhead: int = 4, num_layers: int = 2,
                 n_classes: int = 2, dropout: float = 0.1):
        super().__init__()
        self.input_proj = nn.Linear(n_features, d_model)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=4 * d_model,
                                           dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=num_layers)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.input_proj(batch["features"])
        padding_mask = batch["padding_mask"]
        x = self.encoder(x, src_key_padding_mask=padding_mask)  # expect: MC508 dict
        keep = (1.0 - padding_mask).unsqueeze(-1)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)
