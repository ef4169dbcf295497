"""Evoformer MSA stack in OpenFold's layout, for a small distogram model.

Written after aqlaboratory/openfold (openfold/model/msa.py MSAAttention with
and without a pair bias, MSAColumnAttention, openfold/model/primitives.py
Attention with a list of biases, openfold/model/outer_product_mean.py,
openfold/model/embedders.py relpos): MSA rows attend along residues with a pair bias,
columns along sequences, the outer product mean writes back into the pair stack.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3 and §5 item 4, tools.md §0 P5.
"""
import math
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def permute_final_dims(tensor, inds):
    zero_index = -1 * len(inds)
    first_inds = list(range(len(tensor.shape[:zero_index])))
    return tensor.permute(first_inds + [zero_index + i for i in inds])


def mask_to_bias(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask == 0, torch.finfo(dtype).min)


class Linear(nn.Linear):
    def __init__(self, in_dim, out_dim, bias=True, init="default"):
        super().__init__(in_dim, out_dim, bias=bias)
        if init == "final":
            nn.init.zeros_(self.weight)
        elif init == "gating":
            nn.init.zeros_(self.weight)
            nn.init.ones_(self.bias)
        if bias and init != "gating":
            nn.init.zeros_(self.bias)


class Attention(nn.Module):
    def __init__(self, c_q, c_k, c_v, c_hidden, no_heads, gating=True):
        super().__init__()
        self.c_hidden, self.no_heads = c_hidden, no_heads
        self.linear_q = Linear(c_q, c_hidden * no_heads, bias=False)
        self.linear_k = Linear(c_k, c_hidden * no_heads, bias=False)
        self.linear_v = Linear(c_v, c_hidden * no_heads, bias=False)
        self.linear_o = Linear(c_hidden * no_heads, c_q, init="final")
        self.linear_g = Linear(c_q, c_hidden * no_heads, init="gating") if gating else None

    def forward(self, q_x, kv_x, biases: Optional[List[torch.Tensor]] = None):
        q = self.linear_q(q_x).view(q_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        k = self.linear_k(kv_x).view(kv_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        v = self.linear_v(kv_x).view(kv_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        q = q / math.sqrt(self.c_hidden)
        a = torch.matmul(q, permute_final_dims(k, (1, 0)))
        for b in biases or []:
            a = a + b
        a = torch.softmax(a, dim=-1)
        o = torch.matmul(a, v).transpose(-2, -3)
        if self.linear_g is not None:
            g = torch.sigmoid(self.linear_g(q_x))
            o = o * g.view(g.shape[:-1] + (self.no_heads, -1))
        return self.linear_o(o.reshape(o.shape[:-2] + (-1,)))


class MSAAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, pair_bias=False, c_z=None):
        super().__init__()
        self.pair_bias = pair_bias
        self.layer_norm_m = nn.LayerNorm(c_in)
        if pair_bias:
            self.layer_norm_z = nn.LayerNorm(c_z)
            self.linear_z = Linear(c_z, no_heads, bias=False)
        self.mha = Attention(c_in, c_in, c_in, c_hidden, no_heads)

    def _prep_inputs(self, m, z, mask, pair_mask):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        # [*, N_seq, 1, 1, N_res]
        mask_bias = mask_to_bias(mask, m.dtype)[..., :, None, None, :]
        if pair_mask is not None:
            # [*, 1, 1, N_res, N_res]
            pair_bias = mask_to_bias(pair_mask, m.dtype)[..., None, None, :, :]
            mask_bias = mask_bias + pair_bias  # expect: MC513 evoformer
        if self.pair_bias and z is not None:
            z = self.linear_z(self.layer_norm_z(z))
            z = permute_final_dims(z, (2, 0, 1)).unsqueeze(-4)
        return self.layer_norm_m(m), mask_bias, z

    def forward(self, m, z=None, mask=None, pair_mask=None):
        m, mask_bias, z = self._prep_inputs(m, z, mask, pair_mask)
        biases = [mask_bias] if z is None else [mask_bias, z]
        return self.mha(q_x=m, kv_x=m, biases=biases)


class MSAColumnAttention(nn.Module):
    def __init__(self, c_m, c_hidden, no_heads):
        super().__init__()
        self._msa_att = MSAAttention(c_m, c_hidden, no_heads)

    def forward(self, m, mask=None):
        m = m.transpose(-2, -3)
        mask = mask.transpose(-1, -2) if mask is not None else None
        m = self._msa_att(m, mask=mask)
        return m.transpose(-2, -3)


class OuterProductMean(nn.Module):
    def __init__(self, c_m, c_z, c_hidden, eps=1e-3):
        super().__init__()
        self.eps = eps
        self.layer_norm = nn.LayerNorm(c_m)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden**2, c_z, init="final")

    def forward(self, m, mask):
        ln = self.layer_norm(m)
        mask = mask.unsqueeze(-1)
        a = (self.linear_1(ln) * mask).transpose(-2, -3)
        b = (self.linear_2(ln) * mask).transpose(-2, -3)
        outer = torch.einsum("...bac,...dae->...bdce", a, b)
        outer = self.linear_out(outer.reshape(outer.shape[:-2] + (-1,)))
        norm = torch.einsum("...abc,...adc->...bdc", mask, mask)
        return outer / (norm + self.eps)


class Transition(nn.Module):
    def __init__(self, c, n=2):
        super().__init__()
        self.layer_norm = nn.LayerNorm(c)
        self.linear_1 = Linear(c, n * c)
        self.linear_2 = Linear(n * c, c, init="final")

    def forward(self, x, mask):
        return self.linear_2(F.relu(self.linear_1(self.layer_norm(x)))) * mask.unsqueeze(-1)


@dataclass
class EvoformerConfig:
    c_m: int = 32
    c_z: int = 16
    c_hidden_msa_att: int = 8
    c_hidden_opm: int = 8
    no_heads_msa: int = 4
    no_blocks: int = 2
    relpos_k: int = 8
    no_bins: int = 16
    msa_channels: int = 23


class EvoformerBlock(nn.Module):
    def __init__(self, cfg: EvoformerConfig):
        super().__init__()
        self.msa_att_row = MSAAttention(cfg.c_m, cfg.c_hidden_msa_att, cfg.no_heads_msa, pair_bias=True, c_z=cfg.c_z)
        self.msa_att_col = MSAColumnAttention(cfg.c_m, cfg.c_hidden_msa_att, cfg.no_heads_msa)
        self.msa_transition = Transition(cfg.c_m)
        self.outer_product_mean = OuterProductMean(cfg.c_m, cfg.c_z, cfg.c_hidden_opm)
        self.pair_transition = Transition(cfg.c_z)

    def forward(self, m, z, msa_mask, pair_mask):
        m = m + self.msa_att_row(m, z=z, mask=msa_mask, pair_mask=pair_mask)
        m = m + self.msa_att_col(m, mask=msa_mask)
        m = m + self.msa_transition(m, mask=msa_mask)
        z = z + self.outer_product_mean(m, mask=msa_mask)
        z = z + self.pair_transition(z, mask=pair_mask)
        return m, z


class DistogramModel(nn.Module):
    def __init__(self, cfg: EvoformerConfig):
        super().__init__()
        self.cfg = cfg
        self.linear_msa_m = Linear(cfg.msa_channels, cfg.c_m)
        self.linear_tf_z_i = Linear(21, cfg.c_z)
        self.linear_tf_z_j = Linear(21, cfg.c_z)
        self.linear_relpos = Linear(2 * cfg.relpos_k + 1, cfg.c_z)
        self.blocks = nn.ModuleList(EvoformerBlock(cfg) for _ in range(cfg.no_blocks))
        self.distogram = Linear(cfg.c_z, cfg.no_bins, init="final")

    def relpos(self, residue_index):
        d = residue_index[..., None] - residue_index[..., None, :]
        d = torch.clamp(d, -self.cfg.relpos_k, self.cfg.relpos_k) + self.cfg.relpos_k
        return self.linear_relpos(F.one_hot(d, 2 * self.cfg.relpos_k + 1).float())

    def forward(self, batch):
        tf = F.one_hot(batch["aatype"], 21).float()
        z = self.linear_tf_z_i(tf)[..., :, None, :] + self.linear_tf_z_j(tf)[..., None, :, :]
        z = z + self.relpos(batch["residue_index"])
        m = self.linear_msa_m(F.one_hot(batch["msa"], self.cfg.msa_channels).float())
        seq_mask, msa_mask = batch["seq_mask"], batch["msa_mask"]
        pair_mask = seq_mask[..., :, None] * seq_mask[..., None, :]
        for block in self.blocks:
            m, z = block(m, z, msa_mask=msa_mask, pair_mask=pair_mask)
        logits = self.distogram(z)
        return logits + logits.transpose(-2, -3), pair_mask


def make_example(n_res, n_seq, generator):
    aatype = torch.randint(0, 20, (n_res,), generator=generator)
    msa = torch.where(torch.rand(n_seq, n_res, generator=generator) < 0.3,
                      torch.randint(0, 21, (n_seq, n_res), generator=generator), aatype.expand(n_seq, n_res))
    dist_bins = (torch.arange(n_res)[:, None] - torch.arange(n_res)[None, :]).abs().clamp(max=15)
    return {"aatype": aatype, "msa": msa, "residue_index": torch.arange(n_res), "dist_bins": dist_bins}


def collate(examples):
    n_res = max(e["aatype"].shape[0] for e in examples)
    n_seq = max(e["msa"].shape[0] for e in examples)
    out = {"aatype": [], "msa": [], "residue_index": [], "seq_mask": [], "msa_mask": [], "dist_bins": []}
    for e in examples:
        s, r = e["msa"].shape
        out["aatype"].append(F.pad(e["aatype"], (0, n_res - r), value=20))
        out["msa"].append(F.pad(e["msa"], (0, n_res - r, 0, n_seq - s), value=22))
        out["residue_index"].append(F.pad(e["residue_index"], (0, n_res - r)))
        out["seq_mask"].append(F.pad(torch.ones(r), (0, n_res - r)))
        out["msa_mask"].append(F.pad(torch.ones(s, r), (0, n_res - r, 0, n_seq - s)))
        out["dist_bins"].append(F.pad(e["dist_bins"], (0, n_res - r, 0, n_res - r)))
    return {k: torch.stack(v) for k, v in out.items()}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    examples = [make_example(int(torch.randint(8, 17, (1,), generator=g)), int(torch.randint(3, 9, (1,), generator=g)), g)
                for _ in range(32)]
    model = DistogramModel(EvoformerConfig())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(30):
        batch = collate(examples[(step * 4) % 32 : (step * 4) % 32 + 4])
        logits, pair_mask = model(batch)
        ce = F.cross_entropy(logits.permute(0, 3, 1, 2), batch["dist_bins"], reduction="none")
        loss = (ce * pair_mask).sum() / pair_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} distogram loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        short = min(examples, key=lambda e: e["aatype"].shape[0] * e["msa"].shape[0])
        long = max(examples, key=lambda e: e["aatype"].shape[0] * e["msa"].shape[0])
        n = short["aatype"].shape[0]
        batched = model(collate([short, long]))[0][0, :n, :n]
        alone = model(collate([short]))[0][0]
        print("batched vs alone:", (batched - alone).abs().max().item())
