"""Held-out 8: the PyTorch "language modeling with nn.Transformer" tutorial
(beginner_source/transformer_tutorial.py: a TransformerModel, a module-level
`generate_square_subsequent_mask`, a train loop that slices the mask per batch).

Source: pytorch/tutorials#2250 ("[Bug] - error in attention mask LM tutorial": the reporter read
the docstring "an upper-triangular matrix of -inf, with zeros on diag" and proposed
`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=0)`; with diagonal=0 the diagonal is -inf
too, the first position can attend to nothing and its row is NaN after softmax; the tutorial's
diagonal=1 is right, so the issue was closed). The buggy file applies the proposed change.
Surroundings: a module-level helper, the mask built once before the epoch and sliced in the loop,
passed positionally into the model's forward and on as `src_mask`.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pe[: x.size(0)]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken: int, d_model: int, nhead: int, d_hid: int, nlayers: int, dropout: float = 0.5):
        super().__init__()
        self.model_type = "Transformer"
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers)
        self.encoder = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.decoder = nn.Linear(d_model, ntoken)

    def forward(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src: [seq_len, batch_size]; src_mask: [seq_len, seq_len]."""
        src = self.encoder(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        return self.decoder(output)


def generate_square_subsequent_mask(sz: int) -> Tensor:
    """Generates an upper-triangular matrix of -inf, with zeros on diag."""
    return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=0)  # expect: MC503 helper


bptt = 35


def get_batch(source: Tensor, i: int):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].reshape(-1)
    return data, target


def train(model: nn.Module, train_data: Tensor, ntokens: int, optimizer, criterion) -> None:
    model.train()
    src_mask = generate_square_subsequent_mask(bptt)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        seq_len = data.size(0)
        if seq_len != bptt:  # only on last batch
            src_mask = src_mask[:seq_len, :seq_len]
        output = model(data, src_mask)
        loss = criterion(output.view(-1, ntokens), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
