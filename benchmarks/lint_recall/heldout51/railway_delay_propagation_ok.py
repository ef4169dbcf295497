"""Railway delay propagation over a timetable (Hub remote code: configuration and modeling in one file).

Each train run is the sequence of its timetabled stops (station, scheduled arrival, scheduled
dwell) with the delays reported so far; an encoder over the stops predicts the arrival delay at
every stop still ahead. Runs of different lengths are padded per batch.

Source: conventions.md §2.6, §5 item 6
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class TimetableConfig(PretrainedConfig):
    model_type = "timetable_delay"

    def __init__(self, num_stations=400, hidden_size=64, num_heads=4, num_layers=3, ffn_size=128,
                 max_stops=64, attention_dropout=0.1, pad_token_id=0, **kwargs):
        self.num_stations = num_stations
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.ffn_size = ffn_size
        self.max_stops = max_stops
        self.attention_dropout = attention_dropout
        super().__init__(pad_token_id=pad_token_id, **kwargs)


def time_features(minutes):
    angle = 2 * math.pi * minutes / 1440.0
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1)


def collate_runs(runs, pad_id=0):
    width = max(len(r["stations"]) for r in runs)
    out = {
        "station_ids": torch.full((len(runs), width), pad_id, dtype=torch.long),
        "scheduled": torch.zeros(len(runs), width),
        "dwell": torch.zeros(len(runs), width),
        "reported": torch.zeros(len(runs), width),
        "is_reported": torch.zeros(len(runs), width, dtype=torch.bool),
    }
    for i, run in enumerate(runs):
        n = len(run["stations"])
        out["station_ids"][i, :n] = torch.tensor(run["stations"])
        out["scheduled"][i, :n] = torch.tensor(run["scheduled"], dtype=torch.float)
        out["dwell"][i, :n] = torch.tensor(run["dwell"], dtype=torch.float)
        k = len(run["reported"])
        out["reported"][i, :k] = torch.tensor(run["reported"], dtype=torch.float)
        out["is_reported"][i, :k] = True
    return out


class StopAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.dropout = config.attention_dropout
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden, stop_keep):
        b, s, d = hidden.shape
        q, k, v = self.qkv_proj(hidden).view(b, s, 3, self.num_heads, -1).unbind(dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        dropout_p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, stop_keep[:, None, None, :], dropout_p)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, d))


class StopLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = StopAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, config.ffn_size), nn.GELU(),
                                 nn.Linear(config.ffn_size, config.hidden_size))
        self.ffn_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden, stop_keep):
        hidden = hidden + self.attn(self.attn_norm(hidden), stop_keep)
        return hidden + self.ffn(self.ffn_norm(hidden))


class TimetableDelayModel(PreTrainedModel):
    config_class = TimetableConfig
    base_model_prefix = "timetable"

    def __init__(self, config):
        super().__init__(config)
        self.station_emb = nn.Embedding(config.num_stations, config.hidden_size, padding_idx=config.pad_token_id)
        self.stop_pos = nn.Embedding(config.max_stops, config.hidden_size)
        self.feature_proj = nn.Linear(5, config.hidden_size)
        self.layers = nn.ModuleList([StopLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.delay_head = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, station_ids, scheduled, dwell, reported, is_reported, target=None):
        stop_keep = station_ids != self.config.pad_token_id
        feats = torch.cat([time_features(scheduled), dwell[..., None] / 10.0,
                           (reported * is_reported)[..., None] / 10.0, is_reported[..., None].float()], dim=-1)
        pos = torch.arange(station_ids.size(1), device=station_ids.device)
        hidden = self.station_emb(station_ids) + self.stop_pos(pos) + self.feature_proj(feats)
        for layer in self.layers:
            hidden = layer(hidden, stop_keep)
        delay = self.delay_head(self.norm(hidden)).squeeze(-1)
        loss = None
        if target is not None:
            ahead = stop_keep & ~is_reported
            loss = F.l1_loss(delay[ahead], target[ahead])
        return {"loss": loss, "delay": delay}


@torch.no_grad()
def forecast_delays(model, runs):
    model.eval()
    batch = collate_runs(runs, model.config.pad_token_id)
    delay = model(**batch)["delay"]
    return [[round(x, 1) for x in delay[i, len(r["reported"]): len(r["stations"])].tolist()]
            for i, r in enumerate(runs)]


if __name__ == "__main__":
    torch.manual_seed(0)
    runs = [
        {"stations": [11, 42, 57, 90, 133], "scheduled": [420, 431, 440, 452, 470],
         "dwell": [0, 2, 1, 2, 0], "reported": [0, 3]},
        {"stations": [133, 90, 57, 42, 11, 7, 5], "scheduled": [480, 498, 510, 519, 530, 541, 555],
         "dwell": [0, 2, 1, 2, 3, 1, 0], "reported": [5, 6, 6]},
    ]
    model = TimetableDelayModel(TimetableConfig())
    for run in runs:
        print(run["stations"][0], "->", run["stations"][-1], forecast_delays(model, [run])[0])
