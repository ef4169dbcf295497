"""Grammar-correction encoder-decoder: padded source sentences, cross-attention, greedy decoding.

Source sentences of different lengths are padded on the right; the decoder attends causally to
its own prefix and cross-attends to the encoded source. Masks follow the 1 = attend convention
of the classic "Attention Is All You Need" re-implementations (`make_src_mask`,
`make_trg_mask`, `masked_fill(mask == 0, ...)` in the attention).

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96; conventions.md §3 item 21
"""
import math

import torch
import torch.nn as nn

PAD, BOS, EOS = 0, 1, 2


class ScaleDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, torch.finfo(score.dtype).min)
        return torch.softmax(score, dim=-1) @ v


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.w_q, self.w_k, self.w_v = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)
        self.attention = ScaleDotProductAttention()

    def split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        out = self.attention(self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v)), mask=mask)
        b, h, t, dh = out.shape
        return self.w_concat(out.transpose(1, 2).reshape(b, t, h * dh))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_head)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, src_mask):
        x = self.norm1(x + self.attention(x, x, x, mask=src_mask))
        return self.norm2(x + self.ffn(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_head)
        self.enc_dec_attention = MultiHeadAttention(d_model, n_head)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))

    def forward(self, dec, enc, trg_mask, src_mask):
        x = self.norms[0](dec + self.self_attention(dec, dec, dec, mask=trg_mask))
        x = self.norms[1](x + self.enc_dec_attention(x, enc, enc, mask=src_mask))
        return self.norms[2](x + self.ffn(x))


class Transformer(nn.Module):
    def __init__(self, vocab=40, d_model=32, n_head=4, n_layers=2, max_len=32):
        super().__init__()
        self.src_pad_idx = self.trg_pad_idx = PAD
        self.emb, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, n_head) for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, n_head) for _ in range(n_layers))
        self.linear = nn.Linear(d_model, vocab)

    def make_masks(self, src, trg):
        t = trg.shape[1]
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        return {
            "src_mask": (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3),  # expect: MC514 encdec
            "memory_mask": (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2),
            "trg_mask": (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2) & causal,
        }

    def embed(self, ids):
        return self.emb(ids) + self.pos(torch.arange(ids.shape[1]))

    def forward(self, src, trg):
        masks = self.make_masks(src, trg)
        enc = self.embed(src)
        for layer in self.encoder:
            enc = layer(enc, masks["src_mask"])
        dec = self.embed(trg)
        for layer in self.decoder:
            dec = layer(dec, enc, masks["trg_mask"], masks["memory_mask"])
        return self.linear(dec)


@torch.no_grad()
def greedy_decode(model, src, max_len=6):
    trg = torch.full((src.shape[0], 1), BOS)
    for _ in range(max_len):
        next_tok = model(src, trg)[:, -1].argmax(-1, keepdim=True)
        trg = torch.cat([trg, next_tok], dim=1)
    return trg[:, 1:]


def pad_batch(seqs):
    t = max(map(len, seqs))
    return torch.tensor([s + [PAD] * (t - len(s)) for s in seqs])


if __name__ == "__main__":
    torch.manual_seed(0)
    sources = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17]]
    model = Transformer().eval()
    batched = greedy_decode(model, pad_batch(sources))
    alone = torch.cat([greedy_decode(model, torch.tensor([s])) for s in sources])
    print("batched", batched.tolist())
    print("same as decoding each source alone:", torch.equal(batched, alone))
