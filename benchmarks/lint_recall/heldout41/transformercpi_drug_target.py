"""Compound-protein interaction prediction with TransformerCPI.

Layout of lifanchen-simm/transformerCPI (Chen et al., Bioinformatics 2020): a gated
convolutional protein Encoder over 3-mer embeddings, a GCN over the compound's atom features,
a Decoder whose layers attend over the compound atoms (sa) and from the atoms to the protein
(ea), norm-weighted atom pooling, Predictor.make_masks from atom_num / protein_num, and the
Trainer / Tester loop with AUC, on synthetic kinase-like families.

Source: pytorch/pytorch#103749, Biohub/esm#299, conventions.md §2.3
"""

import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, hid_dim, n_heads, dropout):
        super().__init__()
        self.hid_dim = hid_dim
        self.n_heads = n_heads
        self.w_q = nn.Linear(hid_dim, hid_dim)
        self.w_k = nn.Linear(hid_dim, hid_dim)
        self.w_v = nn.Linear(hid_dim, hid_dim)
        self.fc = nn.Linear(hid_dim, hid_dim)
        self.do = nn.Dropout(dropout)
        self.scale = float(hid_dim // n_heads) ** 0.5

    def forward(self, query, key, value, mask=None):
        bsz = query.shape[0]
        head_dim = self.hid_dim // self.n_heads
        Q = self.w_q(query).view(bsz, -1, self.n_heads, head_dim).permute(0, 2, 1, 3)
        K = self.w_k(key).view(bsz, -1, self.n_heads, head_dim).permute(0, 2, 1, 3)
        V = self.w_v(value).view(bsz, -1, self.n_heads, head_dim).permute(0, 2, 1, 3)
        energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / self.scale
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))  # expect: MC507 transformercpi
        attention = self.do(F.softmax(energy, dim=-1))
        x = torch.matmul(attention, V).permute(0, 2, 1, 3).contiguous()
        return self.fc(x.view(bsz, -1, self.n_heads * head_dim))


class Encoder(nn.Module):
    def __init__(self, protein_dim, hid_dim, n_layers, kernel_size, dropout):
        super().__init__()
        assert kernel_size % 2 == 1, "Kernel size must be odd (for now)"
        self.scale = 0.5 ** 0.5
        self.convs = nn.ModuleList(
            [nn.Conv1d(hid_dim, 2 * hid_dim, kernel_size, padding=(kernel_size - 1) // 2) for _ in range(n_layers)]
        )
        self.do = nn.Dropout(dropout)
        self.fc = nn.Linear(protein_dim, hid_dim)
        self.ln = nn.LayerNorm(hid_dim)

    def forward(self, protein):
        conv_input = self.fc(protein).permute(0, 2, 1)
        for conv in self.convs:
            conved = F.glu(conv(self.do(conv_input)), dim=1)
            conv_input = (conved + conv_input) * self.scale
        return self.ln(conv_input.permute(0, 2, 1))


class PositionwiseFeedforward(nn.Module):
    def __init__(self, hid_dim, pf_dim, dropout):
        super().__init__()
        self.fc_1 = nn.Conv1d(hid_dim, pf_dim, 1)
        self.fc_2 = nn.Conv1d(pf_dim, hid_dim, 1)
        self.do = nn.Dropout(dropout)

    def forward(self, x):
        x = self.do(F.relu(self.fc_1(x.permute(0, 2, 1))))
        return self.fc_2(x).permute(0, 2, 1)


class DecoderLayer(nn.Module):
    def __init__(self, hid_dim, n_heads, pf_dim, dropout):
        super().__init__()
        self.ln = nn.LayerNorm(hid_dim)
        self.sa = SelfAttention(hid_dim, n_heads, dropout)
        self.ea = SelfAttention(hid_dim, n_heads, dropout)
        self.pf = PositionwiseFeedforward(hid_dim, pf_dim, dropout)
        self.do = nn.Dropout(dropout)

    def forward(self, trg, src, trg_mask=None, src_mask=None):
        trg = self.ln(trg + self.do(self.sa(trg, trg, trg, trg_mask)))
        trg = self.ln(trg + self.do(self.ea(trg, src, src, src_mask)))
        return self.ln(trg + self.do(self.pf(trg)))


class Decoder(nn.Module):
    def __init__(self, atom_dim, hid_dim, n_layers, n_heads, pf_dim, dropout):
        super().__init__()
        self.ft = nn.Linear(atom_dim, hid_dim)
        self.layers = nn.ModuleList([DecoderLayer(hid_dim, n_heads, pf_dim, dropout) for _ in range(n_layers)])
        self.fc_1 = nn.Linear(hid_dim, 256)
        self.fc_2 = nn.Linear(256, 2)

    def forward(self, trg, src, atom_keep, trg_mask=None, src_mask=None):
        trg = self.ft(trg)
        for layer in self.layers:
            trg = layer(trg, src, trg_mask, src_mask)
        norm = torch.norm(trg, dim=2).masked_fill(~atom_keep, float("-inf"))
        norm = F.softmax(norm, dim=1)
        pooled = torch.bmm(norm.unsqueeze(1), trg).squeeze(1)
        return self.fc_2(F.relu(self.fc_1(pooled)))


class Predictor(nn.Module):
    def __init__(self, encoder, decoder, atom_dim=34):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.weight = nn.Parameter(torch.FloatTensor(atom_dim, atom_dim))
        nn.init.uniform_(self.weight, -1.0 / atom_dim ** 0.5, 1.0 / atom_dim ** 0.5)

    def gcn(self, input, adj):
        support = torch.matmul(input, self.weight)
        return torch.bmm(adj, support)

    def make_masks(self, atom_num, protein_num, compound_max_len, protein_max_len):
        N = len(atom_num)
        compound_mask = torch.zeros((N, compound_max_len))
        protein_mask = torch.zeros((N, protein_max_len))
        for i in range(N):
            compound_mask[i, :atom_num[i]] = 1
            protein_mask[i, :protein_num[i]] = 1
        atom_keep = compound_mask.bool()
        compound_mask = compound_mask.unsqueeze(1).unsqueeze(3) * compound_mask.unsqueeze(1).unsqueeze(2)
        protein_mask = protein_mask.unsqueeze(1).unsqueeze(2)
        return atom_keep, compound_mask, protein_mask

    def forward(self, compound, adj, protein, atom_num, protein_num):
        atom_keep, compound_mask, protein_mask = self.make_masks(
            atom_num, protein_num, compound.shape[1], protein.shape[1])
        compound = self.gcn(compound, adj)
        enc_src = self.encoder(protein)
        return self.decoder(compound, enc_src, atom_keep, compound_mask, protein_mask)


def roc_auc(labels, scores):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def pack(samples, atom_dim=34, protein_dim=100):
    atom_num = [s[0].shape[0] for s in samples]
    protein_num = [s[2].shape[0] for s in samples]
    compounds = torch.zeros(len(samples), max(atom_num), atom_dim)
    adjs = torch.zeros(len(samples), max(atom_num), max(atom_num))
    proteins = torch.zeros(len(samples), max(protein_num), protein_dim)
    for i, (atoms, adj, protein, _) in enumerate(samples):
        compounds[i, :atom_num[i]] = atoms
        adjs[i, :atom_num[i], :atom_num[i]] = adj
        proteins[i, :protein_num[i]] = protein
    labels = torch.tensor([s[3] for s in samples])
    return compounds, adjs, proteins, labels, atom_num, protein_num


def make_pair(rng, family_vectors, atom_dim=34):
    family = rng.randrange(len(family_vectors))
    n_atoms, n_res = rng.randint(8, 24), rng.randint(30, 60)
    types = [rng.randrange(8) for _ in range(n_atoms)]
    label = int(sum(t == family for t in types) >= 2)
    atoms = F.one_hot(torch.tensor(types), atom_dim).float()
    adj = torch.eye(n_atoms)
    for a in range(1, n_atoms):
        b = rng.randrange(a)
        adj[a, b] = adj[b, a] = 1.0
    adj = adj / adj.sum(1, keepdim=True)
    protein = 0.5 * torch.randn(n_res, 100)
    pocket = rng.randrange(n_res - 10)
    protein[pocket:pocket + 10] += 2.0 * family_vectors[family]
    return atoms, adj, protein, label


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    family_vectors = torch.randn(4, 100)
    train = [make_pair(rng, family_vectors) for _ in range(1024)]
    test = [make_pair(rng, family_vectors) for _ in range(256)]
    encoder = Encoder(protein_dim=100, hid_dim=64, n_layers=3, kernel_size=7, dropout=0.1)
    decoder = Decoder(atom_dim=34, hid_dim=64, n_layers=2, n_heads=8, pf_dim=128, dropout=0.1)
    model = Predictor(encoder, decoder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for epoch in range(8):
        model.train()
        rng.shuffle(train)
        for b in range(0, len(train), 32):
            compound, adj, protein, labels, atom_num, protein_num = pack(train[b:b + 32])
            loss = F.cross_entropy(model(compound, adj, protein, atom_num, protein_num), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            compound, adj, protein, labels, atom_num, protein_num = pack(test)
            ys = F.softmax(model(compound, adj, protein, atom_num, protein_num), 1).numpy()
        auc = roc_auc(labels.numpy(), ys[:, 1]) if not np.isnan(ys).any() else float("nan")
        print(f"epoch {epoch} loss {loss.item():.3f} test AUC {auc:.3f}")
