"""Character-level transliteration (a syllabic script to Latin letters) with a Transformer.

Source words are written in a made-up abugida of consonant-vowel syllables and romanised letter by
letter, Dakshina-style; both sides are padded to a fixed ``max_len`` by the collate function. The
model follows hyunwoongko/transformer's layout (``TokenEmbedding``, ``PositionalEncoding``,
``TransformerEmbedding``, ``ScaleDotProductAttention``, ``MultiHeadAttention`` with ``split`` /
``concat``, its own ``LayerNorm``, ``EncoderLayer``, ``DecoderLayer``, ``Transformer`` with
``make_src_mask`` / ``make_trg_mask``), trained with teacher forcing and decoded greedily.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md §3
item 21), conventions.md §1 (direction cheat-sheet)
"""

import math

import torch
from torch import nn

CONSONANTS = ["k", "kh", "g", "ch", "t", "d", "n", "p", "m", "r", "s", "h"]
VOWELS = ["a", "aa", "i", "u", "e", "ai", "o"]
SRC_PAD, TRG_PAD, TRG_SOS, TRG_EOS = 0, 0, 1, 2
LATIN = ["<pad>", "<sos>", "<eos>"] + sorted(set("".join(CONSONANTS + VOWELS)))


class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model, padding_idx=0)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        encoding = torch.zeros(max_len, d_model)
        pos = torch.arange(0, max_len).float().unsqueeze(dim=1)
        _2i = torch.arange(0, d_model, step=2).float()
        encoding[:, 0::2] = torch.sin(pos / (10000 ** (_2i / d_model)))
        encoding[:, 1::2] = torch.cos(pos / (10000 ** (_2i / d_model)))
        self.register_buffer("encoding", encoding)

    def forward(self, x):
        return self.encoding[: x.size(1), :]


class TransformerEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, max_len, drop_prob):
        super().__init__()
        self.tok_emb = TokenEmbedding(vocab_size, d_model)
        self.pos_emb = PositionalEncoding(d_model, max_len)
        self.drop_out = nn.Dropout(p=drop_prob)

    def forward(self, x):
        return self.drop_out(self.tok_emb(x) + self.pos_emb(x))


class ScaleDotProductAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v, mask=None):
        d_tensor = k.size(-1)
        score = (q @ k.transpose(2, 3)) / math.sqrt(d_tensor)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        score = self.softmax(score)
        return score @ v, score


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.attention = ScaleDotProductAttention()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        out, _ = self.attention(q, k, v, mask=mask)
        return self.w_concat(self.concat(out))

    def split(self, tensor):
        batch_size, length, d_model = tensor.size()
        return tensor.view(batch_size, length, self.n_head, d_model // self.n_head).transpose(1, 2)

    def concat(self, tensor):
        batch_size, head, length, d_tensor = tensor.size()
        return tensor.transpose(1, 2).contiguous().view(batch_size, length, head * d_tensor)


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-12):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class PositionwiseFeedForward(nn.Sequential):
    def __init__(self, d_model, hidden, drop_prob=0.1):
        super().__init__(
            nn.Linear(d_model, hidden), nn.ReLU(), nn.Dropout(drop_prob), nn.Linear(hidden, d_model)
        )


class EncoderLayer(nn.Module):
    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_head)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.ffn = PositionwiseFeedForward(d_model, ffn_hidden, drop_prob)
        self.dropout = nn.Dropout(p=drop_prob)

    def forward(self, x, src_mask):
        x = self.norm1(x + self.dropout(self.attention(q=x, k=x, v=x, mask=src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, n_head)
        self.enc_dec_attention = MultiHeadAttention(d_model, n_head)
        self.norm1, self.norm2, self.norm3 = (
            LayerNorm(d_model),
            LayerNorm(d_model),
            LayerNorm(d_model),
        )
        self.ffn = PositionwiseFeedForward(d_model, ffn_hidden, drop_prob)
        self.dropout = nn.Dropout(p=drop_prob)

    def forward(self, dec, enc, trg_mask, src_mask):
        x = self.norm1(dec + self.dropout(self.self_attention(q=dec, k=dec, v=dec, mask=trg_mask)))
        x = self.norm2(x + self.dropout(self.enc_dec_attention(q=x, k=enc, v=enc, mask=src_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class Transformer(nn.Module):
    def __init__(
        self,
        enc_voc_size,
        dec_voc_size,
        max_len,
        d_model=64,
        n_head=4,
        ffn_hidden=128,
        n_layers=2,
        drop_prob=0.1,
    ):
        super().__init__()
        self.src_pad_idx, self.trg_pad_idx = SRC_PAD, TRG_PAD
        self.enc_emb = TransformerEmbedding(enc_voc_size, d_model, max_len, drop_prob)
        self.dec_emb = TransformerEmbedding(dec_voc_size, d_model, max_len, drop_prob)
        self.encoder = nn.ModuleList(
            [EncoderLayer(d_model, ffn_hidden, n_head, drop_prob) for _ in range(n_layers)]
        )
        self.decoder = nn.ModuleList(
            [DecoderLayer(d_model, ffn_hidden, n_head, drop_prob) for _ in range(n_layers)]
        )
        self.linear = nn.Linear(d_model, dec_voc_size)

    def make_src_mask(self, src):
        src_mask = (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 translit
        return src_mask

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.tril(torch.ones(trg_len, trg_len, dtype=torch.bool, device=trg.device))
        return trg_pad_mask & trg_sub_mask

    def encode(self, src, src_mask):
        enc = self.enc_emb(src)
        for layer in self.encoder:
            enc = layer(enc, src_mask)
        return enc

    def decode(self, trg, enc, src_mask):
        dec = self.dec_emb(trg)
        trg_mask = self.make_trg_mask(trg)
        for layer in self.decoder:
            dec = layer(dec, enc, trg_mask, src_mask)
        return self.linear(dec)

    def forward(self, src, trg):
        src_mask = self.make_src_mask(src)
        return self.decode(trg, self.encode(src, src_mask), src_mask)


def sample_pairs(n, gen):
    syllables = [(c, v) for c in CONSONANTS for v in VOWELS]
    pairs = []
    for _ in range(n):
        k = int(torch.randint(1, 4, (1,), generator=gen))
        word = [int(i) for i in torch.randint(len(syllables), (k,), generator=gen)]
        latin = "".join(c + v for c, v in (syllables[i] for i in word))
        pairs.append(([i + 1 for i in word], [LATIN.index(ch) for ch in latin]))
    return pairs


def collate(pairs, max_len):
    src = torch.full((len(pairs), max_len), SRC_PAD, dtype=torch.long)
    trg = torch.full((len(pairs), max_len), TRG_PAD, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        trg[i, : len(t) + 2] = torch.tensor([TRG_SOS, *t, TRG_EOS])
    return src, trg


@torch.no_grad()
def greedy_decode(model, src, max_len):
    src_mask = model.make_src_mask(src)
    enc = model.encode(src, src_mask)
    trg = torch.full((src.shape[0], max_len), TRG_PAD, dtype=torch.long)
    trg[:, 0] = TRG_SOS
    for step in range(1, max_len):
        trg[:, step] = model.decode(trg, enc, src_mask)[:, step - 1].argmax(-1)
    return trg


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    max_len = 14
    src, trg = collate(sample_pairs(1536, gen), max_len)
    test_src, test_trg = collate(sample_pairs(128, gen), max_len)
    model = Transformer(len(CONSONANTS) * len(VOWELS) + 1, len(LATIN), max_len)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss(ignore_index=TRG_PAD)
    for epoch in range(10):
        for start in range(0, 1536, 64):
            s, t = src[start : start + 64], trg[start : start + 64]
            output = model(s, t)[:, :-1]
            loss = criterion(output.reshape(-1, output.shape[-1]), t[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    pred = greedy_decode(model, test_src, max_len)
    real = test_trg != TRG_PAD
    eos_after = (torch.cumsum(test_trg == TRG_EOS, 1) - (test_trg == TRG_EOS).long()) > 0
    exact = ((pred == test_trg) | ~real | eos_after).all(1).float().mean().item()
    print(f"word accuracy {exact:.3f}")
