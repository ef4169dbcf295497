"""Pair stack with triangle updates and triangle attention, in OpenFold's layout.

Written after aqlaboratory/openfold (openfold/model/triangular_attention.py
TriangleAttention with ``starting`` and ``inf``, openfold/model/triangular_multiplicative_update.py,
openfold/model/pair_transition.py, openfold/model/primitives.py Attention): a
template-free pair stack over relative-position and residue-pair features that predicts
a contact map for a chain, trained on random-walk C-alpha traces.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), conventions.md §1 (direction cheat-sheet) and §3 item 27.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def permute_final_dims(tensor, inds):
    zero_index = -1 * len(inds)
    first_inds = list(range(len(tensor.shape[:zero_index])))
    return tensor.permute(first_inds + [zero_index + i for i in inds])


class Attention(nn.Module):
    def __init__(self, c_q, c_k, c_v, c_hidden, no_heads, gating=True):
        super().__init__()
        self.c_hidden, self.no_heads = c_hidden, no_heads
        self.linear_q = nn.Linear(c_q, c_hidden * no_heads, bias=False)
        self.linear_k = nn.Linear(c_k, c_hidden * no_heads, bias=False)
        self.linear_v = nn.Linear(c_v, c_hidden * no_heads, bias=False)
        self.linear_o = nn.Linear(c_hidden * no_heads, c_q)
        self.linear_g = nn.Linear(c_q, c_hidden * no_heads) if gating else None

    def forward(self, q_x, kv_x, biases=None):
        q = self.linear_q(q_x).view(q_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        k = self.linear_k(kv_x).view(kv_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        v = self.linear_v(kv_x).view(kv_x.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)
        a = torch.matmul(q / math.sqrt(self.c_hidden), permute_final_dims(k, (1, 0)))
        for b in biases or []:
            a = a + b
        a = torch.softmax(a, dim=-1)
        o = torch.matmul(a, v).transpose(-2, -3)
        if self.linear_g is not None:
            g = torch.sigmoid(self.linear_g(q_x))
            o = o * g.view(g.shape[:-1] + (self.no_heads, -1))
        return self.linear_o(o.reshape(o.shape[:-2] + (-1,)))


class TriangleAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, starting=True, inf=1e9):
        super().__init__()
        self.starting, self.inf = starting, inf
        self.layer_norm = nn.LayerNorm(c_in)
        self.linear = nn.Linear(c_in, no_heads, bias=False)
        self.mha = Attention(c_in, c_in, c_in, c_hidden, no_heads)

    def forward(self, x, mask=None):
        if mask is None:
            mask = x.new_ones(x.shape[:-1])
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = mask.transpose(-1, -2)
        x = self.layer_norm(x)
        # [*, I, 1, 1, J]
        mask_bias = (float("-inf") * (1.0 - mask))[..., :, None, None, :]  # expect: MC522 triangle
        # [*, 1, H, I, J]
        triangle_bias = permute_final_dims(self.linear(x), (2, 0, 1)).unsqueeze(-4)
        x = self.mha(q_x=x, kv_x=x, biases=[mask_bias, triangle_bias])
        if not self.starting:
            x = x.transpose(-2, -3)
        return x


class TriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z, c_hidden, _outgoing=True):
        super().__init__()
        self._outgoing = _outgoing
        self.linear_a_p = nn.Linear(c_z, c_hidden)
        self.linear_a_g = nn.Linear(c_z, c_hidden)
        self.linear_b_p = nn.Linear(c_z, c_hidden)
        self.linear_b_g = nn.Linear(c_z, c_hidden)
        self.linear_g = nn.Linear(c_z, c_z)
        self.linear_z = nn.Linear(c_hidden, c_z)
        self.layer_norm_in = nn.LayerNorm(c_z)
        self.layer_norm_out = nn.LayerNorm(c_hidden)

    def _combine_projections(self, a, b):
        if self._outgoing:
            a, b = permute_final_dims(a, (2, 0, 1)), permute_final_dims(b, (2, 1, 0))
        else:
            a, b = permute_final_dims(a, (2, 1, 0)), permute_final_dims(b, (2, 0, 1))
        return permute_final_dims(torch.matmul(a, b), (1, 2, 0))

    def forward(self, z, mask=None):
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        mask = mask.unsqueeze(-1)
        z = self.layer_norm_in(z)
        a = mask * torch.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)
        b = mask * torch.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        x = self.linear_z(self.layer_norm_out(self._combine_projections(a, b)))
        return x * torch.sigmoid(self.linear_g(z))


class PairTransition(nn.Module):
    def __init__(self, c_z, n=2):
        super().__init__()
        self.layer_norm = nn.LayerNorm(c_z)
        self.linear_1 = nn.Linear(c_z, n * c_z)
        self.linear_2 = nn.Linear(n * c_z, c_z)

    def forward(self, z, mask):
        return self.linear_2(F.relu(self.linear_1(self.layer_norm(z)))) * mask.unsqueeze(-1)


@dataclass
class PairStackConfig:
    c_z: int = 24
    c_hidden_mul: int = 24
    c_hidden_pair_att: int = 8
    no_heads_pair: int = 4
    no_blocks: int = 2
    relpos_k: int = 16
    inf: float = 1e9


class PairStackBlock(nn.Module):
    def __init__(self, cfg: PairStackConfig):
        super().__init__()
        self.tri_mul_out = TriangleMultiplicativeUpdate(cfg.c_z, cfg.c_hidden_mul, _outgoing=True)
        self.tri_mul_in = TriangleMultiplicativeUpdate(cfg.c_z, cfg.c_hidden_mul, _outgoing=False)
        self.tri_att_start = TriangleAttention(cfg.c_z, cfg.c_hidden_pair_att, cfg.no_heads_pair, starting=True, inf=cfg.inf)
        self.tri_att_end = TriangleAttention(cfg.c_z, cfg.c_hidden_pair_att, cfg.no_heads_pair, starting=False, inf=cfg.inf)
        self.pair_transition = PairTransition(cfg.c_z)

    def forward(self, z, pair_mask):
        z = z + self.tri_mul_out(z, mask=pair_mask)
        z = z + self.tri_mul_in(z, mask=pair_mask)
        z = z + self.tri_att_start(z, mask=pair_mask)
        z = z + self.tri_att_end(z, mask=pair_mask)
        return z + self.pair_transition(z, mask=pair_mask)


class ContactModel(nn.Module):
    def __init__(self, cfg: PairStackConfig):
        super().__init__()
        self.cfg = cfg
        self.linear_tf_z_i = nn.Linear(21, cfg.c_z)
        self.linear_tf_z_j = nn.Linear(21, cfg.c_z)
        self.linear_relpos = nn.Linear(2 * cfg.relpos_k + 1, cfg.c_z)
        self.blocks = nn.ModuleList(PairStackBlock(cfg) for _ in range(cfg.no_blocks))
        self.contact_head = nn.Linear(cfg.c_z, 1)

    def forward(self, aatype, residue_index, seq_mask):
        tf = F.one_hot(aatype, 21).float()
        d = (residue_index[..., None] - residue_index[..., None, :]).clamp(-self.cfg.relpos_k, self.cfg.relpos_k)
        z = self.linear_tf_z_i(tf)[..., :, None, :] + self.linear_tf_z_j(tf)[..., None, :, :]
        z = z + self.linear_relpos(F.one_hot(d + self.cfg.relpos_k, 2 * self.cfg.relpos_k + 1).float())
        pair_mask = seq_mask[..., :, None] * seq_mask[..., None, :]
        for block in self.blocks:
            z = block(z, pair_mask=pair_mask)
        logits = self.contact_head(z).squeeze(-1)
        return (logits + logits.transpose(-1, -2)) / 2


def random_walk_chain(n_res, generator):
    steps = F.normalize(torch.randn(n_res, 3, generator=generator), dim=-1) * 3.8
    ca = torch.cumsum(steps, dim=0)
    contacts = (torch.cdist(ca, ca) < 8.0).float()
    return {"aatype": torch.randint(0, 20, (n_res,), generator=generator), "contacts": contacts}


def collate(chains):
    n = max(c["aatype"].shape[0] for c in chains)
    batch = {"aatype": [], "residue_index": [], "seq_mask": [], "contacts": []}
    for c in chains:
        r = c["aatype"].shape[0]
        batch["aatype"].append(F.pad(c["aatype"], (0, n - r), value=20))
        batch["residue_index"].append(torch.arange(n))
        batch["seq_mask"].append(F.pad(torch.ones(r), (0, n - r)))
        batch["contacts"].append(F.pad(c["contacts"], (0, n - r, 0, n - r)))
    return {k: torch.stack(v) for k, v in batch.items()}


def contact_loss(logits, contacts, seq_mask, min_separation=3):
    n = logits.shape[-1]
    sep = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() >= min_separation
    weight = seq_mask[:, :, None] * seq_mask[:, None, :] * sep
    bce = F.binary_cross_entropy_with_logits(logits, contacts, reduction="none")
    return (bce * weight).sum() / weight.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    chains = [random_walk_chain(int(torch.randint(10, 25, (1,), generator=g)), g) for _ in range(24)]
    model = ContactModel(PairStackConfig())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(24):
        batch = collate(chains[(step * 4) % 24 : (step * 4) % 24 + 4])
        logits = model(batch["aatype"], batch["residue_index"], batch["seq_mask"])
        loss = contact_loss(logits, batch["contacts"], batch["seq_mask"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 8 == 0:
            print(f"step {step} contact loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        short, long = min(chains, key=lambda c: len(c["aatype"])), max(chains, key=lambda c: len(c["aatype"]))
        n = len(short["aatype"])
        b2, b1 = collate([short, long]), collate([short])
        batched = model(b2["aatype"], b2["residue_index"], b2["seq_mask"])[0, :n, :n]
        alone = model(b1["aatype"], b1["residue_index"], b1["seq_mask"])[0]
        print("batched vs alone:", (batched - alone).abs().max().item())
