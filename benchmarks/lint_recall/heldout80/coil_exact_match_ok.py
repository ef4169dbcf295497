"""COIL: contextualized exact lexical match for passage re-ranking (luyug/COIL layout).

A shared BERT-like encoder gives a [CLS] vector (projected to `cls_dim`) and a low-dimensional
vector per token (`token_dim`). A query token only interacts with document tokens of the
same vocabulary id; its score is the best such match, summed over query tokens, plus the
[CLS] dot product. Training uses groups of one positive and `train_group_size - 1`
negatives per query; re-ranking a candidate list can run in float16 (`--fp16`), as the
index and the scorer of the original code do.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19); §2.3.
"""
import argparse
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

model_args = SimpleNamespace(token_dim=16, cls_dim=32, hidden=64, heads=4, layers=2, vocab_size=3000, train_group_size=3)
PAD, CLS, SEP = 0, 101, 102


def tokenize(texts, max_len=24):
    rows = [[CLS] + [200 + sum(ord(c) * 29 ** i for i, c in enumerate(w)) % (model_args.vocab_size - 200)
                     for w in t.lower().replace("?", "").split()][: max_len - 2] + [SEP] for t in texts]
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


class Encoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab_size, args.hidden, padding_idx=PAD)
        self.pos = nn.Embedding(32, args.hidden)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0,
                                                               batch_first=True) for _ in range(args.layers))

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos.weight[: input_ids.size(1)]
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=attention_mask == 0)
        return x


class COIL(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.model_args = args
        self.model = Encoder(args)
        self.tok_proj = nn.Linear(args.hidden, args.token_dim)
        self.cls_proj = nn.Linear(args.hidden, args.cls_dim)

    def mask_sep(self, qry_attention_mask):
        sep_pos = qry_attention_mask.sum(1).unsqueeze(1) - 1
        _zeros = torch.zeros_like(sep_pos)
        qry_attention_mask.scatter_(1, sep_pos.long(), _zeros)
        return qry_attention_mask

    def encode(self, batch):
        hidden = self.model(batch["input_ids"], batch["attention_mask"])
        return self.cls_proj(hidden[:, 0]), self.tok_proj(hidden)

    def forward(self, qry_input, doc_input):
        qry_cls, qry_reps = self.encode(qry_input)
        doc_cls, doc_reps = self.encode(doc_input)
        qry_attention_mask = self.mask_sep(qry_input["attention_mask"].clone())
        qry_reps = qry_reps * qry_attention_mask[:, :, None].to(qry_reps.dtype)
        doc_reps = doc_reps * doc_input["attention_mask"][:, :, None].to(doc_reps.dtype)
        tok_scores = self.compute_tok_score_cart(doc_reps, doc_input["input_ids"], qry_reps,
                                                 qry_input["input_ids"], qry_attention_mask)
        cls_scores = qry_cls @ doc_cls.t()
        return tok_scores + cls_scores

    def compute_tok_score_cart(self, doc_reps, doc_input_ids, qry_reps, qry_input_ids, qry_attention_mask):
        exact_match = qry_input_ids[:, :, None, None] == doc_input_ids[None, None, :, :]
        scores_no_masking = torch.matmul(qry_reps.view(-1, self.model_args.token_dim),
                                         doc_reps.view(-1, self.model_args.token_dim).transpose(0, 1))
        scores_no_masking = scores_no_masking.view(*qry_reps.shape[:2], *doc_reps.shape[:2])
        scores = scores_no_masking.masked_fill(~exact_match, torch.finfo(scores_no_masking.dtype).min)
        scores = scores.max(dim=3).values.clamp(min=0)
        tok_scores = (scores * qry_attention_mask.unsqueeze(2).to(scores.dtype))[:, 1:].sum(1)
        return tok_scores


def train_step(model, optimizer, queries, groups):
    model.train()
    scores = model(tokenize(queries), tokenize([p for g in groups for p in g]))
    size = model.model_args.train_group_size
    target = torch.arange(len(queries)) * size
    loss = F.cross_entropy(scores, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def rerank(model, query, candidates, fp16=False):
    model.eval()
    if fp16:
        model = model.half()
    scores = model(tokenize([query]), tokenize(candidates))[0].float()
    order = scores.argsort(descending=True).tolist()
    return [(candidates[i], round(scores[i].item(), 3)) for i in order]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    coil = COIL(model_args)
    optimizer = torch.optim.AdamW(coil.parameters(), lr=5e-4)
    queries = ["what causes tides", "how many moons does mars have"]
    groups = [["tides are caused by the gravity of the moon and the sun", "mars has two small moons",
               "the tide of public opinion turned"],
              ["mars has two moons named phobos and deimos", "the moon causes ocean tides",
               "chocolate bars with caramel and nougat"]]
    for step in range(3):
        print(f"step {step} loss {train_step(coil, optimizer, queries, groups):.4f}")
    for doc, score in rerank(coil, queries[1], groups[1] + groups[0], fp16=args.fp16):
        print(score, doc)
