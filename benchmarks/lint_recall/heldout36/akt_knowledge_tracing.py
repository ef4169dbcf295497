"""AKT: context-aware attentive knowledge tracing with monotonic attention (Ghosh et al., KDD 2020).

Written in the layout of arghosh/AKT (akt.py: `AKT` with Rasch-model embeddings `difficult_param`,
`q_embed_diff` and `qa_embed_diff`, `Architecture` with the question / response encoder
`blocks_1` and the knowledge retriever `blocks_2` alternating `mask=1` and `mask=0`,
`TransformerLayer` building `nopeek_mask` with `np.triu(..., k=mask)`, `MultiHeadAttention` with
learned decay rates `gammas`, `attention` with the distance-aware exponential decay computed
under `torch.no_grad()` and `zero_pad` for the first step; the BCE over responses with
`target > -0.9`), on synthetic students answering problems of 20 skills.

Source: seed masked_fill_inplace.txt (注意); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

device = torch.device("cpu")


@dataclass
class AKTParams:
    n_question: int = 20
    n_pid: int = 50
    d_model: int = 32
    n_blocks: int = 1
    n_heads: int = 4
    d_ff: int = 64
    dropout: float = 0.05
    kq_same: int = 1
    final_fc_dim: int = 64
    l2: float = 1e-5
    seqlen: int = 50


def attention(q, k, v, d_k, mask, dropout, zero_pad, gamma=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    seqlen = scores.size(2)
    x1 = torch.arange(seqlen).expand(seqlen, -1).to(device)
    x2 = x1.transpose(0, 1).contiguous()
    with torch.no_grad():
        scores_ = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        scores_ = F.softmax(scores_, dim=-1)
        scores_ = scores_ * mask.float().to(device)
        distcum_scores = torch.cumsum(scores_, dim=-1)
        disttotal_scores = torch.sum(scores_, dim=-1, keepdim=True)
        position_effect = torch.abs(x1 - x2)[None, None, :, :].float().to(device)
        dist_scores = torch.clamp((disttotal_scores - distcum_scores) * position_effect, min=0.0)
        dist_scores = dist_scores.sqrt().detach()
    gamma = -1.0 * F.softplus(gamma).unsqueeze(0)
    total_effect = torch.clamp(torch.clamp((dist_scores * gamma).exp(), min=1e-5), max=1e5)
    scores = scores * total_effect
    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    scores = F.softmax(scores, dim=-1)
    if zero_pad:
        scores.masked_fill_(x2[None, None, :, :] == 0, 0.0)  # expect: MC505 akt
    scores = dropout(scores)
    return torch.matmul(scores, v)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, d_feature, n_heads, dropout, kq_same, bias=True):
        super().__init__()
        self.d_model, self.d_k, self.h, self.kq_same = d_model, d_feature, n_heads, kq_same
        self.v_linear = nn.Linear(d_model, d_model, bias=bias)
        self.k_linear = nn.Linear(d_model, d_model, bias=bias)
        if kq_same is False:
            self.q_linear = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.gammas = nn.Parameter(torch.zeros(n_heads, 1, 1))
        torch.nn.init.xavier_uniform_(self.gammas)

    def forward(self, q, k, v, mask, zero_pad):
        bs = q.size(0)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        q_linear = self.k_linear if self.kq_same else self.q_linear
        q = q_linear(q).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        scores = attention(q, k, v, self.d_k, mask, self.dropout, zero_pad, self.gammas)
        concat = scores.transpose(1, 2).contiguous().view(bs, -1, self.d_model)
        return self.out_proj(concat)


class TransformerLayer(nn.Module):
    def __init__(self, d_model, d_feature, d_ff, n_heads, dropout, kq_same):
        super().__init__()
        self.masked_attn_head = MultiHeadAttention(
            d_model, d_feature, n_heads, dropout, kq_same=kq_same == 1
        )
        self.layer_norm1 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.layer_norm2 = nn.LayerNorm(d_model)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, mask, query, key, values, apply_pos=True):
        seqlen = query.size(1)
        nopeek_mask = np.triu(np.ones((1, 1, seqlen, seqlen)), k=mask).astype("uint8")
        src_mask = (torch.from_numpy(nopeek_mask) == 0).to(device)
        query2 = self.masked_attn_head(query, key, values, mask=src_mask, zero_pad=mask == 0)
        query = self.layer_norm1(query + self.dropout1(query2))
        if apply_pos:
            query2 = self.linear2(self.dropout(self.activation(self.linear1(query))))
            query = self.layer_norm2(query + self.dropout2(query2))
        return query


class Architecture(nn.Module):
    def __init__(self, n_blocks, d_model, d_feature, d_ff, n_heads, dropout, kq_same):
        super().__init__()
        self.blocks_1 = nn.ModuleList(
            TransformerLayer(d_model, d_feature, d_ff, n_heads, dropout, kq_same)
            for _ in range(n_blocks)
        )
        self.blocks_2 = nn.ModuleList(
            TransformerLayer(d_model, d_feature, d_ff, n_heads, dropout, kq_same)
            for _ in range(n_blocks * 2)
        )

    def forward(self, q_embed_data, qa_embed_data):
        y, x = qa_embed_data, q_embed_data
        for block in self.blocks_1:
            y = block(mask=1, query=y, key=y, values=y)
        flag_first = True
        for block in self.blocks_2:
            if flag_first:
                x = block(mask=1, query=x, key=x, values=x, apply_pos=False)
                flag_first = False
            else:
                x = block(mask=0, query=x, key=x, values=y, apply_pos=True)
                flag_first = True
        return x


class AKT(nn.Module):
    def __init__(self, p: AKTParams):
        super().__init__()
        self.n_question, self.n_pid, self.l2 = p.n_question, p.n_pid, p.l2
        self.difficult_param = nn.Embedding(p.n_pid + 1, 1)
        self.q_embed_diff = nn.Embedding(p.n_question + 1, p.d_model)
        self.qa_embed_diff = nn.Embedding(2 * p.n_question + 1, p.d_model)
        self.q_embed = nn.Embedding(p.n_question + 1, p.d_model)
        self.qa_embed = nn.Embedding(2, p.d_model)
        self.model = Architecture(
            p.n_blocks, p.d_model, p.d_model // p.n_heads, p.d_ff, p.n_heads, p.dropout, p.kq_same
        )
        self.out = nn.Sequential(
            nn.Linear(2 * p.d_model, p.final_fc_dim),
            nn.ReLU(),
            nn.Dropout(p.dropout),
            nn.Linear(p.final_fc_dim, 1),
        )
        torch.nn.init.constant_(self.difficult_param.weight, 0.0)

    def forward(self, q_data, qa_data, target, pid_data):
        q_embed_data = self.q_embed(q_data)
        qa_data = (qa_data - q_data) // self.n_question
        qa_embed_data = self.qa_embed(qa_data) + q_embed_data
        q_embed_diff_data = self.q_embed_diff(q_data)
        pid_embed_data = self.difficult_param(pid_data)
        q_embed_data = q_embed_data + pid_embed_data * q_embed_diff_data
        qa_embed_diff_data = self.qa_embed_diff(qa_data)
        qa_embed_data = qa_embed_data + pid_embed_data * (qa_embed_diff_data + q_embed_diff_data)
        c_reg_loss = (pid_embed_data**2.0).sum() * self.l2
        d_output = self.model(q_embed_data, qa_embed_data)
        preds = self.out(torch.cat([d_output, q_embed_data], dim=-1)).reshape(-1)
        labels = target.reshape(-1)
        mask = labels > -0.9
        loss = F.binary_cross_entropy_with_logits(
            preds[mask], labels[mask].float(), reduction="sum"
        )
        return loss + c_reg_loss, torch.sigmoid(preds), mask.sum()


def synthetic_students(p: AKTParams, n, rng):
    pid_skill = rng.integers(1, p.n_question + 1, p.n_pid + 1)
    difficulty = rng.normal(0, 1, p.n_pid + 1)
    q = np.zeros((n, p.seqlen), dtype=np.int64)
    pid, target = np.zeros_like(q), -np.ones((n, p.seqlen))
    for s in range(n):
        ability = rng.normal(0, 1, p.n_question + 1)
        for t in range(int(rng.integers(10, p.seqlen + 1))):
            problem = int(rng.integers(1, p.n_pid + 1))
            skill = pid_skill[problem]
            correct = rng.random() < 1 / (1 + np.exp(difficulty[problem] - ability[skill]))
            ability[skill] += 0.3
            q[s, t], pid[s, t], target[s, t] = skill, problem, float(correct)
    qa = q + p.n_question * (target > 0)
    as_tensor = torch.from_numpy
    return as_tensor(q), as_tensor(qa), as_tensor(target).float(), as_tensor(pid)


def auc(scores, labels):
    order = scores.argsort()
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    params = AKTParams()
    q, qa, target, pid = synthetic_students(params, 400, rng)
    model = AKT(params)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.0, 0.999), eps=1e-8)
    for epoch in range(4):
        for start in range(0, 320, 32):
            batch = slice(start, start + 32)
            loss, _, true_ct = model(q[batch], qa[batch], target[batch], pid[batch])
            optimizer.zero_grad()
            (loss / true_ct).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
        print(f"epoch {epoch} loss {(loss / true_ct).item():.4f}")
    model.eval()
    with torch.no_grad():
        _, pred, _ = model(q[320:], qa[320:], target[320:], pid[320:])
    labels = target[320:].reshape(-1)
    keep = labels > -0.9
    print(f"valid AUC {auc(pred[keep], labels[keep]):.4f}")


if __name__ == "__main__":
    main()
