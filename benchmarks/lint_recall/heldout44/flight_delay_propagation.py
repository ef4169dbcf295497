"""Real-time arrival-delay prediction along an aircraft's daily rotation, written in the style of
pytorch/examples' word_language_model (``PositionalEncoding``, ``TransformerModel`` with
``src_mask``, ``_generate_square_subsequent_mask``, ``has_mask``, sequence-first tensors,
``batchify`` / ``get_batch``-like helpers, ``train`` / ``evaluate`` with ``log_interval``).

Each leg of a tail's day is a step; the input of leg i carries its schedule, turnaround slack,
origin congestion and weather and the observed delay of leg i - 1, and the model predicts the
arrival delay of leg i from the legs flown so far. Synthetic airline with delay propagation.

Source: seed self_attention_mask_guide.txt (section 3, generate_causal_mask; section 7, Q3);
conventions.md section 2.3.
"""

import math
import random

import torch
import torch.nn as nn

MAX_LEGS = 8


def simulate_rotation(rng):
    n_legs = rng.randint(2, MAX_LEGS)
    hub_congested = rng.random() < 0.3
    legs, delays, prev = [], [], max(0.0, rng.gauss(5, 15))
    hour = rng.uniform(5, 8)
    for i in range(n_legs):
        slack = rng.uniform(10, 60)
        congestion = (1.0 if hub_congested and i % 2 == 0 else 0.0) + rng.random() * 0.5
        storm = float(rng.random() < 0.08)
        delay = max(0.0, prev - slack) + 25 * congestion * rng.random() + 60 * storm * rng.random() + rng.gauss(0, 3)
        legs.append([hour / 24, slack / 60, congestion, storm, prev / 60])
        delays.append(max(0.0, delay))
        prev, hour = delays[-1], hour + rng.uniform(1.5, 3.0)
    return legs, delays


def batchify(rotations):
    n = len(rotations)
    data = torch.zeros(MAX_LEGS, n, 5)
    target = torch.zeros(MAX_LEGS, n)
    leg_mask = torch.zeros(MAX_LEGS, n, dtype=torch.bool)
    for j, (legs, delays) in enumerate(rotations):
        data[: len(legs), j] = torch.tensor(legs)
        target[: len(legs), j] = torch.tensor(delays) / 60
        leg_mask[: len(legs), j] = True
    return data, target, leg_mask


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0), :])


class TransformerModel(nn.Module):
    def __init__(self, nfeat, ninp, nhead, nhid, nlayers, dropout=0.1):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Linear(nfeat, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, 1)

    def _generate_square_subsequent_mask(self, sz):
        mask = torch.triu(torch.ones(sz, sz), diagonal=1) * float("-inf")  # expect: MC522 method
        return mask

    def forward(self, src, leg_mask, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            self.src_mask = None
        padding = torch.zeros(leg_mask.shape[::-1]).masked_fill(~leg_mask.t(), float("-inf"))
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        output = self.transformer_encoder(src, self.src_mask, src_key_padding_mask=padding)
        return self.decoder(output).squeeze(-1)


def masked_mse(pred, target, leg_mask):
    return ((pred - target) ** 2)[leg_mask].mean()


def train(model, rotations, optimizer, epoch, batch_size=32, log_interval=40):
    model.train()
    total_loss = 0.0
    for batch, i in enumerate(range(0, len(rotations), batch_size)):
        data, target, leg_mask = batchify(rotations[i : i + batch_size])
        loss = masked_mse(model(data, leg_mask), target, leg_mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        total_loss += loss.item()
        if batch % log_interval == 0 and batch > 0:
            print(f"| epoch {epoch:3d} | {batch:5d} batches | loss {total_loss / log_interval:5.3f}")
            total_loss = 0.0


def evaluate(model, rotations):
    model.eval()
    with torch.no_grad():
        data, target, leg_mask = batchify(rotations)
        pred = model(data, leg_mask)
        mae = (pred - target).abs()[leg_mask].mean().item() * 60
        late = target[leg_mask] > 0.25
        hit = ((pred[leg_mask] > 0.25) == late).float().mean().item()
    return mae, hit


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    train_rot = [simulate_rotation(rng) for _ in range(3200)]
    val_rot = [simulate_rotation(rng) for _ in range(800)]
    model = TransformerModel(nfeat=5, ninp=32, nhead=4, nhid=64, nlayers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_delays = [d for _, ds in train_rot for d in ds]
    mean_delay = sum(train_delays) / len(train_delays)
    val_delays = [d for _, ds in val_rot for d in ds]
    baseline = sum(abs(d - mean_delay) for d in val_delays) / len(val_delays)
    for epoch in range(1, 5):
        train(model, train_rot, optimizer, epoch)
        mae, hit = evaluate(model, val_rot)
        print(f"| end of epoch {epoch:3d} | valid MAE {mae:6.2f} min | 15-min late accuracy {hit:.3f} | mean baseline {baseline:.2f} min")


if __name__ == "__main__":
    main()
