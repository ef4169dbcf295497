"""SongNet-style rigid-format poetry generation with format, rhyme and sentence embeddings.

Layout after lipiji/SongNet (Li et al., "Rigid Formats Controlled Text Generation", ACL 2020):
sequence-first tensors, a `Vocab` with `<c0>` / `<c1>` / `<c2>` template symbols, `<s*>` segment
and `<p*>` intra-sentence position symbols, `BIGLM` with `encode` over the template and a decoder
whose layers read it as external memories, the fairseq-derived `MultiheadAttention`,
`SelfAttentionMask`, label-smoothed NLL, and greedy generation into a given format; synthetic
cipai of 3-4 lines whose line-final characters rhyme.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), pytorch/pytorch#103749 (conventions.md §3 item 5), conventions.md §2.3
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FORMATS = [[5, 5, 7, 7], [4, 6, 4, 6], [7, 7, 7], [3, 5, 3, 5]]
N_CHARS, N_RHYMES = 40, 4


class Vocab:
    def __init__(self):
        self.itos = ["<pad>", "<bos>", "<eos>", "<unk>", "</s>", "<c0>", "<c1>", "<c2>"]
        self.itos += [f"<s{i}>" for i in range(5)] + [f"<p{i}>" for i in range(9)]
        self.itos += [f"z{i:02d}" for i in range(N_CHARS)]
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.padding_idx, self.size = 0, len(self.itos)

    def idx(self, tokens):
        return [self.stoi[t] for t in tokens]


class SelfAttentionMask(nn.Module):
    def __init__(self, init_size=100):
        super().__init__()
        self.weights = SelfAttentionMask.get_mask(init_size)

    @staticmethod
    def get_mask(size):
        weights = torch.triu(torch.ones((size, size), dtype=torch.bool))  # expect: MC503 staticmethod
        return weights

    def forward(self, size):
        if self.weights is None or size > self.weights.size(0):
            self.weights = SelfAttentionMask.get_mask(size)
        return self.weights[:size, :size].detach()


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.head_dim, self.dropout = num_heads, embed_dim // num_heads, dropout
        self.scaling = self.head_dim ** -0.5
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        src_len = key.size(0)
        q = F.linear(query, self.in_proj.weight[:embed_dim], self.in_proj.bias[:embed_dim]) * self.scaling
        k, v = F.linear(key, self.in_proj.weight[embed_dim:], self.in_proj.bias[embed_dim:]).chunk(2, dim=-1)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(src_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(src_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights = attn_weights.masked_fill(attn_mask.unsqueeze(0), float("-inf"))
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.transpose(0, 1).unsqueeze(1).unsqueeze(2), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = F.dropout(F.softmax(attn_weights, dim=-1), p=self.dropout, training=self.training)
        attn = torch.bmm(attn_weights, v).transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn), attn_weights


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim, ff_embed_dim, num_heads, dropout, with_external=False):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, num_heads, dropout)
        self.fc1, self.fc2 = nn.Linear(embed_dim, ff_embed_dim), nn.Linear(ff_embed_dim, embed_dim)
        self.attn_layer_norm, self.ff_layer_norm = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
        self.with_external = with_external
        if with_external:
            self.external_attn = MultiheadAttention(embed_dim, num_heads, dropout)
            self.external_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = dropout

    def forward(self, x, self_padding_mask=None, self_attn_mask=None, external_memories=None, external_padding_mask=None):
        residual = x
        x, self_attn = self.self_attn(x, x, x, key_padding_mask=self_padding_mask, attn_mask=self_attn_mask)
        x = self.attn_layer_norm(residual + F.dropout(x, p=self.dropout, training=self.training))
        if self.with_external:
            residual = x
            x, _ = self.external_attn(x, external_memories, external_memories, key_padding_mask=external_padding_mask)
            x = self.external_layer_norm(residual + F.dropout(x, p=self.dropout, training=self.training))
        residual = x
        x = self.fc2(F.dropout(F.gelu(self.fc1(x)), p=self.dropout, training=self.training))
        return self.ff_layer_norm(residual + F.dropout(x, p=self.dropout, training=self.training)), self_attn


class BIGLM(nn.Module):
    def __init__(self, vocab, embed_dim=64, ff_embed_dim=128, num_heads=4, dropout=0.1, layers=2, smoothing_factor=0.1):
        super().__init__()
        self.vocab, self.smoothing_factor = vocab, smoothing_factor
        self.tok_embed = nn.Embedding(vocab.size, embed_dim, vocab.padding_idx)
        self.pos_embed = nn.Embedding(64, embed_dim)
        self.enc_layers = nn.ModuleList([TransformerLayer(embed_dim, ff_embed_dim, num_heads, dropout) for _ in range(layers)])
        self.dec_layers = nn.ModuleList([TransformerLayer(embed_dim, ff_embed_dim, num_heads, dropout, with_external=True)
                                         for _ in range(layers)])
        self.emb_layer_norm = nn.LayerNorm(embed_dim)
        self.one_more = nn.Linear(embed_dim, embed_dim)
        self.one_more_layer_norm = nn.LayerNorm(embed_dim)
        self.out_proj = nn.Linear(embed_dim, vocab.size)
        self.attn_mask = SelfAttentionMask()
        self.dropout = dropout

    def encode(self, xs_tpl, xs_seg, xs_pos):
        padding_mask = torch.eq(xs_tpl, self.vocab.padding_idx)
        x = self.tok_embed(xs_tpl) + self.tok_embed(xs_seg) + self.tok_embed(xs_pos)
        x = F.dropout(self.emb_layer_norm(x), p=self.dropout, training=self.training)
        for layer in self.enc_layers:
            x, _ = layer(x, self_padding_mask=padding_mask)
        return x, padding_mask

    def work(self, enc, src_padding_mask, ys_inp, ys_tpl, ys_seg, ys_pos):
        seq_len, bsz = ys_inp.size()
        self_attn_mask = self.attn_mask(seq_len)
        positions = torch.arange(seq_len).unsqueeze(1).expand(-1, bsz)
        x = self.tok_embed(ys_inp) + self.pos_embed(positions) + self.tok_embed(ys_tpl) + self.tok_embed(ys_seg) + self.tok_embed(ys_pos)
        x = F.dropout(self.emb_layer_norm(x), p=self.dropout, training=self.training)
        padding_mask = torch.eq(ys_inp, self.vocab.padding_idx)
        for layer in self.dec_layers:
            x, _ = layer(x, self_padding_mask=padding_mask, self_attn_mask=self_attn_mask,
                         external_memories=enc, external_padding_mask=src_padding_mask)
        return self.out_proj(self.one_more_layer_norm(F.gelu(self.one_more(x))))

    def forward(self, xs_tpl, xs_seg, xs_pos, ys_truth, ys_inp, ys_tpl, ys_seg, ys_pos):
        enc, src_padding_mask = self.encode(xs_tpl, xs_seg, xs_pos)
        logits = self.work(enc, src_padding_mask, ys_inp, ys_tpl, ys_seg, ys_pos)
        return F.cross_entropy(logits.flatten(0, 1), ys_truth.flatten(), ignore_index=self.vocab.padding_idx,
                               label_smoothing=self.smoothing_factor)


def random_poem(rng):
    fmt = FORMATS[rng.integers(len(FORMATS))]
    rhyme = rng.integers(N_RHYMES)
    truth, tpl, seg, pos = [], [], [], []
    c = int(rng.integers(N_CHARS))
    for s, n in enumerate(fmt):
        for p in range(n):
            c = (c + 3) % N_CHARS if rng.random() < 0.7 else int(rng.integers(N_CHARS))
            if p == n - 1:
                c = int(rhyme + N_RHYMES * rng.integers(N_CHARS // N_RHYMES))
            truth.append(f"z{c:02d}")
            tpl.append("<c1>" if p == n - 1 else "<c0>")
            seg.append(f"<s{s}>")
            pos.append(f"<p{n - 1 - p}>")
        truth.append("</s>"), tpl.append("<c2>"), seg.append(f"<s{s}>"), pos.append("<p0>")
    truth[-1] = "<eos>"
    return truth, tpl, seg, pos


def batchify(vocab, poems):
    T = max(len(p[0]) for p in poems) + 1
    cols = [np.zeros((T, len(poems)), dtype=np.int64) for _ in range(5)]
    for b, (truth, tpl, seg, pos) in enumerate(poems):
        n = len(truth)
        cols[0][:n, b] = vocab.idx(truth)
        cols[1][:n, b] = vocab.idx(["<bos>"] + truth[:-1])
        cols[2][:n, b], cols[3][:n, b], cols[4][:n, b] = vocab.idx(tpl), vocab.idx(seg), vocab.idx(pos)
    return [torch.from_numpy(c) for c in cols]


@torch.no_grad()
def greedy(model, vocab, ys_tpl, ys_seg, ys_pos):
    model.eval()
    enc, src_padding_mask = model.encode(ys_tpl, ys_seg, ys_pos)
    ys_inp = torch.full((1, ys_tpl.size(1)), vocab.stoi["<bos>"])
    for t in range(ys_tpl.size(0) - 1):
        logits = model.work(enc, src_padding_mask, ys_inp, ys_tpl[:t + 1], ys_seg[:t + 1], ys_pos[:t + 1])
        ys_inp = torch.cat([ys_inp, logits[-1:].argmax(-1)], 0)
    return ys_inp[1:]


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    vocab = Vocab()
    model = BIGLM(vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        model.train()
        ys_truth, ys_inp, ys_tpl, ys_seg, ys_pos = batchify(vocab, [random_poem(rng) for _ in range(32)])
        loss = model(ys_tpl, ys_seg, ys_pos, ys_truth, ys_inp, ys_tpl, ys_seg, ys_pos)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: loss {loss.item():.3f}")
    ys_truth, ys_inp, ys_tpl, ys_seg, ys_pos = batchify(vocab, [random_poem(rng) for _ in range(60)])
    out = greedy(model, vocab, ys_tpl, ys_seg, ys_pos)
    real = ys_truth[:out.size(0)] != vocab.padding_idx
    is_char = lambda ids: ids >= vocab.stoi["z00"]
    fmt_acc = (is_char(out) == is_char(ys_truth[:out.size(0)]))[real].float().mean().item()
    ends = ys_tpl[:out.size(0)] == vocab.stoi["<c1>"]
    rhyme_class = (out - vocab.stoi["z00"]) % N_RHYMES
    agree = []
    for b in range(out.size(1)):
        finals, classes = out[ends[:, b], b], rhyme_class[ends[:, b], b]
        agree += [bool(is_char(finals[0]) and is_char(f)) and c.item() == classes[0].item() for f, c in zip(finals[1:], classes[1:])]
    print(f"greedy generation: format accuracy {fmt_acc:.3f}, line ends rhyming with the first line {np.mean(agree):.3f}")
