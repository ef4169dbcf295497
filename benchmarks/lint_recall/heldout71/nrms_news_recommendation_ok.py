"""NRMS: neural news recommendation with multi-head self-attention (MIND-style data).

The news encoder runs multi-head self-attention over the words of each title and pools them
with additive attention; the user encoder does the same over the encoded news of the click
history. Histories are padded to ``his_size`` with empty news and their true lengths come with
the batch; candidates are one clicked impression plus ``npratio`` non-clicked ones.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md
section 3 item 21).
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

hparams = SimpleNamespace(
    vocab_size=120, word_emb_dim=16, head_num=4, head_dim=4, attention_hidden_dim=16,
    title_size=6, his_size=5, npratio=3, dropout=0.2, pad_word=0,
)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, in_dim, head_num, head_dim):
        super().__init__()
        self.head_num = head_num
        self.head_dim = head_dim
        self.WQ = nn.Linear(in_dim, head_num * head_dim)
        self.WK = nn.Linear(in_dim, head_num * head_dim)
        self.WV = nn.Linear(in_dim, head_num * head_dim)

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.head_num, self.head_dim).transpose(1, 2)

    def forward(self, x, mask=None):
        q, k, v = self.split(self.WQ(x)), self.split(self.WK(x)), self.split(self.WV(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = F.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2)
        return out.reshape(x.size(0), x.size(1), -1)


class AdditiveAttention(nn.Module):
    def __init__(self, in_dim, hidden_dim):
        super().__init__()
        self.proj = nn.Linear(in_dim, hidden_dim)
        self.query = nn.Parameter(torch.randn(hidden_dim) * 0.1)

    def forward(self, x, keep=None):
        e = torch.tanh(self.proj(x)) @ self.query
        if keep is not None:
            e = e.masked_fill(~keep, float("-inf"))
        alpha = F.softmax(e, dim=-1)
        return torch.bmm(alpha.unsqueeze(1), x).squeeze(1)


class NewsEncoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.hp = hp
        self.embedding = nn.Embedding(hp.vocab_size, hp.word_emb_dim, padding_idx=hp.pad_word)
        self.mhsa = MultiHeadSelfAttention(hp.word_emb_dim, hp.head_num, hp.head_dim)
        self.pool = AdditiveAttention(hp.head_num * hp.head_dim, hp.attention_hidden_dim)
        self.drop = nn.Dropout(hp.dropout)

    def forward(self, titles):
        shape = titles.shape[:-1]
        titles = titles.reshape(-1, titles.size(-1))
        word_keep = titles != self.hp.pad_word
        word_keep[:, 0] = True
        x = self.drop(self.embedding(titles))
        x = self.drop(self.mhsa(x, word_keep[:, None, None, :]))
        return self.pool(x, word_keep).view(*shape, -1)


class UserEncoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        dim = hp.head_num * hp.head_dim
        self.mhsa = MultiHeadSelfAttention(dim, hp.head_num, hp.head_dim)
        self.pool = AdditiveAttention(dim, hp.attention_hidden_dim)

    def forward(self, clicked, his_len):
        his_keep = torch.arange(clicked.size(1), device=clicked.device)[None, :] < his_len[:, None]
        his_mask = his_keep.unsqueeze(1).unsqueeze(2)
        h = self.mhsa(clicked, his_mask)
        return self.pool(h, his_keep)


class NRMS(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.news_encoder = NewsEncoder(hp)
        self.user_encoder = UserEncoder(hp)

    def forward(self, batch):
        clicked = self.news_encoder(batch["clicked_title"])
        user = self.user_encoder(clicked, batch["his_len"])
        cand = self.news_encoder(batch["candidate_title"])
        return torch.bmm(cand, user.unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def score_impression(self, clicked_title, his_len, impression_titles):
        clicked = self.news_encoder(clicked_title)
        user = self.user_encoder(clicked, his_len)
        cand = self.news_encoder(impression_titles)
        return torch.sigmoid(torch.bmm(cand, user.unsqueeze(-1)).squeeze(-1))


def random_titles(n_shape, hp, generator=None):
    lengths = torch.randint(2, hp.title_size + 1, n_shape, generator=generator)
    words = torch.randint(1, hp.vocab_size, (*n_shape, hp.title_size), generator=generator)
    return words * (torch.arange(hp.title_size) < lengths[..., None])


def make_batch(hp, batch_size=4, generator=None):
    his_len = torch.randint(1, hp.his_size + 1, (batch_size,), generator=generator)
    his_len[0] = 2
    clicked = random_titles((batch_size, hp.his_size), hp, generator)
    clicked = clicked * (torch.arange(hp.his_size)[None, :, None] < his_len[:, None, None])
    return {
        "clicked_title": clicked,
        "his_len": his_len,
        "candidate_title": random_titles((batch_size, 1 + hp.npratio), hp, generator),
        "label": torch.zeros(batch_size, dtype=torch.long),
    }


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return (pos[:, None] > neg[None, :]).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(2019)
    model = NRMS(hparams)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = make_batch(hparams)
    for step in range(4):
        logits = model(batch)
        loss = F.cross_entropy(logits, batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    imp = random_titles((4, 5), hparams)
    labels = torch.tensor([1, 0, 0, 1, 0])
    probs = model.score_impression(batch["clicked_title"], batch["his_len"], imp)
    print("loss %.4f  impression auc %.3f" % (loss.item(), auc(probs[0], labels)))
