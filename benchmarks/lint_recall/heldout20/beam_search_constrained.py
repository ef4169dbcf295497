"""Beam search with constrained decoding over a tiny causal LM, optionally in float16.

fairseq-style step loop: `lprobs` per beam, banned tokens (no repeat of a bigram, no EOS before
`min_len`, a caller's block list) removed from the logits before log_softmax, then a flat topk
over beam x vocab. `--fp16` runs the model and the logits in half precision, as fairseq's
`--fp16` generation does.
Bug: banned logits are filled with -1e9, which float16 cannot hold (raises under --fp16).
Source: facebookresearch/fairseq#3575, NVIDIA/apex#1052 and #1105, conventions.md §2.3, §3 item 18.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

BOS, EOS, VOCAB = 1, 2, 40


class TinyLM(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.emb, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(64, dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, VOCAB)

    def forward(self, tokens):  # (B, T) -> logits of the next token (B, V)
        B, T = tokens.shape
        x = self.emb(tokens) + self.pos(torch.arange(T))
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, -1))
        return self.head(self.ln(x[:, -1]))


def banned_mask(tokens, step, min_len, block_list):
    banned = torch.zeros(tokens.shape[0], VOCAB, dtype=torch.bool)
    banned[:, block_list] = True
    if step < min_len:
        banned[:, EOS] = True
    for b, seq in enumerate(tokens.tolist()):  # no repeated bigram
        for prev, nxt in zip(seq[:-1], seq[1:]):
            if prev == seq[-1]:
                banned[b, nxt] = True
        if seq[-1] == EOS:  # a finished hypothesis can only repeat EOS (score unchanged)
            banned[b] = True
            banned[b, EOS] = False
    return banned


@torch.no_grad()
def beam_search(model, beam=4, max_len=12, min_len=5, block_list=(0, 3)):
    tokens = torch.full((1, 1), BOS)
    scores = torch.zeros(1)
    for step in range(max_len):
        logits = model(tokens)
        logits = logits.masked_fill(banned_mask(tokens, step, min_len, list(block_list)), -1e9)  # expect: MC501 beam
        lprobs = F.log_softmax(logits.float(), dim=-1) + scores[:, None]
        top, idx = lprobs.view(-1).topk(beam)
        tokens = torch.cat([tokens[idx // VOCAB], (idx % VOCAB)[:, None]], dim=1)
        scores = top
        if (tokens[:, -1] == EOS).all():
            break
    return tokens[scores.argmax()].tolist()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyLM().eval()
    if args.fp16:
        model = model.half()
    hyp = beam_search(model)
    print("fp16" if args.fp16 else "fp32", hyp)
    assert all(t not in (0, 3) for t in hyp) and EOS not in hyp[:5]
