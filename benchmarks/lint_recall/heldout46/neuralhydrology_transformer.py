"""Rainfall-runoff modelling of river discharge with a transformer, after neuralhydrology.

Imitates neuralhydrology/neuralhydrology (`modelzoo/transformer.py`, `modelzoo/inputlayer.py`,
`modelzoo/head.py`, `training/loss.py`): a `Config` object read through attributes
(`dynamic_inputs`, `static_attributes`, `seq_length`, `predict_last_n`, `transformer_nlayers`,
`transformer_nheads`, `transformer_dim_feedforward`, `transformer_dropout`,
`transformer_positional_encoding_type`), `BaseModel` with `module_parts`, `InputLayer`
concatenating the repeated static catchment attributes to the daily forcings, sequence-first
`_PositionalEncoding`, `Transformer` with the lazily cached look-ahead `_mask` of the PyTorch
tutorial, a `Regression` head, `MaskedNSELoss` with per-basin discharge standard deviations
and the NSE metric. Days on which the forcing product has no data are left out of attention
(the "attention" choice of neuralhydrology's `nan_handling_method`). Basins are synthetic: a
snow bucket and a linear reservoir driven by gamma-distributed rain and a seasonal temperature.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask) and section 7 Q3;
conventions.md section 2.3.
"""

import math

import numpy as np
import torch
import torch.nn as nn


class Config:
    def __init__(self, **kwargs):
        self.dynamic_inputs = ["prcp(mm/day)", "tmax(C)", "pet(mm/day)"]
        self.static_attributes = ["area_gages2", "elev_mean", "aridity"]
        self.target_variables = ["QObs(mm/d)"]
        self.seq_length = 60
        self.predict_last_n = 1
        self.transformer_nlayers = 2
        self.transformer_nheads = 4
        self.transformer_dim_feedforward = 64
        self.transformer_dropout = 0.0
        self.transformer_positional_dropout = 0.0
        self.transformer_positional_encoding_type = "sum"
        self.embedding_size = 32
        self.output_dropout = 0.0
        self.learning_rate = 2e-3
        self.batch_size = 64
        self.epochs = 3
        self.__dict__.update(kwargs)


class BaseModel(nn.Module):
    module_parts = []

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.output_size = len(cfg.target_variables)


class InputLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n_in = len(cfg.dynamic_inputs) + len(cfg.static_attributes)
        self.output_size = cfg.embedding_size
        self.dynamics_embedding = nn.Sequential(nn.Linear(n_in, cfg.embedding_size), nn.Tanh())

    def forward(self, data):
        x_d = data["x_d"].transpose(0, 1)
        x_d = torch.where(torch.isnan(x_d), torch.zeros_like(x_d), x_d)
        x_s = data["x_s"].unsqueeze(0).repeat(x_d.shape[0], 1, 1)
        return self.dynamics_embedding(torch.cat([x_d, x_s], dim=-1))


class _PositionalEncoding(nn.Module):
    def __init__(self, embedding_dim, dropout, max_len):
        super().__init__()
        pe = torch.zeros(max_len, embedding_dim)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, embedding_dim, 2).float() * (-math.log(max_len * 2) / embedding_dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(1))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0), :])


class Regression(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = nn.Linear(n_in, n_out)

    def forward(self, x):
        return {"y_hat": self.net(x)}


class Transformer(BaseModel):
    module_parts = ["embedding_net", "encoder", "head"]

    def __init__(self, cfg):
        super().__init__(cfg=cfg)
        self.embedding_net = InputLayer(cfg)
        self._embedding_dim = self.embedding_net.output_size
        self.positional_encoder = _PositionalEncoding(self._embedding_dim, cfg.transformer_positional_dropout,
                                                      cfg.seq_length)
        encoder_layers = nn.TransformerEncoderLayer(d_model=self._embedding_dim, nhead=cfg.transformer_nheads,
                                                    dim_feedforward=cfg.transformer_dim_feedforward,
                                                    dropout=cfg.transformer_dropout)
        self.encoder = nn.TransformerEncoder(encoder_layers, num_layers=cfg.transformer_nlayers, norm=None,
                                             enable_nested_tensor=False)
        self._mask = None
        self.dropout = nn.Dropout(p=cfg.output_dropout)
        self.head = Regression(n_in=self._embedding_dim, n_out=self.output_size)

    @staticmethod
    def _missing_to_bias(missing):
        observed = (~missing).float()
        return (1.0 - observed) * float("-inf")  # expect: MC522 staticmethod

    def forward(self, data):
        missing = torch.isnan(data["x_d"]).any(dim=-1)
        x_d = self.embedding_net(data)
        positional_encoding = self.positional_encoder(x_d * math.sqrt(self._embedding_dim))
        if self._mask is None or self._mask.size(0) != len(x_d):
            mask = (torch.triu(torch.ones(len(x_d), len(x_d))) == 1).transpose(0, 1)
            self._mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
        key_padding_mask = self._missing_to_bias(missing)
        output = self.encoder(positional_encoding, mask=self._mask, src_key_padding_mask=key_padding_mask)
        pred = self.head(self.dropout(output.transpose(0, 1)))
        return pred


class MaskedNSELoss(nn.Module):
    def __init__(self, eps=0.1):
        super().__init__()
        self.eps = eps

    def forward(self, prediction, data):
        y = data["y"]
        mask = ~torch.isnan(y)
        weights = 1 / (data["per_basin_target_stds"].expand_as(y)[mask] + self.eps) ** 2
        return torch.mean(weights * (prediction["y_hat"][mask] - y[mask]) ** 2)


def nse(obs, sim):
    keep = ~np.isnan(obs)
    obs, sim = obs[keep], sim[keep]
    return 1 - np.sum((sim - obs) ** 2) / np.sum((obs - obs.mean()) ** 2)


def simulate_basin(rng, n_days):
    area, elev, aridity = rng.uniform(0.1, 1.0), rng.uniform(0.0, 1.0), rng.uniform(0.3, 1.5)
    day = np.arange(n_days)
    tmax = 12 - 10 * elev + 12 * np.sin(2 * np.pi * (day - 100) / 365) + rng.normal(0, 2, n_days)
    prcp = rng.gamma(0.6, 6.0 / aridity, n_days) * (rng.uniform(size=n_days) < 0.4)
    pet = np.clip(0.15 * (tmax + 5), 0, None)
    snow, store = 0.0, 5.0
    q = np.zeros(n_days)
    for t in range(n_days):
        melt = min(snow, max(tmax[t], 0) * 0.8)
        snow += (prcp[t] if tmax[t] < 0 else 0.0) - melt
        rain = prcp[t] if tmax[t] >= 0 else 0.0
        store = max(store + rain + melt - 0.5 * pet[t], 0.0)
        q[t] = store * (0.05 + 0.1 * area)
        store -= q[t]
    x_d = np.stack([prcp, tmax, pet], axis=1).astype(np.float32)
    for start in rng.integers(10, n_days - 10, 6):
        x_d[start:start + int(rng.integers(1, 4))] = np.nan
    x_s = np.array([area, elev, aridity], dtype=np.float32)
    return x_d, x_s, q.astype(np.float32)


def make_samples(basins, cfg, first, last):
    xs_d, xs_s, ys, stds = [], [], [], []
    for x_d, x_s, q in basins:
        std = np.std(q[:first + 300])
        for end in range(max(first, cfg.seq_length), last, 3):
            xs_d.append(x_d[end - cfg.seq_length:end])
            xs_s.append(x_s)
            ys.append(q[end - cfg.predict_last_n:end, None])
            stds.append(std)
    return {"x_d": torch.tensor(np.stack(xs_d)), "x_s": torch.tensor(np.stack(xs_s)),
            "y": torch.tensor(np.stack(ys)), "per_basin_target_stds": torch.tensor(stds).view(-1, 1, 1)}


if __name__ == "__main__":
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    cfg = Config()
    basins = [simulate_basin(rng, 730) for _ in range(4)]
    train_data = make_samples(basins, cfg, 0, 480)
    test_data = make_samples(basins, cfg, 480, 730)
    means = torch.nanmean(train_data["x_d"].reshape(-1, 3), dim=0)
    for data in (train_data, test_data):
        data["x_d"] = (data["x_d"] - means) / 5.0
    model = Transformer(cfg)
    loss_obj = MaskedNSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    n = len(train_data["y"])
    for epoch in range(cfg.epochs):
        model.train()
        perm = torch.randperm(n)
        for start in range(0, n, cfg.batch_size):
            idx = perm[start:start + cfg.batch_size]
            batch = {k: v[idx] for k, v in train_data.items()}
            prediction = model(batch)
            prediction["y_hat"] = prediction["y_hat"][:, -cfg.predict_last_n:]
            loss = loss_obj(prediction, batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            sim = model(test_data)["y_hat"][:, -1, 0].numpy()
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}  test NSE {nse(test_data['y'][:, -1, 0].numpy(), sim):.3f}")
