"""Cross-encoder re-ranker for a web search engine, exported to ONNX Runtime for serving.

The first stage (BM25 over the inverted index) returns a hundred candidates per query; this
model reads `[CLS] query [SEP] passage [SEP]` pairs and re-scores them. The graph is exported
with dynamic batch and sequence axes, and the float mask is computed inside the graph from the
token ids so that the serving side only feeds `input_ids` and `token_type_ids`.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25), §2.9
"""

import argparse
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, CLS_ID, SEP_ID = 0, 101, 102


def default_config(**overrides):
    cfg = SimpleNamespace(vocab_size=30522, hidden=128, heads=4, layers=2, max_positions=256,
                          type_vocab=2, dropout=0.1, pad_id=PAD_ID)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


class RerankLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.o = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Linear(4 * cfg.hidden, cfg.hidden))
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.dropout = cfg.dropout

    def forward(self, h, attn_bias):
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias,
                                             dropout_p=self.dropout if self.training else 0.0)
        h = self.ln1(h + self.o(ctx.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(h + self.ffn(h))


class CrossEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pad_id = cfg.pad_id
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=cfg.pad_id)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type = nn.Embedding(cfg.type_vocab, cfg.hidden)
        self.ln = nn.LayerNorm(cfg.hidden)
        self.layers = nn.ModuleList(RerankLayer(cfg) for _ in range(cfg.layers))
        self.score = nn.Linear(cfg.hidden, 1)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.ln(self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids))
        keep = input_ids != self.pad_id
        attn_bias = keep[:, None, None, :].to(h.dtype)  # expect: MC508 cast
        for layer in self.layers:
            h = layer(h, attn_bias)
        return self.score(h[:, 0]).squeeze(-1)


def encode_pairs(query_ids, passages, max_len=128):
    rows, types = [], []
    for passage in passages:
        ids = [CLS_ID, *query_ids, SEP_ID, *passage][: max_len - 1] + [SEP_ID]
        rows.append(ids)
        types.append([0] * (len(query_ids) + 2) + [1] * (len(ids) - len(query_ids) - 2))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    token_type_ids = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, types)):
        input_ids[i, : len(r)] = torch.tensor(r)
        token_type_ids[i, : len(t)] = torch.tensor(t)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids}


def train_step(model, opt, query_ids, positive, negatives):
    batch = encode_pairs(query_ids, [positive, *negatives])
    scores = model(batch["input_ids"], batch["token_type_ids"])
    loss = F.cross_entropy(scores[None], torch.zeros(1, dtype=torch.long))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


@torch.no_grad()
def rerank(model, query_ids, candidates, top_k=10):
    model.eval()
    batch = encode_pairs(query_ids, candidates)
    scores = model(batch["input_ids"], batch["token_type_ids"])
    order = scores.argsort(descending=True)[:top_k]
    return order.tolist(), scores[order].tolist()


def export_onnx(model, path, opset=17):
    model.eval()
    example = encode_pairs([2054, 2003], [[1996, 3007, 1997], [2023, 2003, 1037, 2936, 6019]])
    torch.onnx.export(
        model, (example["input_ids"], example["token_type_ids"]), path,
        input_names=["input_ids", "token_type_ids"], output_names=["score"],
        dynamic_axes={"input_ids": {0: "pairs", 1: "tokens"}, "token_type_ids": {0: "pairs", 1: "tokens"},
                      "score": {0: "pairs"}},
        opset_version=opset, dynamo=False,
    )


class OrtReranker:
    def __init__(self, path, threads=4):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def __call__(self, query_ids, candidates, top_k=10):
        batch = encode_pairs(query_ids, candidates)
        feeds = {k: v.numpy() for k, v in batch.items()}
        scores = torch.from_numpy(self.session.run(["score"], feeds)[0])
        order = scores.argsort(descending=True)[:top_k]
        return order.tolist(), scores[order].tolist()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--onnx", default="reranker.onnx")
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args(argv)
    cfg = default_config(hidden=args.hidden)
    model = CrossEncoder(cfg)
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    export_onnx(model, args.onnx)
    served = OrtReranker(args.onnx)
    query = [2129, 2000, 8080, 1037, 2482]
    candidates = [[2000 + (7 * i + j) % 500 for j in range(5 + 11 * (i % 4))] for i in range(20)]
    print("torch:", rerank(model, query, candidates, top_k=5))
    print("onnx: ", served(query, candidates, top_k=5))


if __name__ == "__main__":
    main()
