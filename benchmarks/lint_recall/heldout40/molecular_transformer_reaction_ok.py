"""Molecular Transformer style forward reaction prediction (reactants SMILES to product SMILES).

Reactant and product strings are split with Schwaller's SMILES regex (``smi_tokenizer``) and
translated by an OpenNMT-py style encoder-decoder, as pschwllr/MolecularTransformer does on top of
OpenNMT-py: ``Embeddings`` with ``PositionalEncoding``, ``MultiHeadedAttention`` (``shape`` /
``unshape``), ``TransformerEncoderLayer``, ``TransformerDecoderLayer`` combining the target
padding with the future mask, ``NMTModel`` and greedy ``translate``; top-1 accuracy is exact match
of the canonical product string.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), pytorch/pytorch#103749
(conventions.md §3 item 5), conventions.md §2.3
"""

import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

SMI_REGEX_PATTERN = (
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|"
    r"\%[0-9]{2}|[0-9])"
)
PAD, BOS, EOS = "<blank>", "<s>", "</s>"


def smi_tokenizer(smi):
    regex = re.compile(SMI_REGEX_PATTERN)
    tokens = regex.findall(smi)
    assert smi == "".join(tokens)
    return tokens


class Vocab:
    def __init__(self, corpus):
        self.itos = [PAD, BOS, EOS] + sorted({t for s in corpus for t in smi_tokenizer(s)})
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def encode(self, smi, length):
        ids = [self.stoi[BOS]] + [self.stoi[t] for t in smi_tokenizer(smi)] + [self.stoi[EOS]]
        return ids + [self.stoi[PAD]] * (length - len(ids))

    def decode(self, ids):
        out = []
        for i in ids:
            if i == self.stoi[EOS]:
                break
            if i not in (self.stoi[PAD], self.stoi[BOS]):
                out.append(self.itos[i])
        return "".join(out)


class PositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=128):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim)
        )
        pe[:, 0::2] = torch.sin(position.float() * div_term)
        pe[:, 1::2] = torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dim = dim

    def forward(self, emb):
        return emb * math.sqrt(self.dim) + self.pe[:, : emb.size(1)]


class Embeddings(nn.Module):
    def __init__(self, word_vec_size, word_vocab_size, word_padding_idx):
        super().__init__()
        self.word_padding_idx = word_padding_idx
        self.make_embedding = nn.Embedding(
            word_vocab_size, word_vec_size, padding_idx=word_padding_idx
        )
        self.pe = PositionalEncoding(word_vec_size)

    def forward(self, source):
        return self.pe(self.make_embedding(source))


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim):
        super().__init__()
        self.dim_per_head = model_dim // head_count
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, model_dim)
        self.linear_values = nn.Linear(model_dim, model_dim)
        self.linear_query = nn.Linear(model_dim, model_dim)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask=None):
        batch_size = key.size(0)

        def shape(x):
            return x.view(batch_size, -1, self.head_count, self.dim_per_head).transpose(1, 2)

        def unshape(x):
            return (
                x.transpose(1, 2)
                .contiguous()
                .view(batch_size, -1, self.head_count * self.dim_per_head)
            )

        key = shape(self.linear_keys(key))
        value = shape(self.linear_values(value))
        query = shape(self.linear_query(query)) / math.sqrt(self.dim_per_head)
        scores = torch.matmul(query, key.transpose(2, 3))
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        return self.final_linear(unshape(torch.matmul(attn, value)))


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, x):
        return x + self.w_2(F.relu(self.w_1(self.layer_norm(x))))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, inputs, mask):
        input_norm = self.layer_norm(inputs)
        context = self.self_attn(input_norm, input_norm, input_norm, mask=mask)
        return self.feed_forward(context + inputs)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model)
        self.context_attn = MultiHeadedAttention(heads, d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.layer_norm_1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layer_norm_2 = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, inputs, memory_bank, src_pad_mask, tgt_pad_mask):
        tgt_len = tgt_pad_mask.size(-1)
        future_mask = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=inputs.device), diagonal=1)
        dec_mask = tgt_pad_mask | future_mask.unsqueeze(0)
        input_norm = self.layer_norm_1(inputs)
        query = self.self_attn(input_norm, input_norm, input_norm, mask=dec_mask) + inputs
        query_norm = self.layer_norm_2(query)
        mid = self.context_attn(memory_bank, memory_bank, query_norm, mask=src_pad_mask)
        return self.feed_forward(mid + query)


class NMTModel(nn.Module):
    def __init__(self, vocab_size, padding_idx, d_model=64, heads=4, d_ff=128, layers=2):
        super().__init__()
        self.padding_idx = padding_idx
        self.embeddings = Embeddings(d_model, vocab_size, padding_idx)
        self.encoder = nn.ModuleList(
            [TransformerEncoderLayer(d_model, heads, d_ff) for _ in range(layers)]
        )
        self.decoder = nn.ModuleList(
            [TransformerDecoderLayer(d_model, heads, d_ff) for _ in range(layers)]
        )
        self.enc_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dec_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.generator = nn.Linear(d_model, vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src):
        src_pad_mask = src.data.eq(self.padding_idx).unsqueeze(1)
        out = self.embeddings(src)
        for layer in self.encoder:
            out = layer(out, src_pad_mask)
        return self.enc_norm(out), src_pad_mask

    def decode(self, tgt, memory_bank, src_pad_mask):
        tgt_pad_mask = tgt.data.eq(self.padding_idx).unsqueeze(1)
        out = self.embeddings(tgt)
        for layer in self.decoder:
            out = layer(out, memory_bank, src_pad_mask, tgt_pad_mask)
        return self.generator(self.dec_norm(out))

    def forward(self, src, tgt):
        memory_bank, src_pad_mask = self.encode(src)
        return self.decode(tgt[:, :-1], memory_bank, src_pad_mask)


@torch.no_grad()
def translate(model, vocab, src, max_length=40):
    memory_bank, src_pad_mask = model.encode(src)
    tgt = torch.full((src.size(0), 1), vocab.stoi[BOS], dtype=torch.long)
    for _ in range(max_length):
        logits = model.decode(tgt, memory_bank, src_pad_mask)
        tgt = torch.cat([tgt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return [vocab.decode(row.tolist()) for row in tgt]


def amide_couplings(n, gen):
    acids = ["CC", "c1ccccc1", "CCC", "CC(C)", "COc1ccccc1", "C1CC1", "CCCl", "c1ccncc1"]
    amines = ["N", "NC", "NCC", "N(C)C", "NCc1ccccc1", "N1CCOCC1", "NC(C)C", "N1CCCC1"]
    pairs = []
    for _ in range(n):
        a = acids[int(torch.randint(len(acids), (1,), generator=gen))]
        b = amines[int(torch.randint(len(amines), (1,), generator=gen))]
        pairs.append((f"{a}C(=O)Cl.{b}", f"{a}C(=O){b}"))
    return pairs


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = amide_couplings(600, gen)
    vocab = Vocab([s for pair in data for s in pair])
    length = 2 + max(len(smi_tokenizer(s)) for pair in data for s in pair)
    src = torch.tensor([vocab.encode(r, length) for r, _ in data])
    tgt = torch.tensor([vocab.encode(p, length) for _, p in data])
    model = NMTModel(len(vocab.itos), vocab.stoi[PAD])
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.998))
    for epoch in range(16):
        for start in range(0, 500, 50):
            logits = model(src[start : start + 50], tgt[start : start + 50])
            gold = tgt[start : start + 50, 1:]
            loss = F.cross_entropy(logits.transpose(1, 2), gold, ignore_index=vocab.stoi[PAD])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    preds = translate(model, vocab, src[500:], max_length=length)
    top1 = sum(p == product for p, (_, product) in zip(preds, data[500:])) / len(preds)
    print(f"top-1 accuracy {top1:.2f}")
