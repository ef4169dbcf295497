"""Soft sensor for the butane (C4) content at the bottom of a debutanizer column, with the
iTransformer of thuml/iTransformer (each process tag's window is one token).

``Configs`` with ``seq_len`` / ``d_model`` / ``n_heads`` / ``e_layers`` / ``d_ff`` /
``use_norm``, ``DataEmbedding_inverted``, ``FullAttention`` / ``AttentionLayer``,
``EncoderLayer`` / ``Encoder`` and ``Model.forecast`` with the non-stationary normalisation. Tags
of process units that are not piped together do not attend to each other (a bias built from
the plant's unit links), and tags flagged bad by the historian for an operating period are left
out. The seven tags follow the Fortuna et al. debutanizer benchmark; the data are synthetic and
lab analyses are sparse.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

TAGS = ["top_temp", "top_pressure", "reflux_flow", "flow_to_splitter", "tray6_temp", "bottom_temp_a", "bottom_temp_b"]
UNIT_OF_TAG = [0, 0, 1, 1, 2, 3, 3]
UNIT_LINKS = [(0, 1), (1, 2), (2, 3), (0, 2)]


@dataclass
class Configs:
    seq_len: int = 24
    d_model: int = 32
    n_heads: int = 4
    e_layers: int = 2
    d_ff: int = 64
    dropout: float = 0.05
    use_norm: bool = True


def build_unit_topology_bias(unit_of_tag, unit_links):
    n_units = max(unit_of_tag) + 1
    linked = torch.eye(n_units, dtype=torch.bool)
    for a, b in unit_links:
        linked[a, b] = linked[b, a] = True
    unit = torch.tensor(unit_of_tag)
    tag_linked = linked[unit[:, None], unit[None, :]]
    return torch.zeros(len(unit_of_tag), len(unit_of_tag)).masked_fill(~tag_linked, float("-inf"))


def simulate_period(gen, n_steps, bad_tags, seq_len):
    t = torch.arange(n_steps, dtype=torch.float)
    drift = torch.randn(len(TAGS), 1, generator=gen).cumsum(0) * 0.1
    x = torch.sin(t[None] / torch.tensor([30.0, 45, 20, 25, 35, 40, 50])[:, None] + drift) + 0.1 * torch.randn(len(TAGS), n_steps, generator=gen)
    y = 0.5 * x[4] - 0.4 * x[5].roll(3) + 0.3 * x[2] * x[0] + 0.05 * torch.randn(n_steps, generator=gen)
    for j in bad_tags:
        x[j] = x[j, 0]
    windows = x.unfold(1, seq_len, 1).permute(1, 2, 0)
    target = y[seq_len - 1 :]
    lab = torch.rand(len(target), generator=gen) < 0.25
    bad = torch.zeros(len(TAGS), dtype=torch.bool)
    bad[list(bad_tags)] = True
    return {"x_enc": windows, "y": target, "y_mask": lab, "bad_tags": bad}


class DataEmbedding_inverted(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1):
        super().__init__()
        self.value_embedding = nn.Linear(c_in, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        return self.dropout(self.value_embedding(x.permute(0, 2, 1)))


class FullAttention(nn.Module):
    def __init__(self, attention_dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        E = queries.shape[-1]
        scores = torch.einsum("blhe,bshe->bhls", queries, keys) / math.sqrt(E)
        if attn_mask is not None:
            scores = scores + attn_mask
        A = self.dropout(torch.softmax(scores, dim=-1))
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        H = self.n_heads
        q = self.query_projection(queries).view(B, L, H, -1)
        k = self.key_projection(keys).view(B, L, H, -1)
        v = self.value_projection(values).view(B, L, H, -1)
        return self.out_projection(self.inner_attention(q, k, v, attn_mask).view(B, L, -1))


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout):
        super().__init__()
        self.attention = attention
        self.conv1, self.conv2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        x = self.norm1(x + self.dropout(self.attention(x, x, x, attn_mask=attn_mask)))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        return self.norm2(x + self.dropout(self.conv2(y).transpose(-1, 1)))


class Encoder(nn.Module):
    def __init__(self, attn_layers, norm_layer):
        super().__init__()
        self.attn_layers, self.norm = nn.ModuleList(attn_layers), norm_layer

    def forward(self, x, attn_mask=None):
        for attn_layer in self.attn_layers:
            x = attn_layer(x, attn_mask=attn_mask)
        return self.norm(x)


class Model(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.use_norm = configs.use_norm
        self.enc_embedding = DataEmbedding_inverted(configs.seq_len, configs.d_model, configs.dropout)
        self.encoder = Encoder(
            [EncoderLayer(AttentionLayer(FullAttention(configs.dropout), configs.d_model, configs.n_heads),
                          configs.d_model, configs.d_ff, configs.dropout) for _ in range(configs.e_layers)],
            norm_layer=nn.LayerNorm(configs.d_model),
        )
        self.register_buffer("tag_bias", build_unit_topology_bias(UNIT_OF_TAG, UNIT_LINKS))
        self.projector = nn.Linear(configs.d_model * len(TAGS), 1)

    def forecast(self, x_enc, bad_tags=None):
        if self.use_norm:
            means = x_enc.mean(1, keepdim=True).detach()
            stdev = torch.sqrt(torch.var(x_enc - means, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc = (x_enc - means) / stdev
        attn_bias = self.tag_bias
        if bad_tags is not None:
            attn_bias = self.tag_bias.masked_fill(bad_tags[None, :], float("-inf"))
        enc_out = self.encoder(self.enc_embedding(x_enc), attn_mask=attn_bias)
        return self.projector(enc_out.flatten(1)).squeeze(-1)

    def forward(self, x_enc, bad_tags=None):
        return self.forecast(x_enc, bad_tags)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    configs = Configs()
    schedule = [(), (3,), (), (1, 6), (), (2,), (), (5,), (), ()]
    periods = [simulate_period(gen, 300, bad, configs.seq_len) for bad in schedule]
    model = Model(configs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        model.train()
        total, count = 0.0, 0
        for period in periods[:8]:
            perm = torch.randperm(len(period["y"]))
            for s in range(0, len(perm), 32):
                idx = perm[s : s + 32]
                pred = model(period["x_enc"][idx], bad_tags=period["bad_tags"])
                lab = period["y_mask"][idx]
                if lab.sum() == 0:
                    continue
                loss = F.mse_loss(pred[lab], period["y"][idx][lab])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total, count = total + loss.item(), count + 1
        model.eval()
        with torch.no_grad():
            errs = [(model(p["x_enc"], bad_tags=p["bad_tags"]) - p["y"]) for p in periods[8:]]
        rmse = torch.cat(errs).pow(2).mean().sqrt().item()
        print(f"epoch {epoch} train mse {total / max(count, 1):.4f} test RMSE {rmse:.4f} (y std {periods[8]['y'].std().item():.3f})")


if __name__ == "__main__":
    main()
