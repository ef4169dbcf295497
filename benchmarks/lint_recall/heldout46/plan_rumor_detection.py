"""Rumour veracity classification of Twitter threads, after PLAN / StA-PLAN.

Imitates serenaklm/rumor_detection (Khoo et al., "Interpretable Rumor Detection in Microblogs
by Attending to User Interactions", AAAI 2020): a `Config` class, a word module max-pooling the
word embeddings of each tweet, a time-delay embedding of each reply's delay after the source
tweet (binned), the post-level transformer of StA-PLAN whose attention adds learned key and
value embeddings of the structural relation between two posts (parent, child, before, after,
self), and a final attention layer over the posts feeding the four Twitter15/16 classes
(non-rumour, false, true, unverified). Threads are synthetic: the replies' stance words
depend on the veracity, the source tweet is the same kind of text for every class.

Source: conventions.md section 2.9 and section 1 (HF 4-D masks row); huggingface/transformers#32195
(conventions.md section 3 item 25).
"""

import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LABELS = ["non-rumor", "false", "true", "unverified"]
STANCE = {
    0: ["lol", "nice", "congrats", "cool"],
    1: ["fake", "hoax", "debunked", "false"],
    2: ["confirmed", "official", "true", "verified"],
    3: ["source", "really", "unclear", "wait"],
}
FILLER = ["breaking", "news", "police", "city", "today", "people", "report", "video", "just", "now"]


class Config:
    max_length = 8
    max_tweets = 12
    d_model = 48
    n_heads = 4
    num_layers = 2
    d_feed_forward = 96
    dropout_rate = 0.1
    num_structure_index = 6
    n_time_bins = 10
    num_classes = 4
    lr = 1e-3
    batch_size = 16
    num_epochs = 4


class WordModule(nn.Module):
    def __init__(self, config, vocab_size):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, config.d_model, padding_idx=0)

    def forward(self, X):
        word_emb = self.emb(X)
        word_emb = word_emb.masked_fill((X == 0).unsqueeze(-1), torch.finfo(word_emb.dtype).min)
        return word_emb.max(dim=2).values.clamp(min=-1.0)


class ScaledDotProductAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, query, key, val, key_structure, val_structure, attention_mask):
        d_k = query.size(-1)
        attention = torch.matmul(query, key.transpose(-2, -1))
        attention = attention + torch.einsum("bhid,bijd->bhij", query, key_structure)
        attention = attention / math.sqrt(d_k)
        attention = attention + attention_mask  # expect: MC509 collator
        attention = self.dropout(F.softmax(attention, dim=-1))
        output = torch.matmul(attention, val) + torch.einsum("bhij,bijd->bhid", attention, val_structure)
        return output, attention


class MultiHeadAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.d_k = config.d_model // config.n_heads
        self.W_q = nn.Linear(config.d_model, config.d_model)
        self.W_k = nn.Linear(config.d_model, config.d_model)
        self.W_v = nn.Linear(config.d_model, config.d_model)
        self.W_o = nn.Linear(config.d_model, config.d_model)
        self.attention = ScaledDotProductAttention(config)

    def forward(self, x, key_structure, val_structure, attention_mask):
        b, n, _ = x.shape
        q = self.W_q(x).view(b, n, self.n_heads, self.d_k).transpose(1, 2)
        k = self.W_k(x).view(b, n, self.n_heads, self.d_k).transpose(1, 2)
        v = self.W_v(x).view(b, n, self.n_heads, self.d_k).transpose(1, 2)
        output, attention = self.attention(q, k, v, key_structure, val_structure, attention_mask)
        output = output.transpose(1, 2).contiguous().view(b, n, -1)
        return self.W_o(output), attention


class TransformerBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.multi_head_attention = MultiHeadAttention(config)
        self.layer_norm_1 = nn.LayerNorm(config.d_model)
        self.layer_norm_2 = nn.LayerNorm(config.d_model)
        self.ffn = nn.Sequential(nn.Linear(config.d_model, config.d_feed_forward), nn.ReLU(),
                                 nn.Linear(config.d_feed_forward, config.d_model))
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, x, key_structure, val_structure, attention_mask):
        attn_out, _ = self.multi_head_attention(x, key_structure, val_structure, attention_mask)
        x = self.layer_norm_1(x + self.dropout(attn_out))
        return self.layer_norm_2(x + self.dropout(self.ffn(x)))


class HierarchicalTransformer(nn.Module):
    def __init__(self, config, vocab_size):
        super().__init__()
        self.config = config
        self.word_module = WordModule(config, vocab_size)
        self.time_delay_encoder = nn.Embedding(config.n_time_bins, config.d_model)
        d_k = config.d_model // config.n_heads
        self.key_structure_emb = nn.Embedding(config.num_structure_index, d_k, padding_idx=0)
        self.val_structure_emb = nn.Embedding(config.num_structure_index, d_k, padding_idx=0)
        self.post_blocks = nn.ModuleList([TransformerBlock(config) for _ in range(config.num_layers)])
        self.final_attention = nn.Linear(config.d_model, 1)
        self.final_layer = nn.Linear(config.d_model, config.num_classes)

    def forward(self, X, time_delay, structure, attention_mask, post_pad):
        x = self.word_module(X) + self.time_delay_encoder(time_delay)
        key_structure = self.key_structure_emb(structure)
        val_structure = self.val_structure_emb(structure)
        for block in self.post_blocks:
            x = block(x, key_structure, val_structure, attention_mask)
        scores = self.final_attention(x).squeeze(-1).masked_fill(post_pad, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        pooled = torch.bmm(weights.unsqueeze(1), x).squeeze(1)
        return self.final_layer(pooled)


def make_thread(rng, vocab):
    label = int(rng.integers(4))
    n_posts = int(rng.integers(3, Config.max_tweets + 1))
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n_posts)]
    delays = np.sort(rng.exponential(3.0, n_posts))
    delays[0] = 0.0
    posts = [list(rng.choice(FILLER, 6))]
    for _ in range(1, n_posts):
        words = list(rng.choice(FILLER, 3))
        if rng.uniform() < 0.6:
            words.append(rng.choice(STANCE[label]))
        else:
            words.append(rng.choice(STANCE[int(rng.integers(4))]))
        posts.append(words)
    X = np.zeros((Config.max_tweets, Config.max_length), dtype=np.int64)
    for i, words in enumerate(posts):
        ids = [vocab.setdefault(w, len(vocab)) for w in words][: Config.max_length]
        X[i, :len(ids)] = ids
    time_delay = np.zeros(Config.max_tweets, dtype=np.int64)
    time_delay[:n_posts] = np.minimum(np.log1p(delays) * 3, Config.n_time_bins - 1).astype(np.int64)
    structure = np.zeros((Config.max_tweets, Config.max_tweets), dtype=np.int64)
    for i in range(n_posts):
        for j in range(n_posts):
            if i == j:
                structure[i, j] = 5
            elif parents[i] == j:
                structure[i, j] = 1
            elif parents[j] == i:
                structure[i, j] = 2
            else:
                structure[i, j] = 3 if j < i else 4
    return X, time_delay, structure, n_posts, label


def collate(threads):
    X = torch.tensor(np.stack([t[0] for t in threads]))
    time_delay = torch.tensor(np.stack([t[1] for t in threads]))
    structure = torch.tensor(np.stack([t[2] for t in threads]))
    num_posts = torch.tensor([t[3] for t in threads])
    post_pad = torch.arange(Config.max_tweets)[None, :] >= num_posts[:, None]
    attention_mask = post_pad[:, None, None, :]
    y = torch.tensor([t[4] for t in threads])
    return X, time_delay, structure, attention_mask, post_pad, y


def evaluate(model, threads):
    model.eval()
    with torch.no_grad():
        X, time_delay, structure, attention_mask, post_pad, y = collate(threads)
        pred = model(X, time_delay, structure, attention_mask, post_pad).argmax(-1)
    f1s = []
    for c in range(Config.num_classes):
        tp = ((pred == c) & (y == c)).sum().item()
        p = tp / max((pred == c).sum().item(), 1)
        r = tp / max((y == c).sum().item(), 1)
        f1s.append(2 * p * r / max(p + r, 1e-8))
    return (pred == y).float().mean().item(), f1s


if __name__ == "__main__":
    random.seed(7)
    torch.manual_seed(7)
    rng = np.random.default_rng(7)
    vocab = {"<pad>": 0}
    threads = [make_thread(rng, vocab) for _ in range(400)]
    train_threads, test_threads = threads[:320], threads[320:]
    model = HierarchicalTransformer(Config, vocab_size=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=Config.lr)
    for epoch in range(Config.num_epochs):
        model.train()
        random.shuffle(train_threads)
        for start in range(0, len(train_threads), Config.batch_size):
            X, time_delay, structure, attention_mask, post_pad, y = collate(train_threads[start:start + Config.batch_size])
            loss = F.cross_entropy(model(X, time_delay, structure, attention_mask, post_pad), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        acc, f1s = evaluate(model, test_threads)
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} acc {acc:.3f} " + " ".join(
            f"{name}-F1 {f:.2f}" for name, f in zip(LABELS, f1s)))
