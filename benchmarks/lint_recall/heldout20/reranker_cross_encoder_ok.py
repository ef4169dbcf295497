"""Cross-encoder reranker: [CLS] query [SEP] passage [SEP] through a small encoder, score on [CLS].

Written as plain functions over a parameter dict (the style of a lightweight serving repo that
avoids nn.Module); listwise softmax loss over each query's candidates.
Twin (correct): the padding keep-mask goes to SDPA as a bool mask (True = may attend).
Source: pytorch/pytorch#103963 (a 0/1 float mask is additive), huggingface/transformers#32195,
conventions.md §2.9 (0/1 float masks used as additive bias leak).
"""
import torch
import torch.nn.functional as F

PAD, CLS, SEP, VOCAB, DIM, HEADS = 0, 1, 2, 400, 32, 4


def encode_pairs(query, passages, max_len=32):
    q = [3 + sum(map(ord, w)) % (VOCAB - 3) for w in query.split()]
    rows, types = [], []
    for p in passages:
        d = [3 + sum(map(ord, w)) % (VOCAB - 3) for w in p.split()]
        ids = ([CLS] + q + [SEP] + d)[: max_len - 1] + [SEP]
        rows.append(ids)
        types.append([0] * (len(q) + 2) + [1] * (len(ids) - len(q) - 2))
    width = max(map(len, rows))
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    token_type_ids = torch.tensor([t + [0] * (width - len(t)) for t in types])
    return input_ids, token_type_ids


def init_params(layers=2):
    g = lambda *s: (torch.randn(*s) * 0.05).requires_grad_()
    p = {"tok": g(VOCAB, DIM), "typ": g(2, DIM), "pos": g(64, DIM), "head": g(DIM, 1)}
    for i in range(layers):
        p[f"qkv{i}"], p[f"out{i}"] = g(DIM, 3 * DIM), g(DIM, DIM)
        p[f"ff1{i}"], p[f"ff2{i}"] = g(DIM, 4 * DIM), g(4 * DIM, DIM)
    return p


def rerank_scores(p, input_ids, token_type_ids, layers=2):
    B, L = input_ids.shape
    x = p["tok"][input_ids] + p["typ"][token_type_ids] + p["pos"][:L]
    keep = (input_ids != PAD)[:, None, None, :]
    for i in range(layers):
        h = F.layer_norm(x, (DIM,))
        q, k, v = (h @ p[f"qkv{i}"]).view(B, L, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + a.transpose(1, 2).reshape(B, L, DIM) @ p[f"out{i}"]
        x = x + F.gelu(F.layer_norm(x, (DIM,)) @ p[f"ff1{i}"]) @ p[f"ff2{i}"]
    return (F.layer_norm(x[:, 0], (DIM,)) @ p["head"]).squeeze(-1)


def train(data, steps=40):
    p = init_params()
    opt = torch.optim.Adam(p.values(), lr=3e-3)
    for _ in range(steps):
        loss = 0.0
        for query, passages, gold in data:
            scores = rerank_scores(p, *encode_pairs(query, passages))
            loss = loss + F.cross_entropy(scores[None], torch.tensor([gold]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return p, loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    data = [("symptoms of flu", ["flu causes fever cough and aches", "the stock market fell today by a lot"], 0),
            ("python list sort", ["use sorted or list sort in python", "pythons are large snakes"], 0)]
    p, loss = train(data)
    ids, types = encode_pairs("symptoms of flu", ["flu causes fever cough and aches"])
    ids2, types2 = encode_pairs("symptoms of flu", ["flu causes fever cough and aches", "x " * 20])
    with torch.no_grad():
        drift = (rerank_scores(p, ids, types)[0] - rerank_scores(p, ids2, types2)[0]).abs().item()
    print("loss", round(loss, 4), "score drift from padding", drift)
