"""Splice-site tagging of pre-mRNA windows with a local-attention BERT.

A SpliceBERT-like encoder reads single-nucleotide tokens of a transcript window
and tags every position as neither, acceptor or donor. Each nucleotide attends
only to a band of neighbours (``attention_window`` on either side); windows at
the end of a gene are shorter and padded. Evaluation reports SpliceAI's top-k
accuracy per site type.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 items 15 and 16); conventions.md §2.3, §5 item 4
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "N", "A", "C", "G", "T"]
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
CONFIG = {
    "vocab_size": len(VOCAB), "hidden_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2,
    "intermediate_size": 96, "attention_window": 6, "max_position_embeddings": 128,
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "num_labels": 3,
}


def encode_windows(windows):
    ids = [[TOKEN_ID["[CLS]"]] + [TOKEN_ID.get(c, TOKEN_ID["N"]) for c in w] + [TOKEN_ID["[SEP]"]] for w in windows]
    width = max(map(len, ids))
    input_ids = torch.tensor([r + [0] * (width - len(r)) for r in ids])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config["num_attention_heads"]
        self.head_size = config["hidden_size"] // self.num_heads
        self.qkv = nn.Linear(config["hidden_size"], 3 * config["hidden_size"])
        self.dropout = nn.Dropout(config["attention_probs_dropout_prob"])

    def forward(self, hidden_states, attention_mask, output_attentions=False):
        b, n, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        scores = scores + attention_mask
        probs = F.softmax(scores, dim=-1)
        context = torch.matmul(self.dropout(probs), v).transpose(1, 2).reshape(b, n, d)
        return (context, probs) if output_attentions else (context, None)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config["hidden_size"]
        self.attention = SelfAttention(config)
        self.attn_dense = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=1e-12)
        self.intermediate = nn.Linear(h, config["intermediate_size"])
        self.output = nn.Linear(config["intermediate_size"], h)
        self.out_norm = nn.LayerNorm(h, eps=1e-12)
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x, attention_mask, output_attentions=False):
        ctx, probs = self.attention(x, attention_mask, output_attentions)
        x = self.attn_norm(x + self.dropout(self.attn_dense(ctx)))
        x = self.out_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))
        return x, probs


class SpliceBertForTokenClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        h = config["hidden_size"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], h, padding_idx=0)
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], h)
        self.emb_norm = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList([Layer(config) for _ in range(config["num_hidden_layers"])])
        self.classifier = nn.Linear(h, config["num_labels"])

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def local_window_bias(self, n, dtype, device):
        pos = torch.arange(n, device=device)
        outside = (pos[None, :] - pos[:, None]).abs() > self.config["attention_window"]
        return torch.zeros(n, n, dtype=dtype, device=device).masked_fill(outside, torch.finfo(dtype).min)

    def forward(self, input_ids, attention_mask, labels=None, output_attentions=False):
        n = input_ids.shape[1]
        pos = torch.arange(n, device=input_ids.device)
        x = self.emb_norm(self.word_embeddings(input_ids) + self.position_embeddings(pos)[None])
        extended = self.get_extended_attention_mask(attention_mask, x.dtype)
        bias = torch.minimum(extended, self.local_window_bias(n, x.dtype, x.device))
        attentions = []
        for layer in self.layers:
            x, probs = layer(x, bias, output_attentions)
            attentions.append(probs)
        logits = self.classifier(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits, "attentions": attentions}


def make_labels(input_ids, windows):
    labels = torch.full(input_ids.shape, -100)
    for i, w in enumerate(windows):
        lab = torch.zeros(len(w), dtype=torch.long)
        for j in range(1, len(w) - 1):
            if w[j - 1:j + 1] == "AG":
                lab[j] = 1
            elif w[j:j + 2] == "GT":
                lab[j] = 2
        labels[i, 1:len(w) + 1] = lab
    return labels


def topk_accuracy(logits, labels, site):
    valid = labels != -100
    scores, truth = logits.softmax(-1)[..., site][valid], (labels[valid] == site)
    k = int(truth.sum())
    if k == 0:
        return float("nan")
    return truth[scores.topk(k).indices].float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    windows = ["".join("ACGT"[i] for i in torch.randint(0, 4, (n,), generator=g)) for n in (30, 30, 22, 14)]
    batch = encode_windows(windows)
    labels = make_labels(batch["input_ids"], windows)
    model = SpliceBertForTokenClassification(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        out = model(**batch, labels=labels)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        print(f"step {step} loss {out['loss'].item():.4f}")
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    print("top-k acceptor", topk_accuracy(out["logits"], labels, 1), "donor", topk_accuracy(out["logits"], labels, 2))
