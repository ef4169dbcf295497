"""Signal peptide and cleavage-site prediction in the SignalP 6.0 layout.

The N-terminal 70 residues of a protein, prefixed with a kingdom token, are
encoded by a small transformer; a linear-chain CRF over per-residue emissions
tags every residue (Sec signal peptide, Tat signal peptide, lipoprotein signal
peptide, cytoplasm, transmembrane, extracellular) and a pooled head predicts
the global type. The cleavage site is read off the Viterbi path.

Source: conventions.md §1 (HF attention_mask and nn.MultiheadAttention rows), §2.4, §5 item 7
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWYX"
KINGDOMS = ["EUKARYA", "ARCHAEA", "POSITIVE", "NEGATIVE"]
RESIDUE_LABELS = "STLIMO"
GLOBAL_TYPES = ["NO_SP", "SP", "LIPO", "TAT"]
MAX_LEN = 70


class ProteinTokenizer:
    def __init__(self):
        self.vocab = {"<pad>": 0, "<unk>": 1}
        for tok in KINGDOMS + list(AMINO_ACIDS):
            self.vocab[tok] = len(self.vocab)

    def __call__(self, sequences, kingdoms, return_tensors="pt"):
        rows = [[self.vocab[k]] + [self.vocab.get(a, 1) for a in s[:MAX_LEN]] for s, k in zip(sequences, kingdoms)]
        width = max(map(len, rows))
        return {
            "input_ids": torch.tensor([r + [0] * (width - len(r)) for r in rows]),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        }


def collate(records, tokenizer):
    enc = tokenizer([r["sequence"] for r in records], [r["kingdom"] for r in records])
    width = enc["input_ids"].shape[1]
    labels = torch.full((len(records), width), -1)
    for i, r in enumerate(records):
        labels[i, 1:len(r["labels"]) + 1] = torch.tensor([RESIDUE_LABELS.index(c) for c in r["labels"][:MAX_LEN]])
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "padding_mask": (~enc["attention_mask"]).bool(),  # expect: MC518 tokenizer
        "labels": labels,
        "global_label": torch.tensor([GLOBAL_TYPES.index(r["type"]) for r in records]),
    }


class CRF(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        self.transitions = nn.Parameter(torch.randn(num_tags, num_tags) * 0.1)

    def log_likelihood(self, emissions, tags, mask):
        score = self.start[tags[:, 0]] + emissions[:, 0].gather(1, tags[:, :1]).squeeze(1)
        log_z = self.start + emissions[:, 0]
        for t in range(1, emissions.shape[1]):
            m = mask[:, t]
            step = self.transitions[tags[:, t - 1], tags[:, t]] + emissions[:, t].gather(1, tags[:, t:t + 1]).squeeze(1)
            score = score + step * m
            nxt = torch.logsumexp(log_z[:, :, None] + self.transitions + emissions[:, t, None, :], dim=1)
            log_z = torch.where(m[:, None], nxt, log_z)
        last = tags.gather(1, (mask.sum(1) - 1)[:, None]).squeeze(1)
        return score + self.end[last] - torch.logsumexp(log_z + self.end, dim=1)

    def viterbi(self, emissions, mask):
        best, history = self.start + emissions[:, 0], []
        for t in range(1, emissions.shape[1]):
            scores, idx = (best[:, :, None] + self.transitions + emissions[:, t, None, :]).max(dim=1)
            best = torch.where(mask[:, t, None], scores, best)
            history.append(torch.where(mask[:, t, None], idx, torch.arange(best.shape[1]).expand_as(idx)))
        paths = [(best + self.end).argmax(-1)]
        for idx in reversed(history):
            paths.append(idx.gather(1, paths[-1][:, None]).squeeze(1))
        return torch.stack(paths[::-1], dim=1)


class SignalPeptideTagger(nn.Module):
    def __init__(self, vocab_size, d_model=48, nhead=4, num_layers=2, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(MAX_LEN + 1, d_model)
        self.attn = nn.ModuleList([nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
                                   for _ in range(num_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(num_layers)])
        self.emit = nn.Linear(d_model, len(RESIDUE_LABELS))
        self.global_head = nn.Linear(d_model, len(GLOBAL_TYPES))
        self.crf = CRF(len(RESIDUE_LABELS))

    def encode(self, input_ids, padding_mask):
        h = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1]))[None]
        for attn, norm in zip(self.attn, self.norms):
            out, _ = attn(h, h, h, key_padding_mask=padding_mask, need_weights=False)
            h = norm(h + out)
        return h

    def forward(self, batch):
        h = self.encode(batch["input_ids"], batch["padding_mask"])
        keep = batch["attention_mask"][:, 1:].bool()
        emissions = self.emit(h[:, 1:])
        pooled = (h[:, 1:] * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return emissions, self.global_head(pooled), keep

    def loss(self, batch):
        emissions, global_logits, keep = self(batch)
        tags = batch["labels"][:, 1:].clamp(min=0)
        nll = -self.crf.log_likelihood(emissions, tags, keep).mean()
        return nll + F.cross_entropy(global_logits, batch["global_label"])

    @torch.no_grad()
    def predict(self, batch):
        emissions, global_logits, keep = self(batch)
        paths = self.crf.viterbi(emissions, keep)
        sp = torch.isin(paths, torch.tensor([0, 1, 2])) & keep
        cleavage = torch.where(sp.any(1), sp.long().cumsum(1).argmax(1) + 1, torch.zeros_like(keep[:, 0], dtype=torch.long))
        return global_logits.argmax(-1), cleavage


def toy_records(n, g):
    records = []
    for i in range(n):
        length = int(torch.randint(20, 40, (1,), generator=g))
        seq = "".join(AMINO_ACIDS[j] for j in torch.randint(0, 20, (length,), generator=g))
        kind = GLOBAL_TYPES[i % 2]
        labels = ("S" * 12 + "O" * (length - 12)) if kind == "SP" else "I" * length
        records.append({"sequence": seq, "kingdom": KINGDOMS[i % 4], "labels": labels, "type": kind})
    return records


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = ProteinTokenizer()
    model = SignalPeptideTagger(len(tok.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = collate(toy_records(8, torch.Generator().manual_seed(0)), tok)
    for step in range(3):
        loss = model.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    types, cleavage = model.predict(batch)
    print("types", [GLOBAL_TYPES[t] for t in types.tolist()], "cleavage", cleavage.tolist())
