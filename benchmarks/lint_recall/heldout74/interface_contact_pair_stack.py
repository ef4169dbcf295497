"""Interface contact prediction for protein heterodimers with a triangle-attention pair stack.

The two chains of a complex are concatenated (receptor first) and padded to the
longest complex of the batch. A pair representation from residue types and a
chain-aware relative position encoding goes through AlphaFold-2 pair blocks:
triangle multiplicative updates, triangle self-attention around the starting
and the ending node (supplement Algorithms 13 and 14) and the pair transition.
A head predicts inter-chain C-beta contacts (< 8 A); screening runs in float16 (``--half``).

Source: NVIDIA/apex#1052, facebookresearch/fairseq#3575 (conventions.md §3 item 18); conventions.md §2.3
"""
import argparse
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

config = SimpleNamespace(c_z=32, c_hidden_tri_att=8, c_hidden_tri_mul=16, no_heads=4, transition_n=2,
                         no_blocks=2, contact_cutoff=8.0)


def permute_final_dims(tensor, inds):
    zero_index = -1 * len(inds)
    first_inds = list(range(len(tensor.shape[:zero_index])))
    return tensor.permute(first_inds + [zero_index + i for i in inds])


def flatten_final_dims(t, no_dims):
    return t.reshape(t.shape[:-no_dims] + (-1,))


class Linear(nn.Linear):
    def __init__(self, in_dim, out_dim, bias=True, init="default"):
        super().__init__(in_dim, out_dim, bias=bias)
        if init == "gating":
            nn.init.zeros_(self.weight)
            nn.init.ones_(self.bias)
        else:
            nn.init.kaiming_normal_(self.weight, nonlinearity="linear")
            if bias:
                nn.init.zeros_(self.bias)


class TriangleAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, starting=True):
        super().__init__()
        self.c_hidden, self.no_heads, self.starting = c_hidden, no_heads, starting
        self.layer_norm = nn.LayerNorm(c_in)
        self.linear = Linear(c_in, no_heads, bias=False)
        self.linear_q = Linear(c_in, c_hidden * no_heads, bias=False)
        self.linear_k = Linear(c_in, c_hidden * no_heads, bias=False)
        self.linear_v = Linear(c_in, c_hidden * no_heads, bias=False)
        self.linear_g = Linear(c_in, c_hidden * no_heads, init="gating")
        self.linear_o = Linear(c_hidden * no_heads, c_in)

    def forward(self, x, mask):
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = mask.transpose(-1, -2)
        x = self.layer_norm(x)
        mask_bias = (1e9 * (mask - 1))[..., :, None, None, :]  # expect: MC501 half
        triangle_bias = permute_final_dims(self.linear(x), (2, 0, 1)).unsqueeze(-4)
        q, k, v = (permute_final_dims(lin(x).view(x.shape[:-1] + (self.no_heads, -1)), (1, 0, 2))
                   for lin in (self.linear_q, self.linear_k, self.linear_v))
        a = torch.matmul(q, k.transpose(-1, -2)).float() / math.sqrt(self.c_hidden)
        a = a + mask_bias + triangle_bias.float()
        a = torch.softmax(a, dim=-1).to(v.dtype)
        o = torch.matmul(a, v).transpose(-2, -3)
        g = torch.sigmoid(self.linear_g(x)).view(o.shape)
        o = self.linear_o(flatten_final_dims(o * g, 2))
        if not self.starting:
            o = o.transpose(-2, -3)
        return o


class TriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z, c_hidden, outgoing=True):
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_in, self.layer_norm_out = nn.LayerNorm(c_z), nn.LayerNorm(c_hidden)
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")
        self.linear_z = Linear(c_hidden, c_z)
        self.linear_g = Linear(c_z, c_z, init="gating")

    def forward(self, z, mask):
        mask = mask.unsqueeze(-1)
        z = self.layer_norm_in(z)
        a = mask * torch.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)
        b = mask * torch.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        if self.outgoing:
            x = torch.einsum("...ikc,...jkc->...ijc", a, b)
        else:
            x = torch.einsum("...kic,...kjc->...ijc", a, b)
        x = self.linear_z(self.layer_norm_out(x))
        return x * torch.sigmoid(self.linear_g(z))


class PairTransition(nn.Module):
    def __init__(self, c_z, n):
        super().__init__()
        self.layer_norm = nn.LayerNorm(c_z)
        self.linear_1 = Linear(c_z, n * c_z)
        self.linear_2 = Linear(n * c_z, c_z)

    def forward(self, z, mask):
        z = self.linear_2(F.relu(self.linear_1(self.layer_norm(z))))
        return z * mask.unsqueeze(-1)


class PairStackBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tri_mul_out = TriangleMultiplicativeUpdate(cfg.c_z, cfg.c_hidden_tri_mul, outgoing=True)
        self.tri_mul_in = TriangleMultiplicativeUpdate(cfg.c_z, cfg.c_hidden_tri_mul, outgoing=False)
        self.tri_att_start = TriangleAttention(cfg.c_z, cfg.c_hidden_tri_att, cfg.no_heads, starting=True)
        self.tri_att_end = TriangleAttention(cfg.c_z, cfg.c_hidden_tri_att, cfg.no_heads, starting=False)
        self.pair_transition = PairTransition(cfg.c_z, cfg.transition_n)

    def forward(self, z, pair_mask):
        for module in (self.tri_mul_out, self.tri_mul_in, self.tri_att_start, self.tri_att_end, self.pair_transition):
            z = z + module(z, pair_mask)
        return z


class InterfacePairStack(nn.Module):
    def __init__(self, cfg, n_aatype=21, max_relpos=32):
        super().__init__()
        self.max_relpos = max_relpos
        self.left, self.right = nn.Embedding(n_aatype, cfg.c_z), nn.Embedding(n_aatype, cfg.c_z)
        self.relpos = nn.Embedding(2 * max_relpos + 2, cfg.c_z)
        self.blocks = nn.ModuleList([PairStackBlock(cfg) for _ in range(cfg.no_blocks)])
        self.contact_head = Linear(cfg.c_z, 1)

    def relative_position(self, residue_index, chain_id):
        d = residue_index[..., None, :] - residue_index[..., :, None]
        d = d.clamp(-self.max_relpos, self.max_relpos) + self.max_relpos
        same_chain = chain_id[..., :, None] == chain_id[..., None, :]
        return torch.where(same_chain, d, torch.full_like(d, 2 * self.max_relpos + 1))

    def forward(self, batch):
        aatype, seq_mask = batch["aatype"], batch["seq_mask"]
        pair_mask = seq_mask[..., :, None] * seq_mask[..., None, :]
        rel = self.relative_position(batch["residue_index"], batch["chain_id"])
        z = self.left(aatype)[..., :, None, :] + self.right(aatype)[..., None, :, :] + self.relpos(rel)
        z = z.to(seq_mask.dtype)
        for block in self.blocks:
            z = block(z, pair_mask)
        logits = self.contact_head(z).squeeze(-1)
        return (logits + logits.transpose(-1, -2)) / 2, pair_mask


def interface_loss(logits, batch, pair_mask, cfg):
    cb = batch["cb_positions"]
    contacts = (torch.cdist(cb, cb) < cfg.contact_cutoff).float()
    inter = (batch["chain_id"][..., :, None] != batch["chain_id"][..., None, :]).float() * pair_mask
    bce = F.binary_cross_entropy_with_logits(logits.float(), contacts, reduction="none")
    return (bce * inter).sum() / inter.sum().clamp(min=1.0)


def make_batch(chain_lengths, n_res):
    aatype = torch.full((len(chain_lengths), n_res), 20)
    chain_id = torch.zeros(len(chain_lengths), n_res, dtype=torch.long)
    residue_index = torch.zeros(len(chain_lengths), n_res, dtype=torch.long)
    seq_mask = torch.zeros(len(chain_lengths), n_res)
    for b, (n_rec, n_lig) in enumerate(chain_lengths):
        n = n_rec + n_lig
        aatype[b, :n] = torch.randint(0, 20, (n,))
        chain_id[b, n_rec:n] = 1
        residue_index[b, :n] = torch.cat([torch.arange(n_rec), torch.arange(n_lig)])
        seq_mask[b, :n] = 1.0
    cb = torch.cumsum(torch.randn(len(chain_lengths), n_res, 3) * 2.0, dim=1) * seq_mask[..., None]
    return {"aatype": aatype, "chain_id": chain_id, "residue_index": residue_index,
            "seq_mask": seq_mask, "cb_positions": cb}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--half", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = InterfacePairStack(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = make_batch([(6, 4), (4, 3)], 10)
    for step in range(3):
        logits, pair_mask = model(batch)
        loss = interface_loss(logits, batch, pair_mask, config)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    dtype = torch.float16 if args.half else torch.float32
    model = model.to(dtype).eval()
    with torch.no_grad():
        logits, pair_mask = model({**batch, "seq_mask": batch["seq_mask"].to(dtype)})
    print("contact logits", dtype, "finite:", bool(torch.isfinite(logits).all()))
