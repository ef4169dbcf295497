"""Held-out 10: fastNLP's Star-Transformer encoder (fastNLP/modules/encoder/star_transformer.py:
`StarTransformer`, `_MSA1` ring attention, `_MSA2` relay attention) used by a `StarTransEnc`-style
classifier that builds its padding mask with `seq_len_to_mask`.

Source: FudanNLP/fastNLP#138 ("masked_fill bug in star-transformer!": `forward` documents the mask
as 0 at padding and 1 elsewhere, and fills where it is 1, so every real token's node is zeroed
and the relay attention fills the real positions with -inf), fixed in PR #139 by flipping the
mask first (`mask = (mask == 0)`).
Surroundings: the keep mask made by a helper from lengths, passed positionally into the encoder,
expanded for the node fill and concatenated for the relay attention in another module.
"""

import numpy as NP
import torch
from torch import nn
from torch.nn import functional as F


def seq_len_to_mask(seq_len, max_len=None):
    """[batch] lengths -> [batch, max_len] bool mask, True at the real tokens."""
    batch_size = seq_len.size(0)
    max_len = int(max_len) if max_len else seq_len.max().long()
    broad_cast_seq_len = torch.arange(max_len).expand(batch_size, -1).to(seq_len)
    return broad_cast_seq_len.lt(seq_len.unsqueeze(1))


class StarTransformer(nn.Module):
    def __init__(self, hidden_size, num_layers, num_head, head_dim, dropout=0.1, max_len=None):
        super(StarTransformer, self).__init__()
        self.iters = num_layers
        self.norm = nn.ModuleList([nn.LayerNorm(hidden_size, eps=1e-6) for _ in range(self.iters)])
        self.emb_drop = nn.Dropout(dropout)
        self.ring_att = nn.ModuleList(
            [_MSA1(hidden_size, nhead=num_head, head_dim=head_dim, dropout=0.0) for _ in range(self.iters)])
        self.star_att = nn.ModuleList(
            [_MSA2(hidden_size, nhead=num_head, head_dim=head_dim, dropout=0.0) for _ in range(self.iters)])
        self.pos_emb = nn.Embedding(max_len, hidden_size) if max_len is not None else None

    def forward(self, data, mask):
        """
        :param FloatTensor data: [batch, length, hidden] input sequence
        :param ByteTensor mask: [batch, length] padding mask, 0 at padding, 1 elsewhere
        :return: [batch, length, hidden] encoded sequence, [batch, hidden] relay node
        """

        def norm_func(f, x):
            # B, H, L, 1
            return f(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

        B, L, H = data.size()
        smask = torch.cat([torch.zeros(B, 1, ).byte().to(mask), mask], 1)

        embs = data.permute(0, 2, 1)[:, :, :, None]  # B H L 1
        if self.pos_emb:
            P = self.pos_emb(torch.arange(L, dtype=torch.long, device=embs.device)
                             .view(1, L)).permute(0, 2, 1).contiguous()[:, :, :, None]  # 1 H L 1
            embs = embs + P
        embs = norm_func(self.emb_drop, embs)
        nodes = embs
        relay = embs.mean(2, keepdim=True)
        ex_mask = mask[:, None, :, None].expand(B, H, L, 1)
        r_embs = embs.view(B, H, 1, L)
        for i in range(self.iters):
            ax = torch.cat([r_embs, relay.expand(B, H, 1, L)], 2)
            nodes = F.leaky_relu(self.ring_att[i](norm_func(self.norm[i], nodes), ax=ax))
            relay = F.leaky_relu(self.star_att[i](relay, torch.cat([relay, nodes], 2), smask))

            nodes = nodes.masked_fill_(ex_mask, 0)  # expect: MC519 positional

        nodes = nodes.view(B, H, L).permute(0, 2, 1)

        return nodes, relay.view(B, H)


class _MSA1(nn.Module):
    def __init__(self, nhid, nhead=10, head_dim=10, dropout=0.1):
        # Multi-head Self Attention Case 1, doing self-attention for small regions
        super(_MSA1, self).__init__()
        self.WQ = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WK = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WV = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WO = nn.Conv2d(nhead * head_dim, nhid, 1)
        self.drop = nn.Dropout(dropout)
        self.nhid, self.nhead, self.head_dim, self.unfold_size = nhid, nhead, head_dim, 3

    def forward(self, x, ax=None):
        # x: B, H, L, 1, ax : B, H, X, L append features
        nhid, nhead, head_dim, unfold_size = self.nhid, self.nhead, self.head_dim, self.unfold_size
        B, H, L, _ = x.shape
        q, k, v = self.WQ(x), self.WK(x), self.WV(x)  # x: (B,H,L,1)
        if ax is not None:
            aL = ax.shape[2]
            ak = self.WK(ax).view(B, nhead, head_dim, aL, L)
            av = self.WV(ax).view(B, nhead, head_dim, aL, L)
        q = q.view(B, nhead, head_dim, 1, L)
        k = F.unfold(k.view(B, nhead * head_dim, L, 1), (unfold_size, 1), padding=(unfold_size // 2, 0)) \
            .view(B, nhead, head_dim, unfold_size, L)
        v = F.unfold(v.view(B, nhead * head_dim, L, 1), (unfold_size, 1), padding=(unfold_size // 2, 0)) \
            .view(B, nhead, head_dim, unfold_size, L)
        if ax is not None:
            k = torch.cat([k, ak], 3)
            v = torch.cat([v, av], 3)
        alphas = self.drop(F.softmax((q * k).sum(2, keepdim=True) / NP.sqrt(head_dim), 3))  # B N L 1 U
        att = (alphas * v).sum(3).view(B, nhead * head_dim, L, 1)
        return self.WO(att)


class _MSA2(nn.Module):
    def __init__(self, nhid, nhead=10, head_dim=10, dropout=0.1):
        # Multi-head Self Attention Case 2, a broadcastable query for a sequence key and value
        super(_MSA2, self).__init__()
        self.WQ = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WK = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WV = nn.Conv2d(nhid, nhead * head_dim, 1)
        self.WO = nn.Conv2d(nhead * head_dim, nhid, 1)
        self.drop = nn.Dropout(dropout)
        self.nhid, self.nhead, self.head_dim, self.unfold_size = nhid, nhead, head_dim, 3

    def forward(self, x, y, mask=None):
        # x: B, H, 1, 1, 1 y: B H L 1
        nhid, nhead, head_dim, unfold_size = self.nhid, self.nhead, self.head_dim, self.unfold_size
        B, H, L, _ = y.shape
        q, k, v = self.WQ(x), self.WK(y), self.WV(y)
        q = q.view(B, nhead, 1, head_dim)  # B, H, 1, 1 -> B, N, 1, h
        k = k.view(B, nhead, head_dim, L)  # B, H, L, 1 -> B, N, h, L
        v = v.view(B, nhead, head_dim, L).permute(0, 1, 3, 2)  # B, H, L, 1 -> B, N, L, h
        pre_a = torch.matmul(q, k) / NP.sqrt(head_dim)
        if mask is not None:
            pre_a = pre_a.masked_fill(mask[:, None, None, :], -float('inf'))  # also: MC519
        alphas = self.drop(F.softmax(pre_a, 3))  # B, N, 1, L
        att = torch.matmul(alphas, v).view(B, -1, 1, 1)  # B, N, 1, h -> B, N*h, 1, 1
        return self.WO(att)


class StarTransEnc(nn.Module):
    def __init__(self, embed, hidden_size, num_layers, num_head, head_dim, max_len, emb_dropout, dropout):
        super(StarTransEnc, self).__init__()
        self.embedding = embed
        self.emb_fc = nn.Linear(embed.embedding_dim, hidden_size)
        self.emb_drop = nn.Dropout(emb_dropout)
        self.encoder = StarTransformer(hidden_size=hidden_size, num_layers=num_layers, num_head=num_head,
                                       head_dim=head_dim, dropout=dropout, max_len=max_len)

    def forward(self, x, mask):
        x = self.embedding(x)
        x = self.emb_fc(self.emb_drop(x))
        nodes, relay = self.encoder(x, mask)
        return nodes, relay


class STSeqCls(nn.Module):
    def __init__(self, embed, num_cls, hidden_size=300, num_layers=4, num_head=8, head_dim=32, max_len=512,
                 cls_hidden_size=600, emb_dropout=0.1, dropout=0.1):
        super(STSeqCls, self).__init__()
        self.enc = StarTransEnc(embed=embed, hidden_size=hidden_size, num_layers=num_layers, num_head=num_head,
                                head_dim=head_dim, max_len=max_len, emb_dropout=emb_dropout, dropout=dropout)
        self.cls = nn.Sequential(nn.Linear(hidden_size, cls_hidden_size), nn.LeakyReLU(),
                                 nn.Linear(cls_hidden_size, num_cls))

    def forward(self, words, seq_len):
        mask = seq_len_to_mask(seq_len)
        nodes, relay = self.enc(words, mask)
        y = 0.5 * (relay + nodes.max(1)[0])
        return {"pred": self.cls(y)}
