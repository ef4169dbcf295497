"""TransPolymer-style polymer property regression from polymer SMILES.

Layout after ChangwenXu98/TransPolymer (Xu, Wang, Barati Farimani, npj Comput. Mater. 9, 64,
2023): `PolymerSmilesTokenizer` with the chemically aware regex, `Downstream_Dataset` returning
`input_ids` / `attention_mask` / `prop`, a RoBERTa encoder, `DownstreamRegression` reading the
first token, `train` / `test` loops with a standard scaler, on synthetic repeat units whose
glass-transition-like target depends on backbone rigidity and side groups.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (conventions.md §3 item 25), conventions.md §2.9
"""

import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMI_REGEX = re.compile(r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\*|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|%[0-9]{2}|[0-9])")


class PolymerSmilesTokenizer:
    def __init__(self, max_len=48):
        self.special = ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
        atoms = ["*", "C", "c", "N", "n", "O", "o", "S", "s", "F", "Cl", "Br", "(", ")", "=", "#", "1", "2"]
        self.vocab = {t: i for i, t in enumerate(self.special + atoms)}
        self.pad_token_id, self.cls_token_id, self.sep_token_id = 0, 1, 2
        self.unk_token_id, self.mask_token_id = 3, 4
        self.max_len = max_len

    def __len__(self):
        return len(self.vocab)

    def __call__(self, smiles, padding=True):
        ids = [[self.cls_token_id] + [self.vocab.get(t, self.unk_token_id) for t in SMI_REGEX.findall(s)]
               [: self.max_len - 2] + [self.sep_token_id] for s in smiles]
        width = max(len(i) for i in ids) if padding else None
        input_ids = [i + [self.pad_token_id] * (width - len(i)) for i in ids]
        attention_mask = [[1] * len(i) + [0] * (width - len(i)) for i in ids]
        return {"input_ids": torch.tensor(input_ids), "attention_mask": torch.tensor(attention_mask)}


@dataclass
class RobertaConfig:
    vocab_size: int = 23
    hidden_size: int = 64
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0


class RobertaSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def transpose_for_scores(self, x):
        return x.view(x.shape[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask,
                                             dropout_p=self.dropout_prob if self.training else 0.0)
        return ctx.permute(0, 2, 1, 3).flatten(2)


class RobertaLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = RobertaSelfAttention(config)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.ln1 = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ln2 = nn.LayerNorm(config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, extended_attention_mask):
        a = self.attention(hidden_states, attention_mask=extended_attention_mask)
        hidden_states = self.ln1(hidden_states + self.dropout(self.attn_out(a)))
        h = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.ln2(hidden_states + self.dropout(h))


class RobertaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.emb_ln = nn.LayerNorm(config.hidden_size)
        self.layer = nn.ModuleList([RobertaLayer(config) for _ in range(config.num_hidden_layers)])

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].to(dtype=dtype)) * torch.finfo(dtype).min
        return extended_attention_mask

    def forward(self, input_ids, attention_mask):
        position_ids = (torch.cumsum(attention_mask, dim=1) * attention_mask).clamp(max=self.config.max_position_embeddings - 1)
        x = self.emb_ln(self.word_embeddings(input_ids) + self.position_embeddings(position_ids))
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, x.dtype)
        for layer in self.layer:
            x = layer(x, extended_attention_mask)
        return x


class DownstreamRegression(nn.Module):
    def __init__(self, config, drop_rate=0.1):
        super().__init__()
        self.PretrainedModel = RobertaModel(config)
        hidden = config.hidden_size
        self.Regressor = nn.Sequential(nn.Dropout(drop_rate), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, input_ids, attention_mask):
        last_hidden_state = self.PretrainedModel(input_ids=input_ids, attention_mask=attention_mask)
        return self.Regressor(last_hidden_state[:, 0, :]).squeeze(-1)


def random_polymer(rng):
    backbone = rng.choice(["CC", "CCO", "c1ccccc1", "C(=O)O", "CC(C)", "C=C", "CN", "c1ccc(cc1)O"], size=rng.integers(1, 4))
    side = rng.choice(["", "(C)", "(F)", "(Cl)", "(CC)", "(C#N)", "(c1ccccc1)"], size=len(backbone))
    smiles = "*" + "".join(b + s for b, s in zip(backbone, side)) + "*"
    rigid = sum(b.count("c") + 2 * b.count("=") for b in backbone) / len(backbone)
    bulky = sum(s.count("c") + s.count("Cl") * 2 + s.count("#") for s in side)
    tg = 1.2 * rigid + 0.4 * bulky - 0.5 * sum(b.count("O") for b in backbone) + rng.normal(0, 0.2)
    return smiles, tg


class Downstream_Dataset(torch.utils.data.Dataset):
    def __init__(self, smiles, prop, tokenizer):
        self.smiles, self.prop, self.tokenizer = smiles, prop, tokenizer

    def __len__(self):
        return len(self.smiles)

    def __getitem__(self, i):
        return self.smiles[i], self.prop[i]

    def collate(self, items):
        smiles, prop = zip(*items)
        batch = self.tokenizer(list(smiles))
        batch["prop"] = torch.tensor(prop, dtype=torch.float32)
        return batch


def train(model, optimizer, loader):
    model.train()
    total = 0.0
    for batch in loader:
        pred = model(batch["input_ids"], batch["attention_mask"])
        loss = F.mse_loss(pred, batch["prop"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * len(batch["prop"])
    return total / len(loader.dataset)


def test(model, loader, scaler):
    model.eval()
    preds, ys = [], []
    with torch.no_grad():
        for batch in loader:
            preds.append(model(batch["input_ids"], batch["attention_mask"]))
            ys.append(batch["prop"])
    pred = torch.cat(preds) * scaler[1] + scaler[0]
    y = torch.cat(ys) * scaler[1] + scaler[0]
    rmse = ((pred - y) ** 2).mean().sqrt().item()
    r2 = 1 - ((pred - y) ** 2).sum().item() / ((y - y.mean()) ** 2).sum().item()
    return rmse, r2


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    data = [random_polymer(rng) for _ in range(1200)]
    smiles = [d[0] for d in data]
    prop = np.array([d[1] for d in data], dtype=np.float32)
    scaler = (prop[:1000].mean(), prop[:1000].std())
    prop = (prop - scaler[0]) / scaler[1]
    tokenizer = PolymerSmilesTokenizer()
    config = RobertaConfig(vocab_size=len(tokenizer))
    train_set = Downstream_Dataset(smiles[:1000], prop[:1000], tokenizer)
    test_set = Downstream_Dataset(smiles[1000:], prop[1000:], tokenizer)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True, collate_fn=train_set.collate)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=64, collate_fn=test_set.collate)
    model = DownstreamRegression(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    for epoch in range(8):
        loss = train(model, optimizer, train_loader)
        if epoch % 2 == 1:
            rmse, r2 = test(model, test_loader, scaler)
            print(f"epoch {epoch + 1}: train MSE {loss:.3f}, test RMSE {rmse:.3f}, R2 {r2:.3f}")
    model.eval()
    lengths = [len(SMI_REGEX.findall(s)) for s in smiles[1000:]]
    short = smiles[1000 + int(np.argmin(lengths))]
    longest = smiles[1000 + int(np.argmax(lengths))]
    with torch.no_grad():
        alone = model(**tokenizer([short]))
        padded = model(**tokenizer([short, longest]))[:1]
    print(f"shortest test polymer alone vs padded: {(alone - padded).abs().item():.1e}")
