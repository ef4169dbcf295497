"""Self-supervised log anomaly detection with LogBERT on HDFS-like block sessions.

Layout of HelenGuohx/logbert (Guo et al., IJCNN 2021) on codertimo's BERT-pytorch: WordVocab of
log keys, LogDataset.random_item masking keys with mask_ratio, collate_fn, BERTEmbedding,
MultiHeadedAttention / Attention, SublayerConnection, TransformerBlock, BERT, BERTLog with the
MaskedLogModel head and the [DIST] hypersphere (VHM) loss around hyper_center, and the
top-g candidate rule of the Predictor.

Source: conventions.md §1 (HF 2-D attention_mask row) and §5 item 7
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class WordVocab:
    def __init__(self, keys):
        self.pad_index, self.unk_index, self.eos_index, self.sos_index, self.mask_index = 0, 1, 2, 3, 4
        self.itos = ["<pad>", "<unk>", "<eos>", "<dist>", "<mask>"] + list(keys)
        self.stoi = {k: i for i, k in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)


class LogDataset(torch.utils.data.Dataset):
    def __init__(self, sessions, vocab, mask_ratio=0.3, predict_mode=False):
        self.sessions, self.vocab, self.mask_ratio, self.predict_mode = sessions, vocab, mask_ratio, predict_mode

    def __len__(self):
        return len(self.sessions)

    def random_item(self, k):
        tokens, output_label = [], []
        for key in k:
            idx = self.vocab.stoi.get(key, self.vocab.unk_index)
            if random.random() < self.mask_ratio:
                tokens.append(self.vocab.mask_index)
                output_label.append(idx)
            else:
                tokens.append(idx)
                output_label.append(0)
        return tokens, output_label

    def __getitem__(self, idx):
        k_masked, k_label = self.random_item(self.sessions[idx])
        return [self.vocab.sos_index] + k_masked, [self.vocab.pad_index] + k_label

    def collate_fn(self, batch):
        max_len = max(len(seq) for seq, _ in batch)
        output = {"bert_input": [], "bert_label": [], "attention_mask": []}
        for seq, label in batch:
            padding = [self.vocab.pad_index] * (max_len - len(seq))
            output["bert_input"].append(seq + padding)
            output["bert_label"].append(label + padding)
            output["attention_mask"].append([1] * len(seq) + [0] * len(padding))
        return {key: torch.tensor(value, dtype=torch.long) for key, value in output.items()}


class BERTEmbedding(nn.Module):
    def __init__(self, vocab_size, embed_size, max_len=512, dropout=0.1):
        super().__init__()
        self.token = nn.Embedding(vocab_size, embed_size, padding_idx=0)
        pe = torch.zeros(max_len, embed_size)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, embed_size, 2).float() * -(math.log(10000.0) / embed_size)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, sequence):
        return self.dropout(self.token(sequence) + self.pe[:, : sequence.size(1)])


class Attention(nn.Module):
    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        query, key, value = [
            lin(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linear_layers, (query, key, value))
        ]
        x, attn = self.attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class TransformerBlock(nn.Module):
    def __init__(self, hidden, attn_heads, feed_forward_hidden, dropout):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden, dropout=dropout)
        self.feed_forward = nn.Sequential(nn.Linear(hidden, feed_forward_hidden), nn.GELU(),
                                          nn.Dropout(dropout), nn.Linear(feed_forward_hidden, hidden))
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


class BERT(nn.Module):
    def __init__(self, vocab_size, max_len=512, hidden=64, n_layers=2, attn_heads=4, dropout=0.1):
        super().__init__()
        self.hidden = hidden
        self.embedding = BERTEmbedding(vocab_size=vocab_size, embed_size=hidden, max_len=max_len)
        self.transformer_blocks = nn.ModuleList(
            [TransformerBlock(hidden, attn_heads, hidden * 4, dropout) for _ in range(n_layers)])

    def forward(self, x, attention_mask):
        pad = attention_mask == 0
        mask = pad[:, None, None, :].to(torch.bool)
        x = self.embedding(x)
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, mask)
        return x


class BERTLog(nn.Module):
    def __init__(self, bert: BERT, vocab_size):
        super().__init__()
        self.bert = bert
        self.mask_lm = nn.Linear(self.bert.hidden, vocab_size)
        self.result = {"logkey_output": None, "cls_output": None}

    def forward(self, bert_input, attention_mask):
        x = self.bert(bert_input, attention_mask)
        self.result["logkey_output"] = F.log_softmax(self.mask_lm(x), dim=-1)
        self.result["cls_output"] = x[:, 0]
        return self.result


def hdfs_session(rng, anomalous=False):
    keys = ["E5", "E22"] + ["E11", "E9"] * rng.randint(1, 3) + ["E26"] * rng.randint(2, 6)
    keys += ["E3", "E4"] * rng.randint(1, 4) + ["E2", "E23", "E21"]
    if anomalous:
        i = rng.randrange(2, len(keys))
        keys = keys[:i] + [rng.choice(["E7", "E13", "E20"])] * rng.randint(1, 3) + keys[i + 1:]
    return keys


def detect(model, dataset, num_candidates=3, ratio=0.0):
    flags = []
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, collate_fn=dataset.collate_fn)
    with torch.no_grad():
        for data in loader:
            output = model(data["bert_input"], data["attention_mask"])["logkey_output"]
            for i in range(output.size(0)):
                masked = data["bert_label"][i] > 0
                top = torch.argsort(-output[i][masked], dim=-1)[:, :num_candidates]
                undetected = (top != data["bert_label"][i][masked][:, None]).all(dim=-1).sum().item()
                flags.append(undetected > ratio * max(int(masked.sum()), 1))
    return torch.tensor(flags)


if __name__ == "__main__":
    rng = random.Random(0)
    random.seed(0)
    torch.manual_seed(0)
    vocab = WordVocab([f"E{i}" for i in range(1, 30)])
    train = LogDataset([hdfs_session(rng) for _ in range(2048)], vocab)
    model = BERTLog(BERT(len(vocab)), len(vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    hyper_center = None
    for epoch in range(4):
        model.train()
        loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True, collate_fn=train.collate_fn)
        for data in loader:
            result = model(data["bert_input"], data["attention_mask"])
            mask_loss = F.nll_loss(result["logkey_output"].transpose(1, 2), data["bert_label"], ignore_index=0)
            if hyper_center is None:
                hyper_center = result["cls_output"].detach().mean(dim=0)
            hyper_loss = torch.mean(torch.sum((result["cls_output"] - hyper_center) ** 2, dim=1))
            loss = mask_loss + 0.1 * hyper_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} masked key loss {mask_loss.item():.3f} hypersphere {hyper_loss.item():.3f}")
    model.eval()
    normal = LogDataset([hdfs_session(rng) for _ in range(300)], vocab, mask_ratio=0.5, predict_mode=True)
    abnormal = LogDataset([hdfs_session(rng, anomalous=True) for _ in range(300)], vocab, mask_ratio=0.5,
                          predict_mode=True)
    fp = detect(model, normal).sum().item()
    tp = detect(model, abnormal).sum().item()
    precision = tp / max(tp + fp, 1)
    recall = tp / 300
    f1 = 2 * precision * recall / max(precision + recall, 1e-9)
    print(f"precision {precision:.3f} recall {recall:.3f} F1 {f1:.3f}")
    batch = normal.collate_fn([normal[i] for i in range(16)])
    i = int(batch["attention_mask"].sum(1).argmin())
    n = int(batch["attention_mask"][i].sum())
    with torch.no_grad():
        padded = model(batch["bert_input"], batch["attention_mask"])["logkey_output"][i, :n]
        alone = model(batch["bert_input"][i:i + 1, :n], batch["attention_mask"][i:i + 1, :n])["logkey_output"][0]
    print(f"shortest session alone vs padded {(alone - padded).abs().max().item():.2e}")
