"""PyTorch forum question: "Calling nn.functional.multi_head_attention_forward directly, my pooled output ignores the words".

The poster keeps their own projection weights (ported from another framework) and calls
`nn.functional.multi_head_attention_forward` by hand, sequence-first, with the padding taken
from a tokenizer-like function that returns a dict (`input_ids`, `attention_mask` with 1 = real
token). They pool the first token and compare one sentence batched with a long one and alone.

Source: seed self_attention_mask_guide.txt §2 (key_padding_mask: True = padding, False = real
content), conventions.md §1 (F.multi_head_attention_forward row, direction cheat-sheet: HF masks
are 1 = keep) and §4.1 (the SDPA/MHA direction confusion is common enough that the 2.13 SDPA
docstring tells users to invert boolean masks when moving between the two).
"""
import torch
from torch import nn

torch.manual_seed(0)

E, H = 16, 4
WORDS = "<pad> the a cat dog sat ran on mat far away quickly".split()


def tokenizer(texts, pad_to=None):
    ids = [[WORDS.index(w) for w in t.split()] for t in texts]
    n = pad_to or max(map(len, ids))
    return {
        "input_ids": torch.tensor([r + [0] * (n - len(r)) for r in ids]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in ids]),
    }


emb = nn.Embedding(len(WORDS), E)
in_proj_weight = nn.Parameter(torch.randn(3 * E, E) / E**0.5)
in_proj_bias = nn.Parameter(torch.zeros(3 * E))
out_proj = nn.Linear(E, E)


def encode(texts):
    enc = tokenizer(texts)
    tmp = enc["attention_mask"] == 0
    x = emb(enc["input_ids"]).transpose(0, 1)  # (L, N, E)
    y, _ = nn.functional.multi_head_attention_forward(
        x, x, x, E, H,
        in_proj_weight, in_proj_bias,
        None, None, False, 0.0,
        out_proj.weight, out_proj.bias,
        training=False,
        key_padding_mask=tmp,
        need_weights=False,
    )
    return y[0]


with torch.no_grad():
    pair = encode(["the cat sat", "a dog ran on the mat far away quickly"])
    alone = encode(["the cat sat"])
    other_pad = encode(["the cat sat", "the dog ran quickly"])
print("sentence 0 batched vs alone:", (pair[0] - alone[0]).abs().max().item())
print("sentence 0 with a different neighbour:", (pair[0] - other_pad[0]).abs().max().item())
print("finite:", torch.isfinite(pair).all().item(), torch.isfinite(alone).all().item())
