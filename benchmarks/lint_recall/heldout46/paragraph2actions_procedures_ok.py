"""Experimental procedures to synthesis actions for automated labs, after Paragraph2Actions.

Imitates rxn4chemistry/paragraph2actions (Vaucher et al., Nature Communications 2020), whose
translation model is an OpenNMT-py transformer, in OpenNMT-py's layout: `sequence_mask`,
`PositionalEncoding` and `Embeddings`, `MultiHeadedAttention(head_count, model_dim)` with its
`shape` / `unshape` closures and the `layer_cache` of keys and values,
`PositionwiseFeedForward`, pre-norm `TransformerEncoderLayer` / `TransformerDecoderLayer`
with the future mask, `TransformerEncoder` / `TransformerDecoder` with `init_state` and
`_init_cache`, `NMTModel`, a `LogSoftmax` generator, a greedy `translate_batch` on the cache,
`-model_dtype fp16` on a GPU; the action grammar (MAKESOLUTION, ADD, STIR, ...) is the paper's.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md
section 3 item 18); conventions.md section 2.3.
"""

import argparse
import itertools
import math
import random

import torch
import torch.nn as nn

CHEMICALS = ["NaH", "K2CO3", "benzyl bromide", "the amine", "Et3N", "acetyl chloride", "LiAlH4", "the ester"]
SOLVENTS = ["DMF", "THF", "DCM", "MeOH"]
TEMPS, HOURS = ["rt", "0 °C", "80 °C"], ["1", "2", "4", "12"]


def sequence_mask(lengths, max_len=None):
    return torch.arange(0, max_len or lengths.max(), device=lengths.device).type_as(lengths).repeat(lengths.numel(), 1).lt(lengths.unsqueeze(1))


class PositionalEncoding(nn.Module):
    def __init__(self, dropout, dim, max_len=256):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim)))
        pe[:, 0::2] = torch.sin(position.float() * div_term)
        pe[:, 1::2] = torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(1))
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim

    def forward(self, emb, step=None):
        emb = emb * math.sqrt(self.dim) + (self.pe[: emb.size(0)] if step is None else self.pe[step])
        return self.dropout(emb)


class Embeddings(nn.Module):
    def __init__(self, word_vec_size, word_vocab_size, word_padding_idx, dropout=0.1):
        super().__init__()
        self.word_padding_idx = word_padding_idx
        self.make_embedding = nn.Embedding(word_vocab_size, word_vec_size, padding_idx=word_padding_idx)
        self.pe = PositionalEncoding(dropout, word_vec_size)

    def forward(self, source, step=None):
        return self.pe(self.make_embedding(source.squeeze(-1)), step=step)


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, dropout=0.1):
        super().__init__()
        self.dim_per_head = model_dim // head_count
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, model_dim)
        self.linear_values = nn.Linear(model_dim, model_dim)
        self.linear_query = nn.Linear(model_dim, model_dim)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask=None, layer_cache=None, attn_type=None):
        batch_size = key.size(0)
        dim_per_head = self.dim_per_head
        head_count = self.head_count

        def shape(x):
            return x.view(batch_size, -1, head_count, dim_per_head).transpose(1, 2)

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(batch_size, -1, head_count * dim_per_head)

        if layer_cache is not None and attn_type == "self":
            query, key, value = self.linear_query(query), self.linear_keys(query), self.linear_values(query)
            key, value = shape(key), shape(value)
            if layer_cache["self_keys"] is not None:
                key = torch.cat((layer_cache["self_keys"], key), dim=2)
                value = torch.cat((layer_cache["self_values"], value), dim=2)
            layer_cache["self_keys"], layer_cache["self_values"] = key, value
        elif layer_cache is not None and attn_type == "context":
            query = self.linear_query(query)
            if layer_cache["memory_keys"] is None:
                key, value = shape(self.linear_keys(key)), shape(self.linear_values(value))
                layer_cache["memory_keys"], layer_cache["memory_values"] = key, value
            else:
                key, value = layer_cache["memory_keys"], layer_cache["memory_values"]
        else:
            key, value, query = shape(self.linear_keys(key)), shape(self.linear_values(value)), self.linear_query(query)

        query = shape(query) / math.sqrt(dim_per_head)
        scores = torch.matmul(query, key.transpose(2, 3))
        if mask is not None:
            mask = mask.unsqueeze(1)
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        attn = self.softmax(scores).to(query.dtype)
        context = unshape(torch.matmul(self.dropout(attn), value))
        return self.final_linear(context), attn.view(batch_size, head_count, -1, key.size(2))[:, 0]


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.w_2(self.dropout(torch.relu(self.w_1(self.layer_norm(x)))))) + x


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inputs, mask):
        input_norm = self.layer_norm(inputs)
        context, _ = self.self_attn(input_norm, input_norm, input_norm, mask=mask, attn_type="self")
        return self.feed_forward(self.dropout(context) + inputs)


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, d_ff, dropout, embeddings):
        super().__init__()
        self.embeddings = embeddings
        self.transformer = nn.ModuleList([TransformerEncoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, src, lengths):
        emb = self.embeddings(src)
        out = emb.transpose(0, 1).contiguous()
        mask = ~sequence_mask(lengths).unsqueeze(1)
        for layer in self.transformer:
            out = layer(out, mask)
        return emb, self.layer_norm(out).transpose(0, 1).contiguous(), lengths


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout)
        self.context_attn = MultiHeadedAttention(heads, d_model, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm_1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layer_norm_2 = nn.LayerNorm(d_model, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, inputs, memory_bank, src_pad_mask, tgt_pad_mask, layer_cache=None, step=None):
        dec_mask = None
        if step is None:
            tgt_len = tgt_pad_mask.size(-1)
            future_mask = torch.ones([tgt_len, tgt_len], device=tgt_pad_mask.device, dtype=torch.bool).triu_(1).view(1, tgt_len, tgt_len)
            dec_mask = tgt_pad_mask | future_mask
        input_norm = self.layer_norm_1(inputs)
        query, _ = self.self_attn(input_norm, input_norm, input_norm, mask=dec_mask, layer_cache=layer_cache, attn_type="self")
        query = self.drop(query) + inputs
        query_norm = self.layer_norm_2(query)
        mid, attns = self.context_attn(memory_bank, memory_bank, query_norm, mask=src_pad_mask, layer_cache=layer_cache,
                                       attn_type="context")
        return self.feed_forward(self.drop(mid) + query), attns


class TransformerDecoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, d_ff, dropout, embeddings):
        super().__init__()
        self.embeddings = embeddings
        self.transformer_layers = nn.ModuleList([TransformerDecoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.state = {}

    def init_state(self, src, memory_bank, enc_hidden):
        self.state = {"src": src, "cache": None}

    def _init_cache(self, memory_bank):
        self.state["cache"] = {f"layer_{i}": {"memory_keys": None, "memory_values": None, "self_keys": None,
                                              "self_values": None} for i in range(len(self.transformer_layers))}

    def forward(self, tgt, memory_bank, step=None, memory_lengths=None):
        if step == 0:
            self._init_cache(memory_bank)
        emb = self.embeddings(tgt, step=step)
        output = emb.transpose(0, 1).contiguous()
        src_memory_bank = memory_bank.transpose(0, 1).contiguous()
        src_pad_mask = ~sequence_mask(memory_lengths, src_memory_bank.size(1)).unsqueeze(1)
        tgt_pad_mask = tgt[:, :, 0].transpose(0, 1).eq(self.embeddings.word_padding_idx).unsqueeze(1)
        for i, layer in enumerate(self.transformer_layers):
            layer_cache = self.state["cache"][f"layer_{i}"] if step is not None else None
            output, attn = layer(output, src_memory_bank, src_pad_mask, tgt_pad_mask, layer_cache=layer_cache, step=step)
        return self.layer_norm(output).transpose(0, 1).contiguous(), {"std": attn.transpose(0, 1)}


class NMTModel(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, src, tgt, lengths):
        enc_state, memory_bank, lengths = self.encoder(src, lengths)
        self.decoder.init_state(src, memory_bank, enc_state)
        return self.decoder(tgt[:-1], memory_bank, memory_lengths=lengths)


def build_model(opt, src_vocab, tgt_vocab):
    enc_emb = Embeddings(opt.word_vec_size, len(src_vocab), 0, opt.dropout)
    dec_emb = Embeddings(opt.word_vec_size, len(tgt_vocab), 0, opt.dropout)
    encoder = TransformerEncoder(opt.layers, opt.word_vec_size, opt.heads, opt.transformer_ff, opt.dropout, enc_emb)
    decoder = TransformerDecoder(opt.layers, opt.word_vec_size, opt.heads, opt.transformer_ff, opt.dropout, dec_emb)
    model = NMTModel(encoder, decoder)
    model.generator = nn.Sequential(nn.Linear(opt.word_vec_size, len(tgt_vocab)), nn.LogSoftmax(dim=-1))
    if opt.model_dtype == "fp16" and opt.gpu >= 0:
        model.half()
    return model


def make_procedure(rng):
    a, b = rng.sample(CHEMICALS, 2)
    s, t, h = rng.choice(SOLVENTS), rng.choice(TEMPS), rng.choice(HOURS)
    src = f"To a solution of {a} in {s} was added {b} . The mixture was stirred at {t} for {h} h ."
    tgt = f"MAKESOLUTION with {a} and {s} ; ADD SLN ; ADD {b} ; STIR for {h} h at {t} ;"
    if rng.random() < 0.5:
        src += " The precipitate was filtered off and the filtrate was concentrated ."
        tgt += " FILTER keep filtrate ; CONCENTRATE ;"
    return src.split(), tgt.split()


def to_batch(pairs, src_vocab, tgt_vocab):
    srcs = [[src_vocab.setdefault(w, len(src_vocab)) for w in s] for s, _ in pairs]
    tgts = [[1] + [tgt_vocab.setdefault(w, len(tgt_vocab)) for w in t] + [2] for _, t in pairs]
    src = torch.zeros(max(map(len, srcs)), len(pairs), 1, dtype=torch.long)
    tgt = torch.zeros(max(map(len, tgts)), len(pairs), 1, dtype=torch.long)
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        src[:len(s), i, 0] = torch.tensor(s)
        tgt[:len(t), i, 0] = torch.tensor(t)
    return src, tgt, torch.tensor([len(s) for s in srcs])


def translate_batch(model, src, lengths, max_length=40):
    enc_state, memory_bank, lengths = model.encoder(src, lengths)
    model.decoder.init_state(src, memory_bank, enc_state)
    decoder_input = torch.full((1, src.size(1), 1), 1, dtype=torch.long)
    outputs = []
    for step in range(max_length):
        dec_out, _ = model.decoder(decoder_input, memory_bank, memory_lengths=lengths, step=step)
        decoder_input = model.generator(dec_out.squeeze(0)).argmax(-1).view(1, -1, 1)
        outputs.append(decoder_input[0, :, 0])
    return torch.stack(outputs, dim=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name, kind, default in (("-layers", int, 2), ("-word_vec_size", int, 64), ("-heads", int, 4),
                                ("-transformer_ff", int, 128), ("-dropout", float, 0.1)):
        parser.add_argument(name, type=kind, default=default)
    parser.add_argument("-model_dtype", default="fp32", choices=["fp32", "fp16"])
    parser.add_argument("-gpu", type=int, default=-1)
    opt = parser.parse_args()
    rng = random.Random(0)
    torch.manual_seed(0)
    src_vocab, tgt_vocab = {"<blank>": 0}, {"<blank>": 0, "<s>": 1, "</s>": 2}
    train = [make_procedure(rng) for _ in range(384)]
    test = [make_procedure(rng) for _ in range(64)]
    to_batch(train + test, src_vocab, tgt_vocab)
    model = build_model(opt, src_vocab, tgt_vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.998))
    criterion = nn.NLLLoss(ignore_index=0, reduction="sum")
    for epoch in range(6):
        model.train()
        rng.shuffle(train)
        for start in range(0, len(train), 32):
            src, tgt, lengths = to_batch(train[start:start + 32], src_vocab, tgt_vocab)
            dec_out, attns = model(src, tgt, lengths)
            loss = criterion(model.generator(dec_out.view(-1, dec_out.size(2))), tgt[1:].view(-1))
            optimizer.zero_grad()
            (loss / (tgt[1:] != 0).sum()).backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: loss/token {(loss / (tgt[1:] != 0).sum()).item():.3f}")
    model.eval()
    inv = {i: w for w, i in tgt_vocab.items()}
    src, tgt, lengths = to_batch(test, src_vocab, tgt_vocab)
    with torch.no_grad():
        pred = translate_batch(model, src, lengths)
    hyps = [[inv[i] for i in itertools.takewhile(lambda i: i != 2, row)] for row in pred.tolist()]
    print(f"full-sequence accuracy {sum(h == ref for h, (_, ref) in zip(hyps, test)) / len(test):.3f}")
    print(" ".join(test[0][0]), "->", " ".join(hyps[0]))
