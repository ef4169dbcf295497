"""Extractive summarization with BertSumExt (PreSumm).

Layout of nlpyang/PreSumm (Liu & Lapata, EMNLP 2019): the data loader's Batch with clss padded
by -1, mask_src and mask_cls, interval segment ids, a small BERT (Bert wrapper over BertModel),
ExtSummarizer gathering the [CLS] vectors, ExtTransformerEncoder with PreSumm's
TransformerEncoderLayer(iter, query, inputs, mask), MultiHeadedAttention and
PositionwiseFeedForward from neural.py, the masked BCE loss and top-3 sentence selection, on a
CNN/DailyMail-like synthetic corpus with greedy oracle labels.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter row), huggingface/transformers#32195, seed self_attention_mask_guide.txt §7 Q5
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ff):
        super().__init__()
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ff = nn.Sequential(nn.Linear(hidden, ff), nn.GELU(), nn.Linear(ff, hidden))
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, extended_attention_mask):
        h = self.attn(x, x, x, attn_mask=extended_attention_mask, need_weights=False)[0]
        x = self.ln1(x + h)
        return self.ln2(x + self.ff(x))


class Bert(nn.Module):
    def __init__(self, vocab_size, hidden=64, layers=2, heads=4, max_pos=512):
        super().__init__()
        self.heads = heads
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, 4 * hidden) for _ in range(layers)])

    def forward(self, x, segs, mask):
        positions = torch.arange(x.size(1), device=x.device)[None, :]
        h = self.word_embeddings(x) + self.position_embeddings(positions) + self.token_type_embeddings(segs)
        h = self.LayerNorm(h)
        extended_attention_mask = (1.0 - mask[:, None, None, :].float()) * -10000.0
        extended_attention_mask = extended_attention_mask.expand(-1, self.heads, x.size(1), -1)
        extended_attention_mask = extended_attention_mask.reshape(-1, x.size(1), x.size(1))
        for layer in self.layers:
            h = layer(h, extended_attention_mask)
        return h


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, dropout=0.1):
        super().__init__()
        self.dim_per_head = model_dim // head_count
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.linear_values = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.linear_query = nn.Linear(model_dim, head_count * self.dim_per_head)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask=None):
        batch_size = key.size(0)
        dim_per_head, head_count = self.dim_per_head, self.head_count

        def shape(x):
            return x.view(batch_size, -1, head_count, dim_per_head).transpose(1, 2)

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(batch_size, -1, head_count * dim_per_head)

        key = shape(self.linear_keys(key))
        value = shape(self.linear_values(value))
        query = shape(self.linear_query(query)) / math.sqrt(dim_per_head)
        scores = torch.matmul(query, key.transpose(2, 3))
        if mask is not None:
            mask = mask.unsqueeze(1).expand_as(scores)
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        drop_attn = self.dropout(self.softmax(scores))
        return self.final_linear(unshape(torch.matmul(drop_attn, value)))


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout_1 = nn.Dropout(dropout)
        self.dropout_2 = nn.Dropout(dropout)

    def forward(self, x):
        inter = self.dropout_1(gelu(self.w_1(self.layer_norm(x))))
        return self.dropout_2(self.w_2(inter)) + x


class PositionalEncoding(nn.Module):
    def __init__(self, dropout, dim, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim)))
        pe[:, 0::2] = torch.sin(position.float() * div_term)
        pe[:, 1::2] = torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p=dropout)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, iter, query, inputs, mask):
        input_norm = self.layer_norm(inputs) if iter != 0 else inputs
        mask = mask.unsqueeze(1)
        context = self.self_attn(input_norm, input_norm, input_norm, mask=mask)
        return self.feed_forward(self.dropout(context) + inputs)


class ExtTransformerEncoder(nn.Module):
    def __init__(self, d_model, d_ff, heads, dropout, num_inter_layers=2):
        super().__init__()
        self.num_inter_layers = num_inter_layers
        self.pos_emb = PositionalEncoding(dropout, d_model)
        self.transformer_inter = nn.ModuleList(
            [TransformerEncoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_inter_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.wo = nn.Linear(d_model, 1, bias=True)
        self.sigmoid = nn.Sigmoid()

    def forward(self, top_vecs, mask):
        n_sents = top_vecs.size(1)
        pos_emb = self.pos_emb.pe[:, :n_sents]
        x = top_vecs * mask[:, :, None].float()
        x = x + pos_emb
        for i in range(self.num_inter_layers):
            x = self.transformer_inter[i](i, x, x, ~mask)
        x = self.layer_norm(x)
        sent_scores = self.sigmoid(self.wo(x))
        return sent_scores.squeeze(-1) * mask.float()


class ExtSummarizer(nn.Module):
    def __init__(self, vocab_size, hidden=64):
        super().__init__()
        self.bert = Bert(vocab_size, hidden)
        self.ext_layer = ExtTransformerEncoder(hidden, 4 * hidden, 4, 0.1, 2)

    def forward(self, src, segs, clss, mask_src, mask_cls):
        top_vec = self.bert(src, segs, mask_src)
        sents_vec = top_vec[torch.arange(top_vec.size(0)).unsqueeze(1), clss]
        sents_vec = sents_vec * mask_cls[:, :, None].float()
        sent_scores = self.ext_layer(sents_vec, mask_cls).squeeze(-1)
        return sent_scores, mask_cls


class Batch:
    def _pad(self, data, pad_id, width=-1):
        if width == -1:
            width = max(len(d) for d in data)
        return [d + [pad_id] * (width - len(d)) for d in data]

    def __init__(self, data):
        self.src = torch.tensor(self._pad([x[0] for x in data], 0))
        self.segs = torch.tensor(self._pad([x[1] for x in data], 0))
        self.mask_src = ~(self.src == 0)
        clss = torch.tensor(self._pad([x[2] for x in data], -1))
        self.src_sent_labels = torch.tensor(self._pad([x[3] for x in data], 0))
        self.mask_cls = ~(clss == -1)
        clss[clss == -1] = 0
        self.clss = clss


def make_document(rng, cls_id=1, sep_id=2, vocab_size=200, salient=range(3, 8)):
    n_sents = rng.randint(3, 9)
    src, segs, clss, labels = [], [], [], []
    for s in range(n_sents):
        sent = [rng.randrange(23, vocab_size) for _ in range(rng.randint(4, 10))]
        label = int(rng.random() < 0.35)
        if label:
            sent[rng.randrange(len(sent))] = rng.choice(salient)
        clss.append(len(src))
        src += [cls_id] + sent + [sep_id]
        segs += [s % 2] * (len(sent) + 2)
        labels.append(label)
    return src, segs, clss, labels


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    model = ExtSummarizer(vocab_size=200)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    bce = nn.BCELoss(reduction="none")
    for step in range(400):
        model.train()
        batch = Batch([make_document(rng) for _ in range(32)])
        sent_scores, mask = model(batch.src, batch.segs, batch.clss, batch.mask_src, batch.mask_cls)
        loss = bce(sent_scores, batch.src_sent_labels.float())
        loss = (loss * mask.float()).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} bce {loss.item():.4f}")
    model.eval()
    hits, picked = 0, 0
    with torch.no_grad():
        batch = Batch([make_document(rng) for _ in range(200)])
        sent_scores, mask = model(batch.src, batch.segs, batch.clss, batch.mask_src, batch.mask_cls)
        sent_scores = sent_scores + mask.float()
        selected_ids = torch.argsort(-sent_scores, 1)[:, :3]
        for i in range(200):
            for j in selected_ids[i].tolist():
                if j < int(mask[i].sum()):
                    hits += int(batch.src_sent_labels[i, j])
                    picked += 1
    print(f"oracle precision of the top-3 selection {hits / picked:.3f}")
