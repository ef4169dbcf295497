"""PyTorch tutorial "Language Modeling with nn.Transformer and torchtext", retyped by a learner.

`TransformerModel`, `PositionalEncoding`, `batchify` / `get_batch` with `bptt`, `train()` /
`evaluate()` slicing the mask built by the module-level `generate_square_subsequent_mask(sz)`;
a repeating token stream stands in for WikiText-2. Retyped from memory, the helper lost
`diagonal=1`: `torch.triu` keeps the main diagonal, so every position is also masked from
itself, and row 0 can attend to nothing.

Source: seed self_attention_mask_guide.txt §3 `generate_causal_mask` (`torch.triu(torch.ones(sz,
sz) * float('-inf'), diagonal=1)`, the tutorial's own helper) with the diagonal argument dropped.
"""
import math
from typing import Tuple

import torch
from torch import nn, Tensor
from torch.nn import TransformerEncoder, TransformerEncoderLayer

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class TransformerModel(nn.Module):
    def __init__(self, ntoken: int, d_model: int, nhead: int, d_hid: int,
                 nlayers: int, dropout: float = 0.5):
        super().__init__()
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.decoder = nn.Linear(d_model, ntoken)
        self.init_weights()

    def init_weights(self) -> None:
        initrange = 0.1
        self.encoder.weight.data.uniform_(-initrange, initrange)
        self.decoder.bias.data.zero_()
        self.decoder.weight.data.uniform_(-initrange, initrange)

    def forward(self, src: Tensor, src_mask: Tensor) -> Tensor:
        src = self.encoder(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        return self.decoder(output)


def generate_square_subsequent_mask(sz: int) -> Tensor:
    """Generates an upper-triangular matrix of -inf, with zeros on diag."""
    return torch.triu(torch.ones(sz, sz) * float('-inf'))  # expect: MC503 tutorial


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.pe[:x.size(0)])


def batchify(data: Tensor, bsz: int) -> Tensor:
    seq_len = data.size(0) // bsz
    data = data[:seq_len * bsz].view(bsz, seq_len).t().contiguous()
    return data.to(device)


bptt = 12


def get_batch(source: Tensor, i: int) -> Tuple[Tensor, Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].reshape(-1)
    return data, target


ntokens = 10
stream = torch.arange(2000) % ntokens  # "0 1 2 ... 9 0 1 ..." stands in for WikiText-2
train_data, val_data = batchify(stream[:1600], 8), batchify(stream[1600:], 4)
model = TransformerModel(ntokens, d_model=32, nhead=2, d_hid=64, nlayers=2, dropout=0.1).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)


def train(model: nn.Module) -> None:
    model.train()
    src_mask = generate_square_subsequent_mask(bptt).to(device)
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


def evaluate(model: nn.Module, eval_data: Tensor) -> float:
    model.eval()
    total_loss = 0.
    src_mask = generate_square_subsequent_mask(bptt).to(device)
    with torch.no_grad():
        for i in range(0, eval_data.size(0) - 1, bptt):
            data, targets = get_batch(eval_data, i)
            seq_len = data.size(0)
            if seq_len != bptt:
                src_mask = src_mask[:seq_len, :seq_len]
            output = model(data, src_mask)
            total_loss += seq_len * criterion(output.view(-1, ntokens), targets).item()
    return total_loss / (len(eval_data) - 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    for epoch in range(1, 4):
        train(model)
        print(f"epoch {epoch}: valid loss {evaluate(model, val_data):.4f}")
    mask = generate_square_subsequent_mask(4)
    print("query rows with no visible key:", torch.isinf(mask).all(dim=1).nonzero().flatten().tolist())
