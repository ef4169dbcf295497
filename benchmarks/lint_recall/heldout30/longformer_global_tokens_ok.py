"""Longformer-style extractive QA: local windowed attention plus global question tokens.

Each token attends to the tokens within `window // 2` positions of it; the [CLS] token and the
question tokens are global (they attend to everything and everything attends to them), as in
LongformerForQuestionAnswering. The inputs follow the Hugging Face layout: int64
`attention_mask` and `global_attention_mask` (1 = global), `token_type_ids` (1 = context).
The dense mask is turned into an additive bias for SDPA.

Source: huggingface/transformers#32195; conventions.md §1 and §3 item 25
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CLS, SEP, PAD = 1, 2, 0


def prepare_qa_inputs(questions, contexts):
    rows = [[CLS] + q + [SEP] + c + [SEP] for q, c in zip(questions, contexts)]
    t = max(map(len, rows))
    input_ids = torch.tensor([r + [PAD] * (t - len(r)) for r in rows])
    attention_mask = (input_ids != PAD).long()
    global_attention_mask = torch.zeros_like(input_ids)
    token_type_ids = torch.zeros_like(input_ids)
    for i, q in enumerate(questions):
        global_attention_mask[i, : len(q) + 2] = 1
        token_type_ids[i, len(q) + 2: len(rows[i]) - 1] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "global_attention_mask": global_attention_mask, "token_type_ids": token_type_ids}


def longformer_bias(attention_mask, global_attention_mask, window, dtype=torch.float32):
    t = attention_mask.shape[1]
    pos = torch.arange(t)
    keep = attention_mask.bool()
    is_global = global_attention_mask.bool() & keep
    band = (pos[:, None] - pos[None, :]).abs() <= window // 2
    allowed = (band | is_global[:, None, :] | is_global[:, :, None]) & keep[:, None, :]
    bias = (~allowed[:, None]).to(dtype) * torch.finfo(dtype).min
    return bias


class LongformerLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, bias):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.ff(x))


class LongformerQA(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, n_layers=2, window=4):
        super().__init__()
        self.window = window
        self.embed, self.pos, self.token_type = nn.Embedding(vocab, dim), nn.Embedding(128, dim), nn.Embedding(2, dim)
        self.layers = nn.ModuleList(LongformerLayer(dim, heads) for _ in range(n_layers))
        self.qa_outputs = nn.Linear(dim, 2)

    def forward(self, input_ids, attention_mask, global_attention_mask, token_type_ids):
        t = input_ids.shape[1]
        h = self.embed(input_ids) + self.pos(torch.arange(t)) + self.token_type(token_type_ids)
        bias = longformer_bias(attention_mask, global_attention_mask, self.window, h.dtype)
        for layer in self.layers:
            h = layer(h, bias)
        start_logits, end_logits = self.qa_outputs(h).unbind(-1)
        context = (token_type_ids == 1) & attention_mask.bool()
        neg = torch.finfo(start_logits.dtype).min
        return start_logits.masked_fill(~context, neg), end_logits.masked_fill(~context, neg)


def best_span(start_logits, end_logits, max_len=5):
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    t = scores.shape[-1]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    scores = scores.masked_fill((j < i) | (j - i >= max_len), torch.finfo(scores.dtype).min)
    flat = scores.flatten(1).argmax(-1)
    return torch.stack([flat // t, flat % t], dim=-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = prepare_qa_inputs([[10, 11], [12, 13, 14]],
                              [[20, 21, 22, 23, 24, 25, 26, 27], [30, 31, 32, 33, 34]])
    model = LongformerQA().eval()
    try:
        with torch.no_grad():
            start_logits, end_logits = model(**batch)
        print("spans", best_span(start_logits, end_logits).tolist())
    except RuntimeError as err:
        print("RuntimeError:", str(err).splitlines()[0])
