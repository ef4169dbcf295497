"""Transformer from scratch, as built step by step in a blog tutorial: MultiHeadAttention ->
EncoderLayer / DecoderLayer -> Encoder / Decoder -> Transformer; the masks are made in
`Transformer.make_src_mask` / `make_tgt_mask` and handed down. Demo: reverse a sequence.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21
"""
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.d_k = n_head, d_model // n_head
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def split(self, x):
        return x.view(x.size(0), -1, self.n_head, self.d_k).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        score = q @ k.transpose(2, 3) / self.d_k ** 0.5  # (batch, head, query, key)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000.0)
        out = torch.softmax(score, dim=-1) @ v
        out = out.transpose(1, 2).contiguous().view(q.size(0), -1, self.n_head * self.d_k)
        return self.w_o(out)


def feed_forward(d_model, hidden):
    return nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(), nn.Linear(hidden, d_model))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head, hidden):
        super().__init__()
        self.attention, self.ffn = MultiHeadAttention(d_model, n_head), feed_forward(d_model, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, src_mask):
        x = self.norm1(x + self.attention(x, x, x, mask=src_mask))
        return self.norm2(x + self.ffn(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_head, hidden):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_head)
        self.enc_dec_attention = MultiHeadAttention(d_model, n_head)
        self.ffn, self.norms = feed_forward(d_model, hidden), nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, dec, enc, tgt_mask, src_mask):
        x = self.norms[0](dec + self.self_attention(dec, dec, dec, mask=tgt_mask))
        x = self.norms[1](x + self.enc_dec_attention(x, enc, enc, mask=src_mask))
        return self.norms[2](x + self.ffn(x))


class Encoder(nn.Module):
    def __init__(self, vocab, d_model, n_head, hidden, n_layers, max_len):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_head, hidden) for _ in range(n_layers))

    def forward(self, src, src_mask):
        x = self.tok(src) + self.pos(torch.arange(src.size(1), device=src.device))
        for layer in self.layers:
            x = layer(x, src_mask)
        return x


class Decoder(nn.Module):
    def __init__(self, vocab, d_model, n_head, hidden, n_layers, max_len):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_head, hidden) for _ in range(n_layers))
        self.linear = nn.Linear(d_model, vocab)

    def forward(self, tgt, enc, tgt_mask, src_mask):
        x = self.tok(tgt) + self.pos(torch.arange(tgt.size(1), device=tgt.device))
        for layer in self.layers:
            x = layer(x, enc, tgt_mask, src_mask)
        return self.linear(x)


class Transformer(nn.Module):
    def __init__(self, vocab, pad_idx=0, d_model=32, n_head=4, hidden=64, n_layers=2, max_len=32):
        super().__init__()
        self.pad_idx = pad_idx
        self.encoder = Encoder(vocab, d_model, n_head, hidden, n_layers, max_len)
        self.decoder = Decoder(vocab, d_model, n_head, hidden, n_layers, max_len)

    def make_src_mask(self, src):
        return (src != self.pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 blog

    def make_tgt_mask(self, tgt):
        pad = (tgt != self.pad_idx).unsqueeze(1).unsqueeze(2)
        return pad & torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device))

    def forward(self, src, tgt):
        src_mask, tgt_mask = self.make_src_mask(src), self.make_tgt_mask(tgt)
        return self.decoder(tgt, self.encoder(src, src_mask), tgt_mask, src_mask)


if __name__ == "__main__":
    torch.manual_seed(0)
    PAD, BOS, V = 0, 1, 20
    src = torch.tensor([[5, 7, 9, 4, 8, 3], [6, 2, 11, 0, 0, 0]])
    rev = torch.tensor([[3, 8, 4, 9, 7, 5], [11, 2, 6, 0, 0, 0]])
    tgt_in = torch.cat([torch.full((2, 1), BOS), rev[:, :-1]], dim=1)
    model, loss_fn = Transformer(V, PAD), nn.CrossEntropyLoss(ignore_index=PAD)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(8):
        loss = loss_fn(model(src, tgt_in).reshape(-1, V), rev.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        gap = (model(src, tgt_in)[1, :3] - model(src[1:, :3], tgt_in[1:, :3])[0]).abs().max()
    print(f"loss {loss.item():.3f}, padded vs alone {gap.item():.2e}")
