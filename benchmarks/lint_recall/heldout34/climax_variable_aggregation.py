"""ClimaX-style foundation model for weather and climate, fine-tuned on mixed sources.

Written after microsoft/ClimaX (src/climax/arch.py: per-variable ``token_embeds``,
``create_var_embedding`` / ``var_map`` / ``get_var_ids``, ``aggregate_variables`` with a
learned ``var_query`` and ``var_agg`` cross-attention, ``pos_embed``,
``lead_time_embed``, ``unpatchify``; src/climax/utils/metrics.py ``lat_weighted_mse``).
Samples come from reanalysis and model archives that do not all provide every input
variable; the missing channels are zero-filled and flagged per sample by the collate
function.

Source: conventions.md §1 (nn.MultiheadAttention row, HF 2-D attention_mask row, direction cheat-sheet), seed self_attention_mask_guide.txt §2.
"""
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_VARS = ("2m_temperature", "10m_u_component_of_wind", "10m_v_component_of_wind",
                "geopotential_500", "temperature_850", "specific_humidity_850")


class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.num_patches = (img_size[0] // patch_size) * (img_size[1] // patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


@dataclass
class ClimaXConfig:
    default_vars: tuple = DEFAULT_VARS
    img_size: list = field(default_factory=lambda: [32, 64])
    patch_size: int = 4
    embed_dim: int = 64
    depth: int = 2
    decoder_depth: int = 2
    num_heads: int = 4


class ClimaX(nn.Module):
    def __init__(self, cfg: ClimaXConfig):
        super().__init__()
        self.default_vars, self.img_size, self.patch_size = cfg.default_vars, cfg.img_size, cfg.patch_size
        self.token_embeds = nn.ModuleList(PatchEmbed(cfg.img_size, cfg.patch_size, 1, cfg.embed_dim) for _ in cfg.default_vars)
        self.num_patches = self.token_embeds[0].num_patches
        self.var_embed, self.var_map = self.create_var_embedding(cfg.embed_dim)
        self.var_query = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim), requires_grad=True)
        self.var_agg = nn.MultiheadAttention(cfg.embed_dim, cfg.num_heads, batch_first=True)
        self.pos_embed = nn.Parameter(torch.randn(1, self.num_patches, cfg.embed_dim) * 0.02, requires_grad=True)
        self.lead_time_embed = nn.Linear(1, cfg.embed_dim)
        self.blocks = nn.ModuleList(Block(cfg.embed_dim, cfg.num_heads) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.embed_dim)
        head = []
        for _ in range(cfg.decoder_depth):
            head += [nn.Linear(cfg.embed_dim, cfg.embed_dim), nn.GELU()]
        head.append(nn.Linear(cfg.embed_dim, len(cfg.default_vars) * cfg.patch_size**2))
        self.head = nn.Sequential(*head)

    def create_var_embedding(self, dim):
        var_embed = nn.Parameter(torch.randn(1, len(self.default_vars), dim) * 0.02, requires_grad=True)
        return var_embed, {var: idx for idx, var in enumerate(self.default_vars)}

    @lru_cache(maxsize=None)
    def get_var_ids(self, vars, device):
        return torch.from_numpy(np.array([self.var_map[var] for var in vars])).to(device)

    def get_var_emb(self, var_emb, vars):
        return var_emb[:, self.get_var_ids(vars, var_emb.device), :]

    def unpatchify(self, x):
        p, c = self.patch_size, len(self.default_vars)
        h, w = self.img_size[0] // p, self.img_size[1] // p
        x = torch.einsum("nhwpqc->nchpwq", x.reshape(x.shape[0], h, w, p, p, c))
        return x.reshape(x.shape[0], c, h * p, w * p)

    def aggregate_variables(self, x, var_mask):
        b, _, l, _ = x.shape
        x = torch.einsum("bvld->blvd", x).flatten(0, 1)
        available = var_mask.repeat_interleave(l, dim=0)
        var_query = self.var_query.repeat_interleave(x.shape[0], dim=0)
        x, _ = self.var_agg(var_query, x, x, key_padding_mask=available)  # expect: MC502 climax
        return x.squeeze(1).unflatten(dim=0, sizes=(b, l))

    def forward_encoder(self, x, lead_times, variables, var_mask):
        var_ids = self.get_var_ids(tuple(variables), x.device)
        x = torch.stack([self.token_embeds[int(var_ids[i])](x[:, i : i + 1]) for i in range(len(var_ids))], dim=1)
        x = x + self.get_var_emb(self.var_embed, tuple(variables)).unsqueeze(2)
        x = self.aggregate_variables(x, var_mask)
        x = x + self.pos_embed + self.lead_time_embed(lead_times.unsqueeze(-1)).unsqueeze(1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward(self, x, y, lead_times, variables, out_variables, metric, lat, var_available=None):
        if var_available is None:
            var_available = torch.ones(x.shape[0], len(variables), dtype=torch.bool, device=x.device)
        preds = self.unpatchify(self.head(self.forward_encoder(x, lead_times, variables, var_mask=var_available)))
        preds = preds[:, self.get_var_ids(tuple(out_variables), preds.device)]
        loss = None if metric is None else [m(preds, y, out_variables, lat) for m in metric]
        return loss, preds


def lat_weighted_mse(pred, y, vars, lat, mask=None):
    error = (pred - y) ** 2
    w_lat = np.cos(np.deg2rad(lat))
    w_lat = torch.from_numpy(w_lat / w_lat.mean()).unsqueeze(0).unsqueeze(-1).to(dtype=error.dtype, device=error.device)
    loss_dict = {}
    with torch.no_grad():
        for i, var in enumerate(vars):
            loss_dict[var] = (error[:, i] * w_lat).mean()
    loss_dict["loss"] = (error * w_lat.unsqueeze(1)).mean(dim=1).mean()
    return loss_dict


def collate_fn(samples, variables):
    x = torch.stack([torch.stack([s["fields"].get(v, torch.zeros(32, 64)) for v in variables]) for s in samples])
    var_available = torch.tensor([[v in s["fields"] for v in variables] for s in samples])
    return {"x": x, "y": torch.stack([s["target"] for s in samples]), "lead_times": torch.stack([s["lead_time"] for s in samples]),
            "var_available": var_available}


def make_sample(generator, source):
    base = F.interpolate(torch.randn(1, len(DEFAULT_VARS), 8, 16, generator=generator), size=(32, 64), mode="bilinear")[0]
    fields = {v: base[i] for i, v in enumerate(DEFAULT_VARS)}
    if source == "cmip6":
        fields.pop("specific_humidity_850")
        fields.pop("10m_v_component_of_wind")
    lead_time = torch.tensor(float(torch.randint(1, 4, (1,), generator=generator)))
    target = torch.roll(base[:3], shifts=int(lead_time), dims=-1)
    return {"fields": fields, "target": target, "lead_time": lead_time / 10.0}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    variables, out_variables = list(DEFAULT_VARS), list(DEFAULT_VARS[:3])
    lat = np.linspace(-87.1875, 87.1875, 32)
    samples = [make_sample(g, "era5" if i % 2 else "cmip6") for i in range(32)]
    model = ClimaX(ClimaXConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(16):
        batch = collate_fn(samples[(step * 4) % 32 : (step * 4) % 32 + 4], variables)
        loss, _ = model(batch["x"], batch["y"], batch["lead_times"], variables, out_variables, [lat_weighted_mse], lat,
                        var_available=batch["var_available"])
        opt.zero_grad()
        loss[0]["loss"].backward()
        opt.step()
        if step % 4 == 0:
            print(f"step {step} lat-weighted mse {loss[0]['loss'].item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = collate_fn(samples[:2], variables)
        _, preds = model(batch["x"], batch["y"], batch["lead_times"], variables, out_variables, None, lat,
                         var_available=batch["var_available"])
        batch["x"][0, 5] = torch.randn(32, 64, generator=g)
        _, changed = model(batch["x"], batch["y"], batch["lead_times"], variables, out_variables, None, lat,
                           var_available=batch["var_available"])
        print("missing-variable values move the forecast by", (preds[0] - changed[0]).abs().max().item())
