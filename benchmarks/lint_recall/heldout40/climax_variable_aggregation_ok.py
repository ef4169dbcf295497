"""ClimaX-style medium-range weather forecasting pretrained on several climate data sources.

Every variable field is tokenised by its own patch embedding, tagged with a variable embedding,
and the variables of each patch are merged by cross-attention from a learned query
(``aggregate_variables``), as in microsoft/ClimaX's ``src/climax/arch.py`` (``token_embeds``,
``create_var_embedding``, ``get_var_ids``, ``channel_query`` / ``channel_agg``,
``lead_time_embed``, ``unpatchify``) with its latitude-weighted MSE and RMSE. Batches come from
one source at a time: ERA5-like data with every variable, and an MPI-ESM-like CMIP6 run without
the 10 m winds, whose missing fields arrive as zeros and are left out of the aggregation.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险)
"""

import math

import numpy as np
import torch
import torch.nn as nn

DEFAULT_VARS = (
    "2m_temperature",
    "10m_u_component_of_wind",
    "10m_v_component_of_wind",
    "geopotential_500",
    "temperature_850",
)
OUT_VARS = ("geopotential_500", "temperature_850", "2m_temperature")
SOURCES = {
    "era5": DEFAULT_VARS,
    "mpi-esm": ("2m_temperature", "geopotential_500", "temperature_850"),
}


class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.num_patches = (img_size[0] // patch_size) * (img_size[1] // patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class ClimaX(nn.Module):
    def __init__(
        self, default_vars, img_size=(8, 16), patch_size=2, embed_dim=64, depth=2, num_heads=4
    ):
        super().__init__()
        self.img_size, self.patch_size, self.default_vars = img_size, patch_size, default_vars
        self.token_embeds = nn.ModuleList(
            [PatchEmbed(img_size, patch_size, 1, embed_dim) for _ in default_vars]
        )
        self.num_patches = self.token_embeds[0].num_patches
        self.var_embed, self.var_map = self.create_var_embedding(embed_dim)
        self.var_query = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.var_agg = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.register_buffer("var_agg_bias", torch.zeros(len(default_vars)))
        self.pos_embed = nn.Parameter(torch.randn(1, self.num_patches, embed_dim) * 0.02)
        self.lead_time_embed = nn.Linear(1, embed_dim)
        layer = nn.TransformerEncoderLayer(
            embed_dim,
            num_heads,
            4 * embed_dim,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Sequential(
            nn.Linear(embed_dim, embed_dim),
            nn.GELU(),
            nn.Linear(embed_dim, len(default_vars) * patch_size**2),
        )

    def create_var_embedding(self, dim):
        var_embed = nn.Parameter(torch.randn(1, len(self.default_vars), dim) * 0.02)
        return var_embed, {var: idx for idx, var in enumerate(self.default_vars)}

    def get_var_ids(self, vars, device):
        return torch.from_numpy(np.array([self.var_map[var] for var in vars])).to(device)

    def unpatchify(self, x):
        p, c = self.patch_size, len(self.default_vars)
        h, w = self.img_size[0] // p, self.img_size[1] // p
        x = x.reshape(x.shape[0], h, w, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(x.shape[0], c, h * p, w * p)

    def aggregate_variables(self, x, variables):
        b, _, l, _ = x.shape
        present = torch.zeros(len(self.default_vars), dtype=torch.bool, device=x.device)
        present[self.get_var_ids(variables, x.device)] = True
        agg_bias = self.var_agg_bias.masked_fill(~present, float("-inf"))
        x = torch.einsum("bvld->blvd", x).flatten(0, 1)
        var_query = self.var_query.repeat_interleave(x.shape[0], dim=0)
        x, _ = self.var_agg(var_query, x, x, attn_mask=agg_bias[None, :], need_weights=False)
        return x.squeeze(1).unflatten(dim=0, sizes=(b, l))

    def forward_encoder(self, x, lead_times, variables):
        x = torch.stack(
            [embed(x[:, i : i + 1]) for i, embed in enumerate(self.token_embeds)], dim=1
        )
        x = x + self.var_embed.unsqueeze(2)
        x = self.aggregate_variables(x, variables)
        x = x + self.pos_embed + self.lead_time_embed(lead_times.unsqueeze(-1)).unsqueeze(1)
        return self.norm(self.blocks(x))

    def forward(self, x, y, lead_times, variables, out_variables, lat):
        preds = self.unpatchify(self.head(self.forward_encoder(x, lead_times, variables)))
        preds = preds[:, self.get_var_ids(out_variables, preds.device)]
        return lat_weighted_mse(preds, y, lat), preds


def lat_weighted_mse(pred, y, lat):
    w_lat = np.cos(np.deg2rad(lat))
    w_lat = torch.from_numpy(w_lat / w_lat.mean()).to(dtype=pred.dtype, device=pred.device)
    return (((pred - y) ** 2) * w_lat[None, None, :, None]).mean()


def lat_weighted_rmse(pred, y, lat):
    w_lat = np.cos(np.deg2rad(lat))
    w_lat = torch.from_numpy(w_lat / w_lat.mean()).to(dtype=pred.dtype)
    return torch.sqrt((((pred - y) ** 2) * w_lat[None, None, :, None]).mean(dim=(-2, -1))).mean(0)


def simulate(n, source, gen, img_size=(8, 16), lead_hours=24.0):
    lat = np.linspace(-78.75, 78.75, img_size[0])
    lon = torch.linspace(0, 2 * math.pi, img_size[1] + 1)[:-1]
    phase = 2 * math.pi * torch.rand(n, 1, 1, generator=gen)
    k = torch.randint(1, 3, (n, 1, 1), generator=gen).float()
    speed = 0.02 + 0.02 * torch.rand(n, 1, 1, generator=gen)
    lat_t = torch.tensor(lat, dtype=torch.float32)[None, :, None]

    def state(t):
        wave = torch.sin(k * lon[None, None, :] - k * speed * t + phase) * torch.cos(
            torch.deg2rad(lat_t)
        )
        z500 = wave
        u10 = -torch.cos(k * lon[None, None, :] - k * speed * t + phase) * speed * 10
        v10 = k * speed * 10 * torch.cos(k * lon[None, None, :] - k * speed * t + phase)
        t850 = 0.8 * wave + torch.cos(torch.deg2rad(lat_t)).expand_as(wave)
        t2m = t850 + 0.1 * z500
        return {
            "2m_temperature": t2m,
            "10m_u_component_of_wind": u10.expand_as(wave),
            "10m_v_component_of_wind": v10 * torch.ones_like(wave),
            "geopotential_500": z500,
            "temperature_850": t850,
        }

    now, later = state(torch.tensor(0.0)), state(torch.tensor(lead_hours))
    x = torch.stack(
        [now[v] if v in SOURCES[source] else torch.zeros_like(now[v]) for v in DEFAULT_VARS], 1
    )
    y = torch.stack([later[v] for v in OUT_VARS], 1)
    return x, y, torch.full((n,), lead_hours / 100), lat


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = ClimaX(DEFAULT_VARS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    for step in range(240):
        source = "mpi-esm" if step % 4 == 3 else "era5"
        x, y, lead_times, lat = simulate(32, source, gen)
        loss, _ = model(x, y, lead_times, SOURCES[source], OUT_VARS, lat)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 60 == 59:
            print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    x, y, lead_times, lat = simulate(128, "era5", gen)
    with torch.no_grad():
        _, preds = model(x, y, lead_times, SOURCES["era5"], OUT_VARS, lat)
    rmse = lat_weighted_rmse(preds, y, lat)
    print("ERA5 RMSE", {v: round(r, 4) for v, r in zip(OUT_VARS, rmse.tolist())})
    print("stored variable bias", model.state_dict()["var_agg_bias"].tolist())
