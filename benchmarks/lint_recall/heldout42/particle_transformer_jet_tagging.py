"""Top-quark jet tagging with the Particle Transformer (ParT, Qu, Li and Qian, 2022).

jet-universe/particle_transformer's layout: per-particle kinematic features (log pT, log E,
their ratios to the jet, deta, dphi, dR) through `Embed`, pairwise Lorentz-vector features
(ln kT, ln z, ln dR, ln m^2) through `PairEmbed` into one attention bias per head, particle
attention blocks on nn.MultiheadAttention, then class-attention blocks where a learned class
token reads the particles; jets of 10-40 constituents padded to 48. Accuracy and AUC on
top vs QCD jets.

Source: seed self_attention_mask_guide.txt section 3 (常见误区) and section 7 Q3, pytorch/pytorch#103963 (conventions.md section 3 item 6), conventions.md section 1 (direction cheat-sheet)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_PARTICLES = 48


def to_ptrapphim(x, eps=1e-8):
    px, py, pz, energy = x.split((1, 1, 1, 1), dim=1)
    pt = torch.sqrt(px ** 2 + py ** 2 + eps)
    rapidity = 0.5 * torch.log(1 + (2 * pz) / (energy - pz).clamp(min=1e-20))
    phi = torch.atan2(py, px)
    m = torch.sqrt((energy ** 2 - px ** 2 - py ** 2 - pz ** 2).clamp(min=eps))
    return torch.cat((pt, rapidity, phi, m), dim=1)


def pairwise_lv_fts(xi, xj, eps=1e-8):
    pti, rapi, phii = to_ptrapphim(xi)[:, :3].split(1, dim=1)
    ptj, rapj, phij = to_ptrapphim(xj)[:, :3].split(1, dim=1)
    dphi = (phii - phij + math.pi) % (2 * math.pi) - math.pi
    delta = torch.sqrt((rapi - rapj) ** 2 + dphi ** 2)
    lndelta = torch.log(delta.clamp(min=eps))
    ptmin = torch.minimum(pti, ptj)
    lnkt = torch.log((ptmin * delta).clamp(min=eps))
    lnz = torch.log((ptmin / (pti + ptj).clamp(min=eps)).clamp(min=eps))
    xij = xi + xj
    lnm2 = torch.log((xij[:, 3:4] ** 2 - (xij[:, :3] ** 2).sum(1, keepdim=True)).clamp(min=eps))
    return torch.cat([lnkt, lnz, lndelta, lnm2], dim=1)


class Embed(nn.Module):
    def __init__(self, input_dim, dims=(64, 64)):
        super().__init__()
        self.input_bn = nn.BatchNorm1d(input_dim)
        module_list = []
        for dim in dims:
            module_list.extend([nn.LayerNorm(input_dim), nn.Linear(input_dim, dim), nn.GELU()])
            input_dim = dim
        self.embed = nn.Sequential(*module_list)

    def forward(self, x):
        return self.embed(self.input_bn(x).transpose(1, 2))


class PairEmbed(nn.Module):
    def __init__(self, num_heads, dims=(32, 32)):
        super().__init__()
        layers, in_dim = [nn.BatchNorm1d(4)], 4
        for dim in dims:
            layers += [nn.Conv1d(in_dim, dim, 1), nn.BatchNorm1d(dim), nn.GELU()]
            in_dim = dim
        layers.append(nn.Conv1d(in_dim, num_heads, 1))
        self.embed = nn.Sequential(*layers)

    def forward(self, v):
        batch_size, _, seq_len = v.size()
        i, j = torch.tril_indices(seq_len, seq_len, offset=-1, device=v.device)
        fts = pairwise_lv_fts(v[:, :, i], v[:, :, j])
        elements = self.embed(fts)
        y = torch.zeros(batch_size, elements.size(1), seq_len, seq_len, device=v.device)
        y[:, :, i, j] = elements
        y[:, :, j, i] = elements
        return y


class Block(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, ffn_ratio=4, dropout=0.1):
        super().__init__()
        self.pre_attn_norm = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, batch_first=True)
        self.pre_fc_norm = nn.LayerNorm(embed_dim)
        self.fc = nn.Sequential(nn.Linear(embed_dim, embed_dim * ffn_ratio), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(embed_dim * ffn_ratio, embed_dim))

    def forward(self, x, attn_mask):
        residual = x
        x = self.pre_attn_norm(x)
        x = self.attn(x, x, x, attn_mask=attn_mask, need_weights=False)[0] + residual
        return self.fc(self.pre_fc_norm(x)) + x


class ClassAttentionBlock(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, ffn_ratio=4):
        super().__init__()
        self.num_heads, self.scale = num_heads, (embed_dim // num_heads) ** -0.5
        self.pre_attn_norm = nn.LayerNorm(embed_dim)
        self.q, self.kv = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, 2 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.pre_fc_norm = nn.LayerNorm(embed_dim)
        self.fc = nn.Sequential(nn.Linear(embed_dim, embed_dim * ffn_ratio), nn.GELU(), nn.Linear(embed_dim * ffn_ratio, embed_dim))

    def forward(self, x, x_cls, particle_keep):
        N, P, C = x.shape
        u = self.pre_attn_norm(torch.cat([x_cls, x], dim=1))
        q = self.q(u[:, :1]).view(N, 1, self.num_heads, -1).transpose(1, 2)
        k, v = self.kv(u).view(N, P + 1, 2, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        cls_keep = torch.cat([particle_keep.new_ones(N, 1), particle_keep], dim=1)[:, None, None, :]
        scores = (q @ k.transpose(-2, -1)) * self.scale
        scores = scores * cls_keep  # expect: MC520 part
        attn = scores.softmax(dim=-1)
        x_cls = x_cls + self.proj((attn @ v).transpose(1, 2).reshape(N, 1, C))
        return x_cls + self.fc(self.pre_fc_norm(x_cls))


class ParticleTransformer(nn.Module):
    def __init__(self, input_dim=7, num_classes=2, embed_dim=64, num_heads=4, num_layers=3, num_cls_layers=2):
        super().__init__()
        self.num_heads = num_heads
        self.embed = Embed(input_dim, (embed_dim, embed_dim))
        self.pair_embed = PairEmbed(num_heads)
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(num_layers))
        self.cls_blocks = nn.ModuleList(ClassAttentionBlock(embed_dim, num_heads) for _ in range(num_cls_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.fc = nn.Linear(embed_dim, num_classes)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x, v):
        particle_keep = (v[:, 3] != 0).float()
        N, P = particle_keep.shape
        x = self.embed(x).masked_fill(particle_keep[..., None] == 0, 0.0)
        pad_bias = torch.zeros_like(particle_keep).masked_fill(particle_keep == 0, float("-inf"))
        attn_mask = (self.pair_embed(v) + pad_bias[:, None, None, :]).view(N * self.num_heads, P, P)
        for block in self.blocks:
            x = block(x, attn_mask)
        x_cls = self.cls_token.expand(N, 1, -1)
        for block in self.cls_blocks:
            x_cls = block(x, x_cls, particle_keep)
        return self.fc(self.norm(x_cls).squeeze(1))


def generate_jets(n, generator):
    labels = torch.randint(0, 2, (n,), generator=generator)
    x = torch.zeros(n, 7, MAX_PARTICLES)
    v = torch.zeros(n, 4, MAX_PARTICLES)
    for b in range(n):
        n_part = int(torch.randint(10, 41, (1,), generator=generator))
        n_prongs = 3 if labels[b] else 1
        axes = torch.randn(n_prongs, 2, generator=generator) * (0.4 if labels[b] else 0.0)
        prong = torch.randint(0, n_prongs, (n_part,), generator=generator)
        deta_dphi = axes[prong] + torch.randn(n_part, 2, generator=generator) * 0.08
        pt = torch.distributions.Exponential(0.05).sample((n_part,)) + 1.0
        eta, phi = deta_dphi[:, 0], deta_dphi[:, 1]
        energy = pt * torch.cosh(eta)
        v[b, :, :n_part] = torch.stack([pt * torch.cos(phi), pt * torch.sin(phi), pt * torch.sinh(eta), energy])
        dr = deta_dphi.norm(dim=1)
        x[b, :, :n_part] = torch.stack([pt.log(), energy.log(), (pt / pt.sum()).log(), (energy / energy.sum()).log(),
                                        eta, phi, dr])
    return x, v, labels


def roc_auc(scores, labels):
    order = scores.argsort()
    ranks = torch.empty_like(order, dtype=torch.float)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    n_pos = labels.sum()
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (len(labels) - n_pos))).item()


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = ParticleTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x_test, v_test, y_test = generate_jets(400, torch.Generator().manual_seed(1))
    for step in range(120):
        model.train()
        x, v, y = generate_jets(64, g)
        loss = F.cross_entropy(model(x, v), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 40 == 39:
            model.eval()
            with torch.no_grad():
                logits = model(x_test, v_test)
            acc = (logits.argmax(-1) == y_test).float().mean()
            print(f"step {step + 1} loss {loss.item():.3f} accuracy {acc:.3f} AUC {roc_auc(logits.softmax(-1)[:, 1], y_test):.3f}")
    with torch.no_grad():
        n_real = int((v_test[0, 3] != 0).sum())
        padded = model(x_test[:1], v_test[:1])
        cut = model(x_test[:1, :, : n_real + 2], v_test[:1, :, : n_real + 2])
    print(f"first jet padded to {MAX_PARTICLES} vs to {n_real + 2} particles: {(padded - cut).abs().max():.2e}")


if __name__ == "__main__":
    main()
