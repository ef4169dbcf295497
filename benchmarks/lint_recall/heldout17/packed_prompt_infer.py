"""Score several prompts packed in one row: block-diagonal causal mask, per-prompt positions.

    python packed_prompt_infer.py --prompts "hello" "packed attention" "abc" --dtype float32

Source: pytorch/pytorch#103963 (a 0/1 float attn_mask is additive: 1 adds +1 and masks
nothing), huggingface/transformers#46458 (a float 4-D mask in 0.0 / 1.0 terms instead of -inf
and zero) and #32195 (0/1 4-D masks became additive), conventions.md §2.9. The packed keep-mask
is cast to the query dtype before it reaches scaled_dot_product_attention.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def encode(prompts):
    """Byte-level ids; returns packed ids (1, T), position ids (1, T), doc ids (1, T), ends."""
    ids, pos, doc, ends = [], [], [], []
    for d, text in enumerate(prompts):
        b = list(text.encode("utf-8"))
        ids += b
        pos += range(len(b))
        doc += [d] * len(b)
        ends.append(len(ids) - 1)
    as_row = lambda xs: torch.tensor([xs], dtype=torch.long)
    return as_row(ids), as_row(pos), as_row(doc), ends


def packed_causal_mask(doc_ids, dtype):
    """(B, 1, T, T): a token attends to earlier tokens of its own prompt."""
    t = doc_ids.size(-1)
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=doc_ids.device))
    return (same_doc & causal)[:, None].to(dtype)  # expect: MC508 argparse


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # also: MC508
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class ByteLM(nn.Module):
    def __init__(self, dim=128, heads=4, depth=2, max_pos=512):
        super().__init__()
        self.wte = nn.Embedding(256, dim)
        self.wpe = nn.Embedding(max_pos, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, 256, bias=False)

    def forward(self, input_ids, position_ids, doc_ids):
        x = self.wte(input_ids) + self.wpe(position_ids)
        mask = packed_causal_mask(doc_ids, x.dtype)
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", nargs="+", default=["hello world", "packed attention", "abc"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    model = ByteLM().eval()
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    model.to(dtype)

    ids, pos, doc, ends = encode(args.prompts)
    with torch.inference_mode():
        packed = model(ids, pos, doc)[0, ends].float()
        for i, prompt in enumerate(args.prompts):
            a_ids, a_pos, a_doc, a_ends = encode([prompt])
            alone = model(a_ids, a_pos, a_doc)[0, a_ends[0]].float()
            top = packed[i].argmax().item()
            print(f"{prompt!r}: next byte {top}, |packed - alone| = {(packed[i] - alone).abs().max():.2e}")


if __name__ == "__main__":
    main()
