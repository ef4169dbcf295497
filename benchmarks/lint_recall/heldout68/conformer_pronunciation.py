"""Pronunciation assessment for language learners (speechocean762-style phone scores).

An ESPnet-layout conformer encoder (Conv2dSubsampling6, relative positional
self-attention, macaron feed-forward, convolution module) encodes the learner's
speech; the canonical phone sequence of the prompt is encoded by a small phone
self-attention layer and reads the acoustic frames by cross-attention. The head
regresses an accuracy score in [0, 2] for every phone and a sentence score.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96
(conventions.md section 3 item 21).
"""
import math

import torch
from torch import nn

PAD = 0


def make_pad_mask(lengths, maxlen=None):
    maxlen = int(max(lengths)) if maxlen is None else maxlen
    seq_range = torch.arange(0, maxlen, dtype=torch.int64)
    return seq_range.unsqueeze(0).expand(len(lengths), maxlen) >= lengths.unsqueeze(-1)


class RelPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        self.d_model, self.xscale = d_model, math.sqrt(d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe_positive, pe_negative = torch.zeros(max_len, d_model), torch.zeros(max_len, d_model)
        pe_positive[:, 0::2], pe_positive[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        pe_negative[:, 0::2], pe_negative[:, 1::2] = torch.sin(-1 * position * div_term), torch.cos(-1 * position * div_term)
        self.register_buffer("pe", torch.cat([torch.flip(pe_positive, [0]), pe_negative[1:]], dim=0).unsqueeze(0))

    def forward(self, x):
        center = self.pe.size(1) // 2
        return x * self.xscale, self.pe[:, center - x.size(1) + 1 : center + x.size(1)]


class Conv2dSubsampling6(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 5, 3), nn.ReLU())
        self.linear = nn.Linear(odim * (((idim - 1) // 2 - 2) // 3), odim)
        self.pos_enc = RelPositionalEncoding(odim)

    def forward(self, x, x_mask):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x, pos_emb = self.pos_enc(self.linear(x.transpose(1, 2).contiguous().view(b, t, c * f)))
        return x, pos_emb, x_mask[:, :, :-2:2][:, :, :-4:3]


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)

    def forward_qkv(self, query, key, value):
        n = query.size(0)
        q = self.linear_q(query).view(n, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(attn, value).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        return self.forward_attention(v, torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k), mask)


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    def __init__(self, n_head, n_feat):
        super().__init__(n_head, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.d_k))

    def rel_shift(self, x):
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1).view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, query, key, value, pos_emb, mask):
        q, k, v = self.forward_qkv(query, key, value)
        q = q.transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        matrix_ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1)))
        return self.forward_attention(v, (matrix_ac + matrix_bd) / math.sqrt(self.d_k), mask)


class ConformerLayer(nn.Module):
    def __init__(self, d, heads, kernel_size=7):
        super().__init__()
        ff = lambda: nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ff_macaron, self.ff = ff(), ff()
        self.norm_mha, self.self_attn = nn.LayerNorm(d), RelPositionMultiHeadedAttention(heads, d)
        self.norm_conv, self.pointwise = nn.LayerNorm(d), nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel_size, padding=kernel_size // 2, groups=d)
        self.conv_out, self.norm_final = nn.Conv1d(d, d, 1), nn.LayerNorm(d)

    def forward(self, x, pos_emb, mask):
        x = x + 0.5 * self.ff_macaron(x)
        h = self.norm_mha(x)
        x = x + self.self_attn(h, h, h, pos_emb, mask)
        h = nn.functional.glu(self.pointwise(self.norm_conv(x).transpose(1, 2)), dim=1)
        h = h.masked_fill(~mask, 0.0)
        x = x + self.conv_out(nn.functional.silu(self.depthwise(h))).transpose(1, 2)
        return self.norm_final(x + 0.5 * self.ff(x))


class PronunciationScorer(nn.Module):
    def __init__(self, idim=40, n_phones=42, d=64, heads=4):
        super().__init__()
        self.embed = Conv2dSubsampling6(idim, d)
        self.encoders = nn.ModuleList(ConformerLayer(d, heads) for _ in range(2))
        self.phone_embed = nn.Embedding(n_phones, d, padding_idx=PAD)
        self.phone_qkv = nn.Linear(d, 3 * d)
        self.phone_norm = nn.LayerNorm(d)
        self.cross_attn = MultiHeadedAttention(heads, d)
        self.phone_head = nn.Sequential(nn.Linear(2 * d, d), nn.ReLU(), nn.Linear(d, 1))
        self.utt_head = nn.Linear(d, 1)

    def phone_self_attention(self, x, phone_mask):
        q, k, v = self.phone_qkv(x).chunk(3, dim=-1)
        scores = torch.matmul(q.unsqueeze(1), k.unsqueeze(1).transpose(-2, -1)) / math.sqrt(x.size(-1))
        scores = scores.masked_fill(phone_mask == 0, torch.finfo(scores.dtype).min)
        return self.phone_norm(x + torch.matmul(torch.softmax(scores, dim=-1), v.unsqueeze(1)).squeeze(1))

    def forward(self, feats, feats_lens, phones):
        masks = ~make_pad_mask(feats_lens, feats.size(1))[:, None, :]
        xs, pos_emb, masks = self.embed(feats, masks)
        for layer in self.encoders:
            xs = layer(xs, pos_emb, masks)
        phone_mask = (phones != PAD).unsqueeze(1).unsqueeze(3)  # expect: MC514 padmask
        p = self.phone_self_attention(self.phone_embed(phones), phone_mask)
        ctx = self.cross_attn(p, xs, xs, masks)
        phone_scores = 2.0 * torch.sigmoid(self.phone_head(torch.cat([p, ctx], dim=-1)).squeeze(-1))
        keep = (phones != PAD).float()
        utt = (ctx * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return phone_scores * keep, 10.0 * torch.sigmoid(self.utt_head(utt).squeeze(-1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PronunciationScorer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    feats_lens = torch.tensor([96, 80, 60])
    feats = torch.randn(3, 96, 40).masked_fill(make_pad_mask(feats_lens)[..., None], 0.0)
    phones = torch.tensor([[5, 9, 13, 2, 7, 30], [11, 4, 8, 19, 0, 0], [3, 25, 6, 0, 0, 0]])
    gold_phone, gold_utt = torch.rand(3, 6).mul(2.0).round() * (phones != PAD), torch.tensor([7.0, 5.0, 8.0])
    for step in range(3):
        phone_scores, utt_scores = model(feats, feats_lens, phones)
        loss = ((phone_scores - gold_phone) ** 2).sum() / (phones != PAD).sum() + 0.1 * ((utt_scores - gold_utt) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} mse {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        phone_scores, utt_scores = model(feats[2:], feats_lens[2:], phones[2:, :3])
    print("phone accuracy", [round(s, 2) for s in phone_scores[0].tolist()], "sentence", round(utt_scores.item(), 2))
