"""Set Transformer: amortized clustering of Gaussian mixtures (Lee et al., ICML 2019).

Written in the layout of juho-lee/set_transformer (modules.py `MAB` with heads split and
concatenated along the batch axis, `SAB`, `ISAB` with inducing points, `PMA` with seed vectors;
models.py `SetTransformer`; mixture_of_mvns.py `MultivariateNormalDiag` and `MixtureOfMVNs`
with `sample`, `log_prob` and `parse`; run.py training on the mixture log-likelihood against
the oracle), extended to batches of sets of different sizes padded to the largest, with a
point mask carried from the sampler to every attention over the points.

Source: seed self_attention_mask_guide.txt §3 and §7 Q3; pytorch/pytorch#103963 (conventions.md
§3 item 6); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class MAB(nn.Module):
    def __init__(self, dim_Q, dim_K, dim_V, num_heads, ln=False):
        super().__init__()
        self.dim_V = dim_V
        self.num_heads = num_heads
        self.fc_q = nn.Linear(dim_Q, dim_V)
        self.fc_k = nn.Linear(dim_K, dim_V)
        self.fc_v = nn.Linear(dim_K, dim_V)
        if ln:
            self.ln0 = nn.LayerNorm(dim_V)
            self.ln1 = nn.LayerNorm(dim_V)
        self.fc_o = nn.Linear(dim_V, dim_V)

    def forward(self, Q, K, key_mask=None):
        Q = self.fc_q(Q)
        K, V = self.fc_k(K), self.fc_v(K)
        dim_split = self.dim_V // self.num_heads
        Q_ = torch.cat(Q.split(dim_split, 2), 0)
        K_ = torch.cat(K.split(dim_split, 2), 0)
        V_ = torch.cat(V.split(dim_split, 2), 0)
        logits = Q_.bmm(K_.transpose(1, 2)) / math.sqrt(self.dim_V)
        if key_mask is not None:
            key_keep = key_mask.repeat(self.num_heads, 1).unsqueeze(1)
            A = torch.softmax(logits * key_keep, 2)  # expect: MC520 settf
        else:
            A = torch.softmax(logits, 2)
        O = torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)
        O = O if getattr(self, "ln0", None) is None else self.ln0(O)
        O = O + F.relu(self.fc_o(O))
        return O if getattr(self, "ln1", None) is None else self.ln1(O)


class SAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, ln=False):
        super().__init__()
        self.mab = MAB(dim_in, dim_in, dim_out, num_heads, ln=ln)

    def forward(self, X, mask=None):
        return self.mab(X, X, key_mask=mask)


class ISAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, num_inds, ln=False):
        super().__init__()
        self.I = nn.Parameter(torch.Tensor(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads, ln=ln)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads, ln=ln)

    def forward(self, X, mask=None):
        H = self.mab0(self.I.repeat(X.size(0), 1, 1), X, key_mask=mask)
        return self.mab1(X, H)


class PMA(nn.Module):
    def __init__(self, dim, num_heads, num_seeds, ln=False):
        super().__init__()
        self.S = nn.Parameter(torch.Tensor(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads, ln=ln)

    def forward(self, X, mask=None):
        return self.mab(self.S.repeat(X.size(0), 1, 1), X, key_mask=mask)


@dataclass
class SetTransformerConfig:
    dim_input: int = 2
    num_outputs: int = 4
    dim_hidden: int = 64
    num_inds: int = 16
    num_heads: int = 4
    ln: bool = True


class SetTransformer(nn.Module):
    def __init__(self, cfg: SetTransformerConfig, dim_output):
        super().__init__()
        h, heads = cfg.dim_hidden, cfg.num_heads
        self.enc = nn.ModuleList(
            [
                ISAB(cfg.dim_input, h, heads, cfg.num_inds, ln=cfg.ln),
                ISAB(h, h, heads, cfg.num_inds, ln=cfg.ln),
            ]
        )
        self.pma = PMA(h, heads, cfg.num_outputs, ln=cfg.ln)
        self.dec = nn.Sequential(
            SAB(h, h, heads, ln=cfg.ln), SAB(h, h, heads, ln=cfg.ln), nn.Linear(h, dim_output)
        )

    def forward(self, X, mask=None):
        for layer in self.enc:
            X = layer(X, mask=mask)
        return self.dec(self.pma(X, mask=mask))


class MultivariateNormalDiag:
    def __init__(self, dim):
        self.dim = dim

    def sample(self, B, K, labels):
        N = labels.shape[-1]
        mu = -4.0 + 8.0 * torch.rand(B, K, self.dim)
        sigma = 0.3 * torch.ones(B, K, self.dim)
        eps = torch.randn(B, N, self.dim)
        rlabels = labels.unsqueeze(-1).repeat(1, 1, self.dim)
        X = torch.gather(mu, 1, rlabels) + eps * torch.gather(sigma, 1, rlabels)
        return X, (mu, sigma)

    def log_prob(self, X, params):
        mu, sigma = params
        diff = X.unsqueeze(2) - mu.unsqueeze(1)
        ll = -0.5 * math.log(2 * math.pi) - sigma.unsqueeze(1).log()
        return (ll - 0.5 * (diff.pow(2) / sigma.unsqueeze(1).pow(2))).sum(-1)

    def parse(self, raw):
        mu = raw[..., : self.dim]
        sigma = F.softplus(raw[..., self.dim :])
        return mu, sigma


class MixtureOfMVNs:
    def __init__(self, mvn):
        self.mvn = mvn

    def sample(self, B, N_max, K, sizes):
        pi = torch.distributions.Dirichlet(torch.ones(K)).sample(torch.Size([B]))
        labels = torch.multinomial(pi, N_max, replacement=True)
        X, params = self.mvn.sample(B, K, labels)
        mask = (torch.arange(N_max)[None, :] < sizes[:, None]).float()
        return {"X": X * mask.unsqueeze(-1), "mask": mask}, pi, params

    def log_prob(self, X, pi, params, mask):
        ll = self.mvn.log_prob(X, params) + (pi + 1e-10).log().unsqueeze(-2)
        return (ll.logsumexp(-1) * mask).sum() / mask.sum()

    def parse(self, raw):
        pi = torch.softmax(raw[..., 0], -1)
        return pi, self.mvn.parse(raw[..., 1:])


def main():
    torch.manual_seed(0)
    D, K, B, N_max = 2, 4, 10, 64
    mvn = MultivariateNormalDiag(D)
    mog = MixtureOfMVNs(mvn)
    net = SetTransformer(SetTransformerConfig(dim_input=D, num_outputs=K), dim_output=2 * D + 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for step in range(150):
        sizes = torch.randint(16, N_max + 1, (B,))
        batch, _, _ = mog.sample(B, N_max, K, sizes)
        ll = mog.log_prob(batch["X"], *mog.parse(net(**batch)), mask=batch["mask"])
        loss = -ll
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} nll {loss.item():.4f}")
    net.eval()
    with torch.no_grad():
        sizes = torch.randint(16, N_max + 1, (50,))
        batch, pi, params = mog.sample(50, N_max, K, sizes)
        ll = mog.log_prob(batch["X"], *mog.parse(net(**batch)), mask=batch["mask"])
        oracle = mog.log_prob(batch["X"], pi, params, mask=batch["mask"])
        n = int(sizes[0])
        alone = net(batch["X"][:1, :n], mask=batch["mask"][:1, :n])
        padded = net(batch["X"][:1], mask=batch["mask"][:1])
    print(f"test ll {ll.item():.4f} (oracle {oracle.item():.4f})")
    print(f"one set alone vs padded to {N_max}: {(alone - padded).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
