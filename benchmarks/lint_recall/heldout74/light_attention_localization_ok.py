"""Protein subcellular localisation from language-model embeddings (Light Attention).

Per-residue embeddings of a protein language model (ProtT5-style, here random
stand-ins of a smaller width) are read by two 1-D convolutions: one gives
features, the other attention logits over residues. The attention-weighted sum
and a max over residues are concatenated and classified into the ten DeepLoc
compartments; a second head predicts membrane-bound versus soluble. Proteins
of one batch have different lengths and are zero-padded.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); conventions.md §1 (direction cheat-sheet, additive masks); seed self_attention_mask_guide.txt §3 and §7 Q3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

LOCATIONS = [
    "Cell.membrane", "Cytoplasm", "Endoplasmic.reticulum", "Golgi.apparatus", "Lysosome/Vacuole",
    "Mitochondrion", "Nucleus", "Peroxisome", "Plastid", "Extracellular",
]


def pad_embeddings(embeddings):
    lengths = torch.tensor([e.shape[0] for e in embeddings])
    dim = embeddings[0].shape[1]
    out = torch.zeros(len(embeddings), dim, int(lengths.max()))
    for i, e in enumerate(embeddings):
        out[i, :, : e.shape[0]] = e.T
    mask = torch.arange(out.shape[-1])[None, :] < lengths[:, None]
    return out, mask, lengths


class LightAttention(nn.Module):
    def __init__(self, embeddings_dim=64, output_dim=10, dropout=0.25, kernel_size=9, conv_dropout=0.25):
        super().__init__()
        self.feature_convolution = nn.Conv1d(embeddings_dim, embeddings_dim, kernel_size, stride=1,
                                             padding=kernel_size // 2)
        self.attention_convolution = nn.Conv1d(embeddings_dim, embeddings_dim, kernel_size, stride=1,
                                               padding=kernel_size // 2)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(conv_dropout)
        self.linear = nn.Sequential(nn.Linear(2 * embeddings_dim, 32), nn.Dropout(dropout), nn.ReLU(),
                                    nn.BatchNorm1d(32))
        self.output = nn.Linear(32, output_dim)
        self.membrane = nn.Linear(32, 1)

    def forward(self, x, mask, **kwargs):
        o = self.feature_convolution(x)
        o = self.dropout(o)
        attention = self.attention_convolution(x)
        attention = attention.masked_fill(~mask[:, None, :], float("-inf"))
        o1 = torch.sum(o * self.softmax(attention), dim=-1)
        o2, _ = torch.max(o.masked_fill(~mask[:, None, :], float("-inf")), dim=-1)
        o = torch.cat([o1, o2], dim=-1)
        o = self.linear(o)
        return self.output(o), self.membrane(o).squeeze(-1)


class LocalizationLoss(nn.Module):
    def __init__(self, membrane_weight=0.5, label_smoothing=0.05):
        super().__init__()
        self.membrane_weight = membrane_weight
        self.label_smoothing = label_smoothing

    def forward(self, logits, membrane_logits, targets, membrane_targets, membrane_known):
        loss = F.cross_entropy(logits, targets, label_smoothing=self.label_smoothing)
        if membrane_known.any():
            mem = F.binary_cross_entropy_with_logits(membrane_logits[membrane_known], membrane_targets[membrane_known])
            loss = loss + self.membrane_weight * mem
        return loss


def synthetic_proteome(n, dim, g):
    embeddings, targets, membrane = [], [], []
    prototypes = torch.randn(len(LOCATIONS), dim, generator=g)
    for i in range(n):
        length = int(torch.randint(12, 40, (1,), generator=g))
        target = i % len(LOCATIONS)
        emb = torch.randn(length, dim, generator=g) * 0.5
        emb[: min(8, length)] += prototypes[target]
        embeddings.append(emb)
        targets.append(target)
        membrane.append(float(target in (0, 2, 3)))
    known = torch.tensor([i % 3 != 0 for i in range(n)])
    return embeddings, torch.tensor(targets), torch.tensor(membrane), known


def accuracy_and_mcc(logits, targets):
    pred = logits.argmax(-1)
    acc = (pred == targets).float().mean().item()
    cm = torch.zeros(len(LOCATIONS), len(LOCATIONS))
    for t, p in zip(targets.tolist(), pred.tolist()):
        cm[t, p] += 1
    s, c = cm.sum(), cm.trace()
    t_k, p_k = cm.sum(1), cm.sum(0)
    denom = ((s ** 2 - (p_k ** 2).sum()) * (s ** 2 - (t_k ** 2).sum())).sqrt()
    return acc, ((c * s - (t_k * p_k).sum()) / denom.clamp(min=1e-8)).item()


def batches(items, batch_size):
    for start in range(0, len(items[0]), batch_size):
        yield [x[start:start + batch_size] for x in items]


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    embeddings, targets, membrane, known = synthetic_proteome(20, 64, g)
    model = LightAttention(embeddings_dim=64, output_dim=len(LOCATIONS))
    criterion = LocalizationLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    for epoch in range(3):
        model.train()
        losses = []
        for emb, tgt, mem, kn in batches([embeddings, targets, membrane, known], 5):
            x, mask, _ = pad_embeddings(emb)
            logits, mem_logits = model(x, mask)
            loss = criterion(logits, mem_logits, tgt, mem, kn)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {sum(losses) / len(losses):.4f}")
    model.eval()
    with torch.no_grad():
        x, mask, _ = pad_embeddings(embeddings)
        logits, _ = model(x, mask)
    acc, mcc = accuracy_and_mcc(logits, targets)
    print(f"accuracy {acc:.3f} mcc {mcc:.3f}")
