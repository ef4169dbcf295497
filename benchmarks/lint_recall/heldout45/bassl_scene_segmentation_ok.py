"""BaSSL-style movie scene boundary detection over windows of shots.

Layout after kakaobrain/bassl (Mun et al., "Boundary-aware Self-supervised Learning for Video
Scene Segmentation", 2022): a shot encoder (an MLP over key-frame features standing in for the
ResNet-50), `TransformerCRN` with a [CLS] token, shot position embeddings and a BERT-style
encoder, `center` pooling of the two shots around the candidate boundary, `FinetuningWrapper`
with the boundary head and BCE, windows of `neighbor_size` shots on each side padded at the
ends of a film, average precision and F1 on held-out films; synthetic films whose scenes share a
location embedding.

Source: conventions.md §1 (HF transformers 2-D attention_mask row, direction cheat-sheet), seed self_attention_mask_guide.txt §7 Q1, seed masked_fill_inplace.txt (作用)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FEAT_DIM, NEIGHBOR_SIZE = 32, 4


class CRNSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, dropout=0.1):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.query, self.key, self.value = (nn.Linear(hidden_size, hidden_size) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, attn_keep):
        q, k, v = self.split(self.query(hidden_states)), self.split(self.key(hidden_states)), self.split(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~attn_keep, torch.finfo(scores.dtype).min)
        probs = self.dropout(scores.softmax(dim=-1))
        return (probs @ v).transpose(1, 2).flatten(2)


class CRNLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, dropout=0.1):
        super().__init__()
        self.attention = CRNSelfAttention(hidden_size, num_heads, dropout)
        self.attn_out, self.ln1 = nn.Linear(hidden_size, hidden_size), nn.LayerNorm(hidden_size)
        self.ffn = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.GELU(), nn.Linear(2 * hidden_size, hidden_size))
        self.ln2, self.dropout = nn.LayerNorm(hidden_size), nn.Dropout(dropout)

    def forward(self, hidden_states, attn_keep):
        hidden_states = self.ln1(hidden_states + self.dropout(self.attn_out(self.attention(hidden_states, attn_keep))))
        return self.ln2(hidden_states + self.dropout(self.ffn(hidden_states)))


class TransformerCRN(nn.Module):
    def __init__(self, hidden_size=64, num_layers=2, num_heads=4, max_shots=2 * NEIGHBOR_SIZE):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden_size))
        self.position_embeddings = nn.Embedding(max_shots + 1, hidden_size)
        self.ln = nn.LayerNorm(hidden_size)
        self.layers = nn.ModuleList([CRNLayer(hidden_size, num_heads) for _ in range(num_layers)])

    def forward(self, shot, mask=None, pooling_method="center"):
        B, T, _ = shot.shape
        x = torch.cat([self.cls_token.expand(B, -1, -1), shot], 1)
        x = self.ln(x + self.position_embeddings(torch.arange(T + 1)))
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.long)
        mask = torch.cat([torch.ones(B, 1, dtype=mask.dtype), mask], 1)
        attn_keep = mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, attn_keep)
        if pooling_method == "center":
            return x, x[:, 1 + T // 2 - 1: 1 + T // 2 + 1].flatten(1)
        return x, x[:, 0]


class FinetuningWrapper(nn.Module):
    def __init__(self, hidden_size=64):
        super().__init__()
        self.shot_encoder = nn.Sequential(nn.Linear(FEAT_DIM, hidden_size), nn.ReLU(), nn.Linear(hidden_size, hidden_size))
        self.crn = TransformerCRN(hidden_size)
        self.head_sbd = nn.Sequential(nn.Linear(2 * hidden_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))

    def extract_shot_representation(self, video):
        return self.shot_encoder(video)

    def forward(self, inputs):
        shot_repr = self.extract_shot_representation(inputs["video"])
        _, pooled = self.crn(shot_repr, mask=inputs["attention_mask"])
        return self.head_sbd(pooled).squeeze(-1)


def make_film(rng):
    n_scenes = int(rng.integers(4, 9))
    lengths = rng.integers(2, 8, n_scenes)
    feats, scene_ids = [], []
    for s, n in enumerate(lengths):
        location = rng.normal(0, 1, FEAT_DIM)
        shot_types = rng.normal(0, 0.8, (2, FEAT_DIM))
        for i in range(n):
            feats.append(location + shot_types[i % 2] + rng.normal(0, 0.6, FEAT_DIM))
            scene_ids.append(s)
    return np.array(feats, dtype=np.float32), np.array(scene_ids)


def film_windows(feats, scene_ids):
    items = []
    for i in range(len(feats) - 1):
        video = np.zeros((2 * NEIGHBOR_SIZE, FEAT_DIM), dtype=np.float32)
        keep = np.zeros(2 * NEIGHBOR_SIZE, dtype=np.int64)
        for j, s in enumerate(range(i - NEIGHBOR_SIZE + 1, i + NEIGHBOR_SIZE + 1)):
            if 0 <= s < len(feats):
                video[j], keep[j] = feats[s], 1
        items.append((video, keep, float(scene_ids[i] != scene_ids[i + 1])))
    return items


def collate_windows(items):
    return {"video": torch.from_numpy(np.stack([it[0] for it in items])),
            "attention_mask": torch.from_numpy(np.stack([it[1] for it in items])),
            "label": torch.tensor([it[2] for it in items])}


def average_precision(scores, labels):
    order = torch.argsort(scores, descending=True)
    hits = labels[order]
    precision = hits.cumsum(0) / torch.arange(1, len(hits) + 1)
    return (precision * hits).sum().item() / hits.sum().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    train_items = [w for _ in range(150) for w in film_windows(*make_film(rng))]
    test = collate_windows([w for _ in range(40) for w in film_windows(*make_film(rng))])
    model = FinetuningWrapper()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(12):
        model.train()
        order = rng.permutation(len(train_items))
        for i in range(0, len(order), 64):
            batch = collate_windows([train_items[j] for j in order[i:i + 64]])
            loss = F.binary_cross_entropy_with_logits(model(batch), batch["label"], pos_weight=torch.tensor(3.0))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 4 != 3:
            continue
        model.eval()
        with torch.no_grad():
            scores = model(test)
        pred, gold = scores > 0, test["label"].bool()
        f1 = 2 * (pred & gold).sum().item() / max(pred.sum().item() + gold.sum().item(), 1)
        padded = test["attention_mask"].min(1).values == 0
        f1_pad = 2 * (pred & gold)[padded].sum().item() / max(pred[padded].sum().item() + gold[padded].sum().item(), 1)
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}, AP {average_precision(scores, test['label']):.3f}, "
              f"F1 {f1:.3f}, F1 at the ends of films {f1_pad:.3f}")
