"""Build-order head of a StarCraft II Terran agent cloned from replays.

A PyTorch port of the units encoder of google-deepmind/alphastar (AlphaStar Unplugged, Haiku):
the raw-unit list of pysc2 (`unit_type`, `alliance`, `display_type`, `x`, `y`, `health`) is
padded to `max_num_units`, embedded, mixed by a transformer whose masks are built the Flax /
Haiku way (`make_attention_mask` of per-unit flags, then an additive bias) and pooled over the
valid units; the head predicts the next macro action from it and the scalar features. Enemy
buildings seen earlier stay in the list as snapshots (`display_type == 2`) and, with
`mask_snapshots`, do not take part in the mixing.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md 3.15, 3.16), 2.3
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

UNIT_TYPES = ["none", "SCV", "Marine", "Barracks", "CommandCenter", "Zergling", "Mutalisk", "Hatchery", "Spire"]
ACTIONS = ["Build_SupplyDepot_pt", "Build_MissileTurret_pt", "Build_Bunker_pt", "Train_Marine_quick"]
VISIBLE, SNAPSHOT = 1, 2


@dataclass
class UnitsEncoderConfig:
    max_num_units: int = 24
    embed_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mask_snapshots: bool = True


def sample_observation(rng, cfg):
    units = [("CommandCenter", 1, VISIBLE)] + [("SCV", 1, VISIBLE)] * rng.randint(4, 8)
    units += [("Barracks", 1, VISIBLE)] * rng.randint(0, 2) + [("Marine", 1, VISIBLE)] * rng.randint(0, 4)
    zerglings = rng.randint(0, 6)
    units += [("Zergling", 4, VISIBLE)] * zerglings
    air = rng.random() < 0.3
    units += [("Mutalisk", 4, VISIBLE)] * (rng.randint(1, 3) if air else 0)
    units += [("Hatchery", 4, SNAPSHOT)] + [("Spire", 4, SNAPSHOT)] * int(rng.random() < 0.4)
    units = units[:cfg.max_num_units]
    supply_left = rng.randint(0, 10)
    label = 1 if air else 2 if zerglings >= 4 else 0 if supply_left < 3 else 3
    return units, supply_left, label


def featurize(batch, cfg):
    n = len(batch)
    unit_type = torch.zeros(n, cfg.max_num_units, dtype=torch.long)
    alliance = torch.zeros(n, cfg.max_num_units, dtype=torch.long)
    display_type = torch.zeros(n, cfg.max_num_units, dtype=torch.long)
    coords = torch.zeros(n, cfg.max_num_units, 3)
    num_units = torch.zeros(n, dtype=torch.long)
    for i, (units, _, _) in enumerate(batch):
        for j, (kind, ally, display) in enumerate(units):
            unit_type[i, j], alliance[i, j], display_type[i, j] = UNIT_TYPES.index(kind), ally, display
            coords[i, j] = torch.tensor([random.random(), random.random(), 1.0])
        num_units[i] = len(units)
    scalars = torch.tensor([[supply_left / 10.0] for _, supply_left, _ in batch])
    return {"unit_type": unit_type, "alliance": alliance, "display_type": display_type, "coords": coords,
            "num_units": num_units, "scalars": scalars}, torch.tensor([label for _, _, label in batch])


def make_attention_mask(query_input, key_input):
    return (query_input[:, :, None] & key_input[:, None, :])[:, None]


def mask_to_bias(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


class TransformerLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads, self.key_size = cfg.num_heads, cfg.embed_dim // cfg.num_heads
        self.layer_norm = nn.LayerNorm(cfg.embed_dim)
        self.qkv = nn.Linear(cfg.embed_dim, 3 * cfg.embed_dim)
        self.out = nn.Linear(cfg.embed_dim, cfg.embed_dim)
        self.mlp = nn.Sequential(nn.LayerNorm(cfg.embed_dim), nn.Linear(cfg.embed_dim, 2 * cfg.embed_dim), nn.ReLU(),
                                 nn.Linear(2 * cfg.embed_dim, cfg.embed_dim))

    def forward(self, x, bias):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.layer_norm(x)).view(b, n, 3, self.num_heads, self.key_size).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.key_size) + bias
        x = x + self.out((torch.softmax(logits, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1))
        return x + self.mlp(x)


class UnitsEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.unit_type_embed = nn.Embedding(len(UNIT_TYPES), cfg.embed_dim)
        self.alliance_embed = nn.Embedding(5, cfg.embed_dim)
        self.display_embed = nn.Embedding(3, cfg.embed_dim)
        self.coords_proj = nn.Linear(3, cfg.embed_dim)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))

    @staticmethod
    def _attention_bias(valid, visible, dtype):
        valid_bias = mask_to_bias(make_attention_mask(valid, valid), dtype)
        visible_bias = mask_to_bias(make_attention_mask(visible, visible), dtype)
        return torch.minimum(valid_bias, visible_bias)

    def forward(self, obs):
        valid = torch.arange(self.cfg.max_num_units)[None, :] < obs["num_units"][:, None]
        visible = valid & (obs["display_type"] == VISIBLE) if self.cfg.mask_snapshots else valid
        x = (self.unit_type_embed(obs["unit_type"]) + self.alliance_embed(obs["alliance"])
             + self.display_embed(obs["display_type"]) + self.coords_proj(obs["coords"]))
        bias = self._attention_bias(valid, visible, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        pooled = (x * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
        return x, pooled


class BuildOrderAgent(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.units_encoder = UnitsEncoder(cfg)
        self.scalar_encoder = nn.Linear(1, cfg.embed_dim)
        self.action_type_head = nn.Sequential(nn.Linear(2 * cfg.embed_dim, cfg.embed_dim), nn.ReLU(),
                                              nn.Linear(cfg.embed_dim, len(ACTIONS)))

    def forward(self, obs):
        _, pooled = self.units_encoder(obs)
        return self.action_type_head(torch.cat([pooled, F.relu(self.scalar_encoder(obs["scalars"]))], dim=-1))


def main():
    rng = random.Random(0)
    random.seed(0)
    torch.manual_seed(0)
    cfg = UnitsEncoderConfig()
    agent = BuildOrderAgent(cfg)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for step in range(250):
        obs, labels = featurize([sample_observation(rng, cfg) for _ in range(32)], cfg)
        loss = F.cross_entropy(agent(obs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    obs, labels = featurize([sample_observation(rng, cfg) for _ in range(400)], cfg)
    with torch.no_grad():
        accuracy = (agent(obs).argmax(-1) == labels).float().mean()
    print("behaviour cloning loss %.3f  action accuracy %.3f" % (loss.item(), accuracy))


if __name__ == "__main__":
    main()
