"""TaBERT-style content-snapshot encoder with vertical self-attention (WikiTableQuestions).

Every row of a table's content snapshot is linearised after the utterance as
``[CLS] utterance [SEP] col | type | value [SEP] ...`` and encoded on its own; cell
vectors are pooled from their value tokens, then vertical self-attention layers mix
the utterance tokens and cell vectors that sit at the same position in different rows.
Utterance and column encodings are mean-pooled over the real rows and fed to a column
selection head of a semantic parser.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575,
huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19, §2.3)
"""
import argparse
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

config = SimpleNamespace(vocab_size=512, hidden_size=64, num_attention_heads=4,
                         num_row_layers=2, num_vertical_layers=2, sample_row_num=3,
                         max_sequence_len=40, hidden_dropout_prob=0.1)

PAD_ID, CLS_ID, SEP_ID, BAR_ID = 0, 1, 2, 3
TYPE_IDS = {"text": 4, "real": 5}


def word_id(word):
    return 8 + sum(map(ord, word.lower())) % (config.vocab_size - 8)


def encode_snapshot(examples, sample_row_num=config.sample_row_num, max_len=config.max_sequence_len):
    batch_size = len(examples)
    max_utt = max(len(ex["utterance"].split()) for ex in examples)
    max_cols = max(len(ex["header"]) for ex in examples)
    input_ids = torch.full((batch_size, sample_row_num, max_len), PAD_ID, dtype=torch.long)
    cell_span = torch.zeros(batch_size, sample_row_num, max_cols, max_len, dtype=torch.bool)
    row_mask = torch.zeros(batch_size, sample_row_num, dtype=torch.bool)
    utterance_mask = torch.zeros(batch_size, max_utt, dtype=torch.bool)
    column_mask = torch.zeros(batch_size, max_cols, dtype=torch.bool)
    for b, ex in enumerate(examples):
        utt = [word_id(w) for w in ex["utterance"].split()]
        utterance_mask[b, :len(utt)] = True
        column_mask[b, :len(ex["header"])] = True
        for r, row in enumerate(ex["rows"][:sample_row_num]):
            ids = [CLS_ID] + utt + [SEP_ID]
            for c, ((name, col_type), value) in enumerate(zip(ex["header"], row)):
                ids += [word_id(t) for t in name.split()] + [BAR_ID, TYPE_IDS[col_type], BAR_ID]
                start = len(ids)
                ids += [word_id(t) for t in str(value).split()]
                cell_span[b, r, c, start:min(len(ids), max_len)] = True
                ids.append(SEP_ID)
            ids = ids[:max_len]
            input_ids[b, r, :len(ids)] = torch.tensor(ids)
            row_mask[b, r] = True
    return dict(input_ids=input_ids, cell_span=cell_span, row_mask=row_mask,
                utterance_mask=utterance_mask, column_mask=column_mask, max_utt=max_utt)


class RowEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))
        self.ln2 = nn.LayerNorm(cfg.hidden_size)

    def forward(self, x, token_keep):
        n, length, dim = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=token_keep[:, None, None, :])
        x = self.ln1(x + self.out(ctx.transpose(1, 2).reshape(n, length, dim)))
        return self.ln2(x + self.ffn(x))


class VerticalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_size = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size)

    def transpose_for_scores(self, x):
        batch_size, seq_len, row_num, _ = x.shape
        return x.view(batch_size, seq_len, row_num, self.num_heads, self.head_size).transpose(2, 3)

    def forward(self, hidden_states, row_mask):
        h = hidden_states.transpose(1, 2)
        q = self.transpose_for_scores(self.query(h))
        k = self.transpose_for_scores(self.key(h))
        v = self.transpose_for_scores(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        scores = scores.masked_fill(~row_mask[:, None, None, None, :], -1e9)  # expect: MC501 literal
        probs = self.dropout(scores.softmax(dim=-1))
        ctx = torch.matmul(probs, v).transpose(2, 3).flatten(-2).transpose(1, 2)
        return self.layer_norm(hidden_states + self.dropout(self.dense(ctx)))


class VerticalAttentionTableBert(nn.Module):
    def __init__(self, cfg=config):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(cfg.max_sequence_len, cfg.hidden_size)
        self.row_layers = nn.ModuleList(RowEncoderLayer(cfg) for _ in range(cfg.num_row_layers))
        self.vertical_layers = nn.ModuleList(VerticalSelfAttention(cfg) for _ in range(cfg.num_vertical_layers))
        self.column_scorer = nn.Bilinear(cfg.hidden_size, cfg.hidden_size, 1)

    def forward(self, input_ids, cell_span, row_mask, utterance_mask, column_mask, max_utt):
        batch_size, row_num, seq_len = input_ids.shape
        flat_ids = input_ids.view(-1, seq_len)
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.word_embeddings(flat_ids) + self.position_embeddings(positions)
        token_keep = flat_ids != PAD_ID
        for layer in self.row_layers:
            x = layer(x, token_keep)
        x = x.view(batch_size, row_num, seq_len, -1)
        span = cell_span.to(x.dtype)
        cells = torch.einsum("brcl,brld->brcd", span, x) / span.sum(-1, keepdim=True).clamp(min=1)
        utterance = x[:, :, 1:1 + max_utt]
        hidden = torch.cat([utterance, cells], dim=2)
        for layer in self.vertical_layers:
            hidden = layer(hidden, row_mask)
        weights = row_mask.to(hidden.dtype)[:, :, None, None]
        pooled = (hidden * weights).sum(1) / weights.sum(1)
        utt_enc, col_enc = pooled[:, :max_utt], pooled[:, max_utt:]
        utt_w = utterance_mask.to(utt_enc.dtype).unsqueeze(-1)
        question = (utt_enc * utt_w).sum(1) / utt_w.sum(1)
        logits = self.column_scorer(question.unsqueeze(1).expand_as(col_enc).contiguous(), col_enc).squeeze(-1)
        return logits.masked_fill(~column_mask, torch.finfo(logits.dtype).min)


EXAMPLES = [
    dict(utterance="which nation won the most gold medals",
         header=[("nation", "text"), ("gold", "real"), ("silver", "real")],
         rows=[["norway", 14, 14], ["germany", 14, 10], ["canada", 11, 8]],
         answer_column=1),
    dict(utterance="who directed the film released in 1994",
         header=[("title", "text"), ("year", "real"), ("director", "text"), ("studio", "text")],
         rows=[["pulp fiction", 1994, "quentin tarantino", "miramax"], ["heat", 1995, "michael mann", "warner"]],
         answer_column=2),
]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = VerticalAttentionTableBert()
    batch = encode_snapshot(EXAMPLES)
    target = torch.tensor([ex["answer_column"] for ex in EXAMPLES])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = F.cross_entropy(model(**batch), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    if args.fp16:
        model.half()
    with torch.no_grad():
        logits = model(**batch)
    print("predicted columns", logits.argmax(-1).tolist(), logits.dtype)
