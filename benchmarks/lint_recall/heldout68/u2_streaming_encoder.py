"""On-device dictation: a WeNet-style U2 encoder trained with dynamic chunks.

Conv2dSubsampling4 shrinks the frame mask with the features; every training batch
draws a chunk size (full context half of the time), so one model serves both
full-context decoding and streaming decoding with a chosen chunk. A CTC head on
top gives greedy transcripts for the smoke test.

Source: seed masked_fill_inplace.txt, sections 与模型缓冲区的配合 and 张量共享内存风险.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_pad_mask(lengths, max_len=0):
    max_len = max_len if max_len > 0 else lengths.max().item()
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0).expand(lengths.size(0), max_len) >= lengths.unsqueeze(-1)


def subsequent_chunk_mask(size, chunk_size, device=torch.device("cpu")):
    pos_idx = torch.arange(size, device=device)
    block_value = (torch.div(pos_idx, chunk_size, rounding_mode="trunc") + 1) * chunk_size
    return pos_idx.unsqueeze(0) < block_value.unsqueeze(1)


class Conv2dSubsampling4(nn.Module):
    def __init__(self, idim, odim, max_len=512):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)
        self.xscale = math.sqrt(odim)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, odim, 2, dtype=torch.float32) * -(math.log(10000.0) / odim))
        pe = torch.zeros(max_len, odim)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x, x_mask):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x * self.xscale + self.pe[:, :t], x_mask[:, :, 2::2][:, :, 2::2]


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_qkv = nn.Linear(n_feat, 3 * n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)

    def forward(self, x, mask, chunk_bias):
        b, t, _ = x.shape
        q, k, v = self.linear_qkv(x).view(b, t, 3, self.h, self.d_k).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k) + chunk_bias
        mask = mask.unsqueeze(1).eq(0)
        scores = scores.masked_fill(mask, -float("inf"))
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        return self.linear_out(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, -1))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm1, self.self_attn = nn.LayerNorm(d, eps=1e-12), MultiHeadedAttention(heads, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-12)
        self.feed_forward = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    def forward(self, x, mask, chunk_bias):
        x = x + self.self_attn(self.norm1(x), mask, chunk_bias)
        return x + self.feed_forward(self.norm2(x))


class U2Encoder(nn.Module):
    def __init__(self, idim=40, d=64, heads=4, num_blocks=2, max_len=128, use_dynamic_chunk=True, static_chunk_size=0):
        super().__init__()
        self.max_len, self.use_dynamic_chunk, self.static_chunk_size = max_len, use_dynamic_chunk, static_chunk_size
        self.embed = Conv2dSubsampling4(idim, d)
        self.encoders = nn.ModuleList(EncoderLayer(d, heads) for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(d, eps=1e-12)
        self.register_buffer("chunk_bias", torch.zeros(max_len, max_len), persistent=False)

    def _select_chunk_size(self, t, decoding_chunk_size):
        if decoding_chunk_size != 0:
            return max(decoding_chunk_size, 0)
        if self.use_dynamic_chunk and self.training:
            chunk_size = torch.randint(1, t, (1,)).item()
            return 0 if chunk_size > t // 2 else chunk_size % 25 + 1
        return self.static_chunk_size

    def forward(self, xs, xs_lens, decoding_chunk_size=0):
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)
        xs, masks = self.embed(xs, masks)
        t = xs.size(1)
        chunk_size = self._select_chunk_size(t, decoding_chunk_size)
        if chunk_size > 0:
            blocked = ~subsequent_chunk_mask(self.max_len, chunk_size, xs.device)
            chunk_bias = self.chunk_bias.masked_fill_(blocked, float("-inf"))[:t, :t]  # expect: MC524 buffer
        else:
            chunk_bias = self.chunk_bias[:t, :t]
        for layer in self.encoders:
            xs = layer(xs, masks, chunk_bias)
        return self.after_norm(xs), masks


class CTCModel(nn.Module):
    def __init__(self, vocab_size=24, **kwargs):
        super().__init__()
        self.encoder = U2Encoder(**kwargs)
        self.ctc_lo = nn.Linear(64, vocab_size)

    def forward(self, feats, feats_lens, text, text_lens):
        enc, masks = self.encoder(feats, feats_lens)
        log_probs = self.ctc_lo(enc).log_softmax(-1).transpose(0, 1)
        return F.ctc_loss(log_probs, text, masks.squeeze(1).sum(1), text_lens, zero_infinity=True)

    @torch.no_grad()
    def ctc_greedy_search(self, feats, feats_lens, decoding_chunk_size=-1):
        enc, masks = self.encoder(feats, feats_lens, decoding_chunk_size=decoding_chunk_size)
        best = self.ctc_lo(enc).argmax(-1)
        hyps = []
        for b in range(best.size(0)):
            path = torch.unique_consecutive(best[b, : int(masks[b].sum())]).tolist()
            hyps.append([p for p in path if p != 0])
        return hyps


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CTCModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    feats_lens = torch.tensor([100, 84, 70])
    feats = torch.randn(3, 100, 40).masked_fill(make_pad_mask(feats_lens).unsqueeze(-1), 0.0)
    text, text_lens = torch.randint(1, 24, (3, 6)), torch.tensor([6, 5, 4])
    for step in range(4):
        loss = model(feats, feats_lens, text, text_lens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} ctc {loss.item():.4f}")
    model.eval()
    print("full context", model.ctc_greedy_search(feats, feats_lens, decoding_chunk_size=-1))
    print("chunk 4     ", model.ctc_greedy_search(feats, feats_lens, decoding_chunk_size=4))
