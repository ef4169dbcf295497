"""Decompression ceiling from dive-computer logs (Hub remote code: configuration and modeling in one file).

Reads a recreational dive's logged profile (depth, sample interval, ascent rate, gas O2 fraction,
water temperature; one sample every 10 s) and estimates, at each sample, the decompression
ceiling and the leading tissue's saturation, as a learned stand-in for a Bühlmann ZH-L16
computation. Causal attention: an estimate uses only the dive so far. The SDPA path serves the
app; the eager path returns the attention maps for the log viewer (`output_attentions=True`).

Source: huggingface/transformers#32113 (conventions.md §4.1); conventions.md §2.9, §5 item 7
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

FEATURES = ["depth_m", "interval_s", "ascent_rate", "fo2", "temp_c"]


class DiveConfig(PretrainedConfig):
    model_type = "dive_ceiling"

    def __init__(self, n_features=len(FEATURES), hidden_size=64, num_heads=4, num_layers=3,
                 max_samples=512, attn_implementation_name="sdpa", **kwargs):
        self.n_features = n_features
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.max_samples = max_samples
        self.attn_implementation_name = attn_implementation_name
        super().__init__(**kwargs)


def build_attention_mask(sample_keep):
    n = sample_keep.size(1)
    causal = torch.ones(n, n, dtype=torch.bool, device=sample_keep.device).tril()
    return causal[None, None] & sample_keep[:, None, None, :]


class DiveAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.implementation = config.attn_implementation_name
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask, output_attentions=False):
        b, t, d = hidden_states.shape
        q, k, v = (p(hidden_states).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        if output_attentions or self.implementation == "eager":
            attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
            attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
            attn_output = torch.matmul(attn_weights, v)
        else:
            attn_weights = None
            attn_output = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o_proj(attn_output.transpose(1, 2).reshape(b, t, d)), attn_weights


class DiveLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_norm = nn.LayerNorm(config.hidden_size)
        self.attn = DiveAttention(config)
        self.post_norm = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))

    def forward(self, x, attention_mask, output_attentions=False):
        a, weights = self.attn(self.input_norm(x), attention_mask, output_attentions)
        x = x + a
        return x + self.mlp(self.post_norm(x)), weights


class DiveCeilingModel(PreTrainedModel):
    config_class = DiveConfig
    base_model_prefix = "dive"

    def __init__(self, config):
        super().__init__(config)
        self.input_proj = nn.Linear(config.n_features, config.hidden_size)
        self.sample_pos = nn.Embedding(config.max_samples, config.hidden_size)
        self.layers = nn.ModuleList([DiveLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, profile, sample_keep=None, ceiling=None, output_attentions=False):
        if sample_keep is None:
            sample_keep = torch.ones(profile.shape[:2], dtype=torch.bool, device=profile.device)
        attention_mask = build_attention_mask(sample_keep)
        x = self.input_proj(profile) + self.sample_pos(torch.arange(profile.size(1), device=profile.device))
        attentions = []
        for layer in self.layers:
            x, weights = layer(x, attention_mask, output_attentions)
            attentions.append(weights)
        pred = self.head(self.norm(x))
        ceiling_m, saturation = F.softplus(pred[..., 0]), torch.sigmoid(pred[..., 1])
        loss = F.smooth_l1_loss(ceiling_m[sample_keep], ceiling[sample_keep]) if ceiling is not None else None
        return {"loss": loss, "ceiling": ceiling_m, "saturation": saturation,
                "attentions": attentions if output_attentions else None}


def profile_tensor(samples):
    x = torch.tensor(samples, dtype=torch.float32)
    return (x - torch.tensor([20.0, 10.0, 0.0, 0.21, 15.0])) / torch.tensor([15.0, 5.0, 5.0, 0.1, 8.0])


@torch.no_grad()
def explain_sample(model, samples, index=-1):
    model.eval()
    out = model(profile_tensor(samples)[None], output_attentions=True)
    weights = out["attentions"][-1][0, :, index].mean(dim=0)
    top = weights.topk(min(3, weights.numel()))
    return float(out["ceiling"][0, index]), [(int(i), round(float(w), 3)) for w, i in zip(top.values, top.indices)]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DiveCeilingModel(DiveConfig())
    dive = [[min(3.0 * i, 30.0), 10.0, -3.0 if i < 10 else 0.0, 0.32, 14.0] for i in range(30)]
    dive += [[30.0 - 1.5 * i, 10.0, 9.0, 0.32, 15.0] for i in range(1, 15)]
    with torch.no_grad():
        print(model(profile_tensor(dive)[None])["ceiling"][0, -3:])
    print(explain_sample(model, dive, index=20))
