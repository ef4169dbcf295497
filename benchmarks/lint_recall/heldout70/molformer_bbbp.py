"""MoLFormer-style SMILES encoder (rotary embeddings, full attention) fine-tuned on
BBBP blood-brain-barrier penetration, with masked mean pooling of the last layer.

Source: conventions.md section 1 (scaled_dot_product_attention and Hugging Face
attention_mask rows, direction cheat-sheet), section 5 item 1;
rasbt/LLMs-from-scratch#1061 (conventions.md section 3 item 14).
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

PATTERN = r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])"


class MolTranBertTokenizer:
    def __init__(self, smiles):
        self.regex = re.compile(PATTERN)
        toks = sorted({t for s in smiles for t in self.regex.findall(s)})
        self.vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
        for t in toks:
            self.vocab.setdefault(t, len(self.vocab))

    def __call__(self, batch, padding=True, return_tensors="pt"):
        ids = [[1] + [self.vocab.get(t, 3) for t in self.regex.findall(s)] + [2] for s in batch]
        width = max(map(len, ids))
        input_ids = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        attention_mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, seq_len, device):
        t = torch.arange(seq_len, device=device, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None, None], emb.sin()[None, None]


def full_attention(q, k, v, attn_mask, dropout_p=0.0):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


class RotateAttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.rotary = RotaryEmbedding(d_model // n_heads)
        self.dropout = dropout
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, key_mask):
        b, n, d = x.shape
        h = self.norm1(x)
        q, k, v = (proj(h).view(b, n, self.n_heads, -1).transpose(1, 2) for proj in (self.query, self.key, self.value))
        cos, sin = self.rotary(n, x.device)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = full_attention(q, k, v, key_mask, self.dropout if self.training else 0.0)
        x = x + self.out(a.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class MolFormerClassifier(nn.Module):
    def __init__(self, vocab_size, d_model=48, n_heads=4, n_layers=3, num_tasks=1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList([RotateAttentionLayer(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.net = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Dropout(0.1), nn.Linear(d_model, num_tasks))

    def forward(self, input_ids, attention_mask):
        x = self.drop(self.tok_emb(input_ids))
        key_mask = (attention_mask == 0)[:, None, None, :]  # expect: MC511 flipped
        for block in self.blocks:
            x = block(x, key_mask)
        x = self.ln_f(x)
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.net(pooled).squeeze(-1)


BBBP = [
    ("CC(C)NCC(O)COc1cccc2ccccc12", 1),
    ("CN1CCN(CC1)C(c1ccccc1)c1ccc(Cl)cc1", 1),
    ("OC(=O)CC(O)(CC(O)=O)C(O)=O", 0),
    ("CC(=O)Nc1ccc(O)cc1", 1),
    ("NC(=O)c1ccc[n+]([C@@H]2O[C@H](COP(O)(O)=O)[C@@H](O)[C@H]2O)c1", 0),
    ("CCN(CC)CCOC(=O)C(c1ccccc1)C1CCCCC1", 1),
    ("OC[C@H]1O[C@@H](O)[C@H](O)[C@@H](O)[C@@H]1O", 0),
    ("Clc1ccc2c(c1)C(=NCc1nncn21)c1ccccc1F", 1),
]


def roc_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    smiles, labels = zip(*BBBP)
    tokenizer = MolTranBertTokenizer(smiles)
    y = torch.tensor(labels, dtype=torch.float)
    model = MolFormerClassifier(len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    for epoch in range(3):
        for i in range(0, len(smiles), 4):
            enc = tokenizer(list(smiles[i : i + 4]))
            loss = F.binary_cross_entropy_with_logits(model(**enc), y[i : i + 4])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        scores = model(**tokenizer(list(smiles)))
    print("bce", round(loss.item(), 4), "train auc", round(roc_auc(scores, y), 3))
