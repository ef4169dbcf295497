"""Context-aware attentive knowledge tracing (AKT) in the style of arghosh/AKT.

Question and interaction embeddings with Rasch-model difficulty offsets, a
knowledge encoder over the interactions, and a knowledge retriever in which each
question attends to strictly earlier interactions with the monotonic attention
that decays with the context-aware distance (``gamma`` per head). Sequences are
right-padded with question id 0 and the loss skips the padding. The trained
model is also served in float16 through ``predict_half``.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3 and §3 item 18, tools.md §0 P5
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class AKTConfig:
    n_question: int = 40
    n_pid: int = 120
    d_model: int = 32
    n_blocks: int = 1
    n_heads: int = 4
    d_ff: int = 64
    dropout: float = 0.05
    kq_same: bool = True
    l2: float = 1e-5
    seqlen: int = 30


def attention(q, k, v, d_k, mask, dropout, zero_pad, gamma=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    bs, head, seqlen = scores.size(0), scores.size(1), scores.size(2)
    x1 = torch.arange(seqlen, device=scores.device).expand(seqlen, -1)
    x2 = x1.transpose(0, 1).contiguous()

    with torch.no_grad():
        scores_ = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        scores_ = F.softmax(scores_, dim=-1)
        scores_ = scores_ * mask.to(scores_.dtype)
        distcum_scores = torch.cumsum(scores_, dim=-1)
        disttotal_scores = torch.sum(scores_, dim=-1, keepdim=True)
        position_effect = torch.abs(x1 - x2)[None, None, :, :].to(scores.dtype)
        dist_scores = torch.clamp((disttotal_scores - distcum_scores) * position_effect, min=0.0)
        dist_scores = dist_scores.sqrt().detach()
    gamma = -1.0 * F.softplus(gamma).unsqueeze(0)
    total_effect = torch.clamp(torch.clamp((dist_scores * gamma).exp(), min=1e-5), max=1e4)
    scores = scores * total_effect
    scores = scores.masked_fill(mask == 0, -1e32)  # expect: MC501 akt
    scores = F.softmax(scores, dim=-1)
    if zero_pad:
        pad_zero = torch.zeros(bs, head, 1, seqlen, dtype=scores.dtype, device=scores.device)
        scores = torch.cat([pad_zero, scores[:, :, 1:, :]], dim=2)
    scores = dropout(scores)
    return torch.matmul(scores, v)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, d_feature, n_heads, dropout, kq_same):
        super().__init__()
        self.d_k = d_feature
        self.h = n_heads
        self.kq_same = kq_same
        self.v_linear = nn.Linear(d_model, d_model)
        self.k_linear = nn.Linear(d_model, d_model)
        if not kq_same:
            self.q_linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_model, d_model)
        self.gammas = nn.Parameter(torch.zeros(n_heads, 1, 1))
        nn.init.xavier_uniform_(self.gammas)

    def forward(self, q, k, v, mask, zero_pad):
        bs = q.size(0)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        q = (self.k_linear(q) if self.kq_same else self.q_linear(q)).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        scores = attention(q, k, v, self.d_k, mask, self.dropout, zero_pad, self.gammas)
        concat = scores.transpose(1, 2).contiguous().view(bs, -1, self.h * self.d_k)
        return self.out_proj(concat)


class TransformerLayer(nn.Module):
    def __init__(self, cfg: AKTConfig):
        super().__init__()
        self.masked_attn_head = MultiHeadAttention(cfg.d_model, cfg.d_model // cfg.n_heads, cfg.n_heads,
                                                   cfg.dropout, cfg.kq_same)
        self.layer_norm1 = nn.LayerNorm(cfg.d_model)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.linear1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.linear2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.layer_norm2 = nn.LayerNorm(cfg.d_model)
        self.dropout2 = nn.Dropout(cfg.dropout)

    def forward(self, mask, query, key, values, apply_pos=True):
        seqlen = query.size(1)
        nopeek_mask = np.triu(np.ones((1, 1, seqlen, seqlen)), k=mask).astype("uint8")
        src_mask = (torch.from_numpy(nopeek_mask) == 0).to(query.device)
        query2 = self.masked_attn_head(query, key, values, mask=src_mask, zero_pad=mask == 0)
        query = self.layer_norm1(query + self.dropout1(query2))
        if apply_pos:
            query2 = self.linear2(self.dropout2(F.relu(self.linear1(query))))
            query = self.layer_norm2(query + self.dropout2(query2))
        return query


class AKT(nn.Module):
    def __init__(self, cfg: AKTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.difficult_param = nn.Embedding(cfg.n_pid + 1, 1)
        self.q_embed_diff = nn.Embedding(cfg.n_question + 1, d)
        self.qa_embed_diff = nn.Embedding(2 * cfg.n_question + 1, d)
        self.q_embed = nn.Embedding(cfg.n_question + 1, d)
        self.qa_embed = nn.Embedding(2, d)
        self.blocks_1 = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.n_blocks)])
        self.blocks_2 = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.n_blocks * 2)])
        self.out = nn.Sequential(nn.Linear(2 * d, 64), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(64, 1))

    def forward(self, q_data, qa_data, target, pid_data):
        q_embed_data = self.q_embed(q_data)
        qa_embed_data = self.qa_embed((qa_data - q_data) // self.cfg.n_question) + q_embed_data
        pid_embed_data = self.difficult_param(pid_data)
        q_embed_data = q_embed_data + pid_embed_data * self.q_embed_diff(q_data)
        qa_embed_data = qa_embed_data + pid_embed_data * self.qa_embed_diff(qa_data)
        c_reg_loss = (pid_embed_data ** 2.0).sum() * self.cfg.l2

        y = qa_embed_data
        for block in self.blocks_1:
            y = block(mask=1, query=y, key=y, values=y)
        x = q_embed_data
        flag_first = True
        for block in self.blocks_2:
            if flag_first:
                x = block(mask=1, query=x, key=x, values=x, apply_pos=False)
            else:
                x = block(mask=0, query=x, key=x, values=y, apply_pos=True)
            flag_first = not flag_first

        logits = self.out(torch.cat([x, q_embed_data], dim=-1)).squeeze(-1)
        keep = target > -0.9
        loss = F.binary_cross_entropy_with_logits(logits[keep], target[keep], reduction="sum")
        return loss + c_reg_loss, torch.sigmoid(logits), keep.sum()


@torch.no_grad()
def predict_half(model, q_data, qa_data, target, pid_data):
    served = copy.deepcopy(model).half().eval()
    _, probs, _ = served(q_data, qa_data, target.half(), pid_data)
    return probs.float()


def make_sequences(cfg: AKTConfig, n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    ability = torch.randn(n, 1, generator=g)
    q = torch.randint(1, cfg.n_question + 1, (n, cfg.seqlen), generator=g)
    pid = (q * 3 + torch.randint(0, 3, (n, cfg.seqlen), generator=g)).clamp(max=cfg.n_pid)
    correct = (torch.rand(n, cfg.seqlen, generator=g) < torch.sigmoid(ability - q / cfg.n_question + 0.5)).long()
    lengths = torch.randint(5, cfg.seqlen + 1, (n,), generator=g)
    real = torch.arange(cfg.seqlen)[None, :] < lengths[:, None]
    q, pid = q * real, pid * real
    qa = (q + correct * cfg.n_question) * real
    target = torch.where(real, correct.float(), torch.full_like(correct, -1).float())
    return q, qa, target, pid


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = AKTConfig()
    q, qa, target, pid = make_sequences(cfg)
    model = AKT(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(20):
        model.train()
        loss, _, count = model(q, qa, target, pid)
        opt.zero_grad()
        (loss / count).backward()
        opt.step()
    print("train loss", round((loss / count).item(), 4))

    model.eval()
    with torch.no_grad():
        _, probs, _ = model(q, qa, target, pid)
    try:
        half = predict_half(model, q, qa, target, pid)
        keep = target > -0.9
        print("float16 vs float32 on real steps:", (half[keep] - probs[keep]).abs().max().item())
    except RuntimeError as err:
        print("predict_half failed:", err)
