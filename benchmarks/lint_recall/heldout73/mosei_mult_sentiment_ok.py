"""Multimodal sentiment regression on unaligned CMU-MOSEI-style data with MulT.

Word vectors, COVAREP-like acoustic frames and Facet-like visual frames of
different lengths are projected by temporal convolutions; each modality
is reinforced by crossmodal transformers attending to the other two, and the
last valid step of each stream is fused for the sentiment score in [-3, 3].

Source: pytorch/pytorch#103749 (conventions.md §3 item 5), Biohub/esm#299 (item 22); conventions.md §2.3.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

hyp_params = SimpleNamespace(orig_d_l=30, orig_d_a=16, orig_d_v=12, d_model=32, num_heads=4, layers=2,
                             attn_dropout=0.0, relu_dropout=0.0, res_dropout=0.0, output_dim=1)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, attn_dropout=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.in_proj_q, self.in_proj_k, self.in_proj_v, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))
        self.attn_dropout = attn_dropout

    def forward(self, query, key, value, query_keep, key_keep):
        tgt_len, bsz, embed_dim = query.size()
        src_len = key.size(0)
        q = (self.in_proj_q(query) * self.scaling).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        k = self.in_proj_k(key).view(src_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.in_proj_v(value).view(src_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        attn_weights = q @ k.transpose(-1, -2)
        attn_weights = attn_weights.masked_fill(~key_keep[:, None, None, :], float("-inf"))
        attn_weights = F.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
        attn_weights = F.dropout(attn_weights, p=self.attn_dropout, training=self.training)
        attn = (attn_weights @ v) * query_keep[:, None, :, None]
        attn = attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, attn_dropout, relu_dropout, res_dropout):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, num_heads, attn_dropout)
        self.fc1 = nn.Linear(embed_dim, 4 * embed_dim)
        self.fc2 = nn.Linear(4 * embed_dim, embed_dim)
        self.layer_norms = nn.ModuleList([nn.LayerNorm(embed_dim) for _ in range(2)])
        self.relu_dropout, self.res_dropout = relu_dropout, res_dropout

    def forward(self, x, x_k, x_v, x_keep, kv_keep):
        residual = x
        x = self.layer_norms[0](x)
        if x_k is not None:
            x_k, x_v = self.layer_norms[0](x_k), self.layer_norms[0](x_v)
        else:
            x_k, x_v = x, x
        x = residual + F.dropout(self.self_attn(x, x_k, x_v, x_keep, kv_keep), p=self.res_dropout, training=self.training)
        residual = x
        x = F.dropout(F.relu(self.fc1(self.layer_norms[1](x))), p=self.relu_dropout, training=self.training)
        return residual + F.dropout(self.fc2(x), p=self.res_dropout, training=self.training)


def sinusoidal_positions(seq_len, dim):
    pos = torch.arange(seq_len, dtype=torch.float).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * (-math.log(10000.0) / dim))
    pe = torch.zeros(seq_len, dim)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim, num_heads, layers, attn_dropout=0.0, relu_dropout=0.0, res_dropout=0.0):
        super().__init__()
        self.embed_scale = math.sqrt(embed_dim)
        self.layers = nn.ModuleList([TransformerEncoderLayer(embed_dim, num_heads, attn_dropout, relu_dropout, res_dropout) for _ in range(layers)])
        self.layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x_in, x_keep, x_in_k=None, kv_keep=None):
        x = self.embed_scale * x_in + sinusoidal_positions(x_in.size(0), x_in.size(2))[:, None]
        x_k = x_v = None
        if x_in_k is not None:
            x_k = x_v = self.embed_scale * x_in_k + sinusoidal_positions(x_in_k.size(0), x_in_k.size(2))[:, None]
        else:
            kv_keep = x_keep
        for layer in self.layers:
            x = layer(x, x_k, x_v, x_keep, kv_keep)
        return self.layer_norm(x)


class MULTModel(nn.Module):
    def __init__(self, hp):
        super().__init__()
        d = hp.d_model
        self.proj_l = nn.Conv1d(hp.orig_d_l, d, kernel_size=1, bias=False)
        self.proj_a = nn.Conv1d(hp.orig_d_a, d, kernel_size=1, bias=False)
        self.proj_v = nn.Conv1d(hp.orig_d_v, d, kernel_size=1, bias=False)
        make = lambda: TransformerEncoder(d, hp.num_heads, hp.layers, hp.attn_dropout, hp.relu_dropout, hp.res_dropout)
        self.trans_l_with_a, self.trans_l_with_v = make(), make()
        self.trans_a_with_l, self.trans_a_with_v = make(), make()
        self.trans_v_with_l, self.trans_v_with_a = make(), make()
        self.trans_l_mem = TransformerEncoder(2 * d, hp.num_heads, hp.layers)
        self.trans_a_mem = TransformerEncoder(2 * d, hp.num_heads, hp.layers)
        self.trans_v_mem = TransformerEncoder(2 * d, hp.num_heads, hp.layers)
        self.proj1 = nn.Linear(6 * d, 6 * d)
        self.proj2 = nn.Linear(6 * d, 6 * d)
        self.out_layer = nn.Linear(6 * d, hp.output_dim)

    @staticmethod
    def last_valid(h, keep):
        idx = keep.long().sum(dim=1) - 1
        return h[idx, torch.arange(h.size(1))]

    def forward(self, x_l, x_a, x_v, keep):
        l_keep, a_keep, v_keep = keep["text"], keep["audio"], keep["vision"]
        proj_x_l = self.proj_l(x_l.transpose(1, 2)).permute(2, 0, 1)
        proj_x_a = self.proj_a(x_a.transpose(1, 2)).permute(2, 0, 1)
        proj_x_v = self.proj_v(x_v.transpose(1, 2)).permute(2, 0, 1)
        h_ls = torch.cat([self.trans_l_with_a(proj_x_l, l_keep, proj_x_a, a_keep), self.trans_l_with_v(proj_x_l, l_keep, proj_x_v, v_keep)], dim=2)
        h_as = torch.cat([self.trans_a_with_l(proj_x_a, a_keep, proj_x_l, l_keep), self.trans_a_with_v(proj_x_a, a_keep, proj_x_v, v_keep)], dim=2)
        h_vs = torch.cat([self.trans_v_with_l(proj_x_v, v_keep, proj_x_l, l_keep), self.trans_v_with_a(proj_x_v, v_keep, proj_x_a, a_keep)], dim=2)
        last_h_l = self.last_valid(self.trans_l_mem(h_ls, l_keep), l_keep)
        last_h_a = self.last_valid(self.trans_a_mem(h_as, a_keep), a_keep)
        last_h_v = self.last_valid(self.trans_v_mem(h_vs, v_keep), v_keep)
        last_hs = torch.cat([last_h_l, last_h_a, last_h_v], dim=1)
        last_hs_proj = self.proj2(F.relu(self.proj1(last_hs))) + last_hs
        return self.out_layer(last_hs_proj).squeeze(-1)


def collate(samples):
    out, keep = {}, {}
    for name in ("text", "audio", "vision"):
        seqs = [s[name] for s in samples]
        width = max(x.size(0) for x in seqs)
        padded = torch.zeros(len(seqs), width, seqs[0].size(1))
        lengths = torch.tensor([x.size(0) for x in seqs])
        for i, x in enumerate(seqs):
            padded[i, : x.size(0)] = x
        out[name] = padded
        keep[name] = torch.arange(width)[None, :] < lengths[:, None]
    return out, keep, torch.tensor([s["label"] for s in samples])


if __name__ == "__main__":
    torch.manual_seed(0)
    hp = hyp_params
    samples = [{"text": torch.randn(t, hp.orig_d_l), "audio": torch.randn(a, hp.orig_d_a), "vision": torch.randn(v, hp.orig_d_v), "label": y}
               for t, a, v, y in [(8, 12, 10, 1.4), (5, 9, 10, -2.0), (7, 12, 6, 0.2)]]
    inputs, keep, labels = collate(samples)
    model = MULTModel(hp)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        preds = model(inputs["text"], inputs["audio"], inputs["vision"], keep)
        loss = F.l1_loss(preds, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} MAE {loss.item():.4f}")
    print("acc2", ((preds > 0) == (labels > 0)).float().mean().item())
