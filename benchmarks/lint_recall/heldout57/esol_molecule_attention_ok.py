"""Molecule Attention Transformer-style regressor for ESOL aqueous solubility (log mol/L).

Atoms are one-hot featurised (element, degree, attached Hs, aromaticity); the collate pads the
molecules of a batch to the largest one and returns adjacency and 3-D distance matrices.

Source: pytorch/pytorch#103749 (conventions.md section 3 item 5), Biohub/esm#299 (item 22),
conventions.md section 2.3.
"""
import argparse
import math
import pickle

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

USE_CUDA = torch.cuda.is_available()
N_FEATURES = 25


def collate_molecules(mols):
    n_max = max(len(m['features']) for m in mols)
    feats = torch.zeros(len(mols), n_max, N_FEATURES)
    adj = torch.zeros(len(mols), n_max, n_max)
    dist = torch.zeros(len(mols), n_max, n_max)
    atom_mask = torch.ByteTensor(len(mols), n_max).zero_()
    for i, m in enumerate(mols):
        n = len(m['features'])
        feats[i, :n] = torch.from_numpy(m['features'])
        adj[i, :n, :n] = torch.from_numpy(m['adjacency']) + torch.eye(n)
        dist[i, :n, :n] = torch.from_numpy(m['distances'])
        atom_mask[i, :n] = 1
    y = torch.FloatTensor([m['logS'] for m in mols])
    return {'features': feats, 'adj': adj, 'dist': dist, 'atom_mask': atom_mask, 'y': y}


class MoleculeAttention(nn.Module):
    def __init__(self, d_model, h, lambdas=(0.33, 0.33, 0.34), dropout=0.0):
        super(MoleculeAttention, self).__init__()
        self.h, self.d_k = h, d_model // h
        self.lambdas = lambdas
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, adj, dist, keep):
        B, N, _ = x.size()
        q, k, v = [t.view(B, N, self.h, self.d_k).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1)]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        pair = keep.unsqueeze(2) & keep.unsqueeze(1)
        scores = scores.masked_fill(~keep[:, None, None, :], float('-inf'))
        p_attn = F.softmax(scores, dim=-1)
        p_dist = F.softmax(-dist.masked_fill(~pair, 1e6), dim=-1)
        p_adj = adj / adj.sum(dim=-1, keepdim=True).clamp(min=1.0)
        la, ld, lg = self.lambdas
        p = la * p_attn + ld * p_dist.unsqueeze(1) + lg * p_adj.unsqueeze(1)
        x = torch.matmul(self.dropout(p), v).transpose(1, 2).contiguous().view(B, N, -1)
        return self.out(x)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, dropout):
        super(EncoderLayer, self).__init__()
        self.attn = MoleculeAttention(d_model, h, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.LeakyReLU(0.1), nn.Dropout(dropout),
                                nn.Linear(2 * d_model, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, adj, dist, keep):
        x = x + self.attn(self.norm1(x), adj, dist, keep)
        return x + self.ff(self.norm2(x))


class MoleculeTransformer(nn.Module):
    def __init__(self, d_model=256, h=16, n_layers=8, dropout=0.1):
        super(MoleculeTransformer, self).__init__()
        self.embed = nn.Linear(N_FEATURES, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, h, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.LeakyReLU(0.1), nn.Linear(d_model, 1))

    def forward(self, batch):
        keep = batch['atom_mask'].bool()
        x = self.embed(batch['features'])
        for layer in self.layers:
            x = layer(x, batch['adj'], batch['dist'], keep)
        x = self.norm(x) * keep.unsqueeze(-1).float()
        n_atoms = batch['atom_mask'].data.sum(dim=1, keepdim=True).float()
        return self.head(x.sum(dim=1) / n_atoms).squeeze(-1)


def iterate(mols, batch_size, shuffle):
    order = np.random.permutation(len(mols)) if shuffle else np.arange(len(mols))
    for start in range(0, len(mols), batch_size):
        batch = collate_molecules([mols[i] for i in order[start:start + batch_size]])
        if USE_CUDA:
            batch = dict((k, v.cuda()) for k, v in batch.items())
        yield batch


def evaluate(model, mols, batch_size=64):
    model.eval()
    preds, targets = [], []
    with torch.no_grad():
        for batch in iterate(mols, batch_size, False):
            preds.append(model(batch))
            targets.append(batch['y'])
    preds, targets = torch.cat(preds), torch.cat(targets)
    return torch.sqrt(F.mse_loss(preds, targets)).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', default='data/esol_featurised.pkl')
    parser.add_argument('--batch_size', type=int, default=32)
    parser.add_argument('--epochs', type=int, default=100)
    parser.add_argument('--lr', type=float, default=1e-4)
    args = parser.parse_args()
    with open(args.data, 'rb') as f:
        splits = pickle.load(f)
    model = MoleculeTransformer()
    if USE_CUDA:
        model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        for batch in iterate(splits['train'], args.batch_size, True):
            loss = F.mse_loss(model(batch), Variable(batch['y']))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print('epoch {} valid RMSE {:.3f}'.format(epoch, evaluate(model, splits['valid'])))
    print('test RMSE {:.3f}'.format(evaluate(model, splits['test'])))


if __name__ == '__main__':
    main()
