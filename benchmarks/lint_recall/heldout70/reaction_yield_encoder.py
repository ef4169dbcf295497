"""Yield-BERT-style regressor for Buchwald-Hartwig reaction yields from reaction SMILES.

A regex SMILES tokenizer with a Hugging Face call signature, a small
nn.MultiheadAttention encoder over reactants>>products and a [CLS] head.

Source: conventions.md section 1 (nn.MultiheadAttention and Hugging Face
attention_mask rows, direction cheat-sheet), section 5 item 1; seed
self_attention_mask_guide.txt sections 2 and 7 (Q1).
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

SMI_REGEX = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|\*|\$|%[0-9]{2}|[0-9])"
)
SPECIAL = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]


class SmilesTokenizer:
    def __init__(self, corpus):
        vocab = sorted({t for smi in corpus for t in SMI_REGEX.findall(smi)})
        self.itos = SPECIAL + vocab
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.pad_token_id = 0

    def encode(self, smi):
        ids = [self.stoi.get(t, 3) for t in SMI_REGEX.findall(smi)]
        return [1] + ids + [2]

    def __call__(self, reactions, max_length=96):
        encoded = [self.encode(r)[:max_length] for r in reactions]
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(encoded), width, dtype=torch.bool)
        for i, e in enumerate(encoded):
            input_ids[i, : len(e)] = torch.tensor(e)
            attention_mask[i, : len(e)] = True
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class EncoderBlock(nn.Module):
    def __init__(self, d_model, nhead, dim_ff, dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, dim_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim_ff, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, h, attention_mask):
        a, _ = self.attn(h, h, h, key_padding_mask=attention_mask, need_weights=False)  # expect: MC502 smiles
        h = self.norm1(h + self.drop(a))
        return self.norm2(h + self.drop(self.ff(h)))


class YieldBert(nn.Module):
    def __init__(self, vocab_size, d_model=48, nhead=4, layers=3, max_len=128, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([EncoderBlock(d_model, nhead, 2 * d_model, dropout) for _ in range(layers)])
        self.regressor = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Linear(d_model, 1))

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.tok(input_ids) + self.pos(pos)[None]
        for block in self.blocks:
            h = block(h, attention_mask)
        return self.regressor(h[:, 0]).squeeze(-1)


def scaled_yield(y, mean, std):
    return (y - mean) / std


REACTIONS = [
    "Clc1ccccn1.Cc1ccc(N)cc1.O=S(=O)(O[Pd]1c2ccccc2-c2ccccc2N~1)C(F)(F)F>>Cc1ccc(Nc2ccccn2)cc1",
    "Brc1ccccn1.Cc1ccc(N)cc1.CN(C)C(=NC(C)(C)C)N(C)C>>Cc1ccc(Nc2ccccn2)cc1",
    "Ic1ccccn1.Cc1ccc(N)cc1.c1ccc(-c2ccno2)cc1>>Cc1ccc(Nc2ccccn2)cc1",
    "FC(F)(F)c1ccc(Cl)cc1.Cc1ccc(N)cc1.CCN=P(N=P(N(C)C)(N(C)C)N(C)C)(N(C)C)N(C)C>>Cc1ccc(Nc2ccc(C(F)(F)F)cc2)cc1",
    "COc1ccc(Br)cc1.Cc1ccc(N)cc1>>COc1ccc(Nc2ccc(C)cc2)cc1",
    "CCc1ccc(I)cc1.Cc1ccc(N)cc1.Cc1cc(C)on1>>CCc1ccc(Nc2ccc(C)cc2)cc1",
]
YIELDS = torch.tensor([70.4, 11.6, 45.2, 4.8, 62.1, 33.9])


def evaluate(model, tokenizer, reactions, yields, mean, std):
    model.eval()
    with torch.no_grad():
        batch = tokenizer(reactions)
        pred = model(**batch) * std + mean
    model.train()
    rmse = torch.sqrt(F.mse_loss(pred, yields))
    return pred, rmse


def train(model, tokenizer, epochs=4, batch_size=3):
    mean, std = YIELDS.mean(), YIELDS.std()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        perm = torch.randperm(len(REACTIONS))
        for start in range(0, len(REACTIONS), batch_size):
            idx = perm[start : start + batch_size].tolist()
            batch = tokenizer([REACTIONS[i] for i in idx])
            target = scaled_yield(YIELDS[idx], mean, std)
            loss = F.mse_loss(model(batch["input_ids"], attention_mask=batch["attention_mask"]), target)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return mean, std, loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = SmilesTokenizer(REACTIONS)
    model = YieldBert(len(tokenizer.itos))
    mean, std, last = train(model, tokenizer)
    pred, rmse = evaluate(model, tokenizer, REACTIONS, YIELDS, mean, std)
    print("last loss", round(last, 4))
    print("predicted yields", [round(p, 1) for p in pred.tolist()], "rmse", round(rmse.item(), 2))
