"""Immune repertoire classification with attention-based multiple instance learning.

A DeepRC-style model reads a patient's T-cell receptor repertoire as a bag of
CDR3 beta amino-acid sequences: each sequence is embedded by a 1-D CNN over
one-hot residues with positional features and max-pooled over its residues,
an SNN attention network scores every sequence of the bag, and the
attention-weighted repertoire embedding goes to an SNN output network (e.g.
CMV serostatus). Repertoires have different numbers of sequences and are padded
to the largest bag of the minibatch.

Source: conventions.md §1 (direction cheat-sheet); seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

AAS = "ACDEFGHIKLMNPQRSTVWY"


def get_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel_size", type=int, default=5)
    parser.add_argument("--n_kernels", type=int, default=16)
    parser.add_argument("--n_attention_units", type=int, default=16)
    parser.add_argument("--n_output_units", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--n_updates", type=int, default=4)
    return parser.parse_args(argv)


def encode_repertoires(repertoires, max_len=None):
    max_len = max_len or max(len(s) for rep in repertoires for s in rep)
    max_n = max(len(rep) for rep in repertoires)
    seqs = torch.zeros(len(repertoires), max_n, max_len, dtype=torch.long)
    lengths = torch.zeros(len(repertoires), max_n, dtype=torch.long)
    for b, rep in enumerate(repertoires):
        for i, s in enumerate(rep):
            seqs[b, i, : len(s)] = torch.tensor([AAS.index(c) + 1 for c in s])
            lengths[b, i] = len(s)
    n_sequences = torch.tensor([len(rep) for rep in repertoires])
    return {"sequences": seqs, "seq_lengths": lengths, "n_sequences_per_bag": n_sequences}


def add_position_features(one_hot, lengths):
    L = one_hot.shape[-2]
    pos = torch.arange(L, dtype=one_hot.dtype)
    rel = pos / (lengths[..., None].clamp(min=1) - 1).clamp(min=1)
    start = (1.0 - 2 * rel).clamp(min=0)
    end = (2 * rel - 1.0).clamp(min=0)
    middle = 1.0 - start - end
    valid = (pos < lengths[..., None]).to(one_hot.dtype)
    return torch.cat([one_hot, torch.stack([start, middle, end], dim=-1) * valid[..., None]], dim=-1)


class SequenceEmbeddingCNN(nn.Module):
    def __init__(self, n_input_features, kernel_size, n_kernels):
        super().__init__()
        self.conv = nn.Conv1d(n_input_features, n_kernels, kernel_size, padding=kernel_size // 2)
        nn.init.normal_(self.conv.weight, 0.0, (1 / (n_input_features * kernel_size)) ** 0.5)

    def forward(self, x, residue_keep):
        h = F.selu(self.conv(x.transpose(1, 2)))
        h = h.masked_fill(~residue_keep[:, None, :], float("-inf"))
        return h.max(dim=-1).values


def snn(n_in, n_units, n_layers, n_out):
    layers = []
    for _ in range(n_layers):
        layers += [nn.Linear(n_in, n_units), nn.SELU(), nn.AlphaDropout(0.1)]
        n_in = n_units
    layers.append(nn.Linear(n_in, n_out))
    for m in layers:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, (1 / m.in_features) ** 0.5)
    return nn.Sequential(*layers)


class DeepRC(nn.Module):
    def __init__(self, args, n_classes=1):
        super().__init__()
        n_features = len(AAS) + 3
        self.sequence_embedding = SequenceEmbeddingCNN(n_features, args.kernel_size, args.n_kernels)
        self.attention_nn = snn(args.n_kernels, args.n_attention_units, 2, 1)
        self.output_nn = snn(args.n_kernels, args.n_output_units, 1, n_classes)

    def embed_sequences(self, sequences, seq_lengths):
        B, N, L = sequences.shape
        one_hot = F.one_hot(sequences, len(AAS) + 1)[..., 1:].float()
        x = add_position_features(one_hot, seq_lengths).view(B * N, L, -1)
        residue_keep = (torch.arange(L)[None, :] < seq_lengths.view(-1, 1)) | (seq_lengths.view(-1, 1) == 0)
        emb = self.sequence_embedding(x, residue_keep)
        emb = emb.masked_fill((seq_lengths.view(-1, 1) == 0), 0.0)
        return emb.view(B, N, -1)

    def forward(self, sequences, seq_lengths, n_sequences_per_bag):
        emb = self.embed_sequences(sequences, seq_lengths)
        max_n = emb.shape[1]
        bag_mask = torch.arange(max_n, device=emb.device)[None, :] < n_sequences_per_bag[:, None]
        attn_logits = self.attention_nn(emb).squeeze(-1)
        attn_logits = attn_logits.masked_fill(bag_mask, float("-inf"))  # expect: MC519 bag
        weights = torch.softmax(attn_logits, dim=1)
        repertoire = (weights[..., None] * emb).sum(dim=1)
        return self.output_nn(repertoire).squeeze(-1), weights


def toy_cohort(g, n_patients=6):
    motif = "CASSLGQAYEQYF"
    reps, labels = [], []
    for p in range(n_patients):
        n = int(torch.randint(3, 7, (1,), generator=g))
        rep = []
        for _ in range(n):
            L = int(torch.randint(10, 16, (1,), generator=g))
            rep.append("".join(AAS[i] for i in torch.randint(0, 20, (L,), generator=g)))
        if p % 2:
            rep[0] = motif
        reps.append(rep)
        labels.append(float(p % 2))
    return reps, torch.tensor(labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    args = get_args([])
    reps, labels = toy_cohort(torch.Generator().manual_seed(0))
    batch = encode_repertoires(reps)
    model = DeepRC(args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for update in range(args.n_updates):
        logits, _ = model(**batch)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"update {update} bce {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        logits, weights = model(**batch)
    print("p(positive)", torch.sigmoid(logits).round(decimals=3).tolist())
    print("bag sizes", batch["n_sequences_per_bag"].tolist(), "top sequence", weights.argmax(1).tolist())
