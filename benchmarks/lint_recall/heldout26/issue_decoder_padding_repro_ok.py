"""Issue repro: "nn.TransformerDecoder returns NaN logits as soon as I pass tgt_key_padding_mask".

Pasted into a GitHub issue as a top-level script, no functions: a decoder-only LM built on
nn.TransformerDecoder (the memory is a two-vector prefix, e.g. projected image features), a
right-padded batch written as `torch.tensor([[...]])` literals in the shape of a tokenizer's
output (`input_ids`, `attention_mask` with 1 = real token), the causal `tgt_mask` from the static
`nn.Transformer.generate_square_subsequent_mask` with `tgt_is_causal=True`, and the reporter's
loop over three runs: the batch, the batch with other pad ids, and the first prompt alone.

Source: conventions.md §1 (nn.Transformer row and the direction cheat-sheet: `*_key_padding_mask`
is True = padding, a Hugging Face `attention_mask` is 1 = keep), seed self_attention_mask_guide.txt
§2 (key_padding_mask: True marks padding), pytorch/pytorch PR #141694 (key_padding_mask docs).
"""
import torch
from torch import nn

torch.manual_seed(0)

VOCAB, D, HEADS, PAD = 40, 32, 4, 0

batch = {
    "input_ids": torch.tensor([[7, 12, 5, 0, 0], [9, 3, 14, 22, 8], [31, 6, 0, 0, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]),
}
prefix = torch.randn(3, 2, D)

emb = nn.Embedding(VOCAB, D, padding_idx=PAD)
pos = nn.Embedding(16, D)
layer = nn.TransformerDecoderLayer(D, HEADS, dim_feedforward=64, dropout=0.0, batch_first=True)
decoder = nn.TransformerDecoder(layer, num_layers=2)
lm_head = nn.Linear(D, VOCAB)
for mod in (emb, pos, decoder, lm_head):
    mod.eval()

keep = batch["attention_mask"].bool()
runs = {
    "batch": (batch["input_ids"], keep, prefix),
    "pad ids 17": (batch["input_ids"].masked_fill(~keep, 17), keep, prefix),
    "prompt 0 alone": (batch["input_ids"][:1, :3], keep[:1, :3], prefix[:1]),
}

results = {}
for name, (ids, attention_mask, memory) in runs.items():
    T = ids.shape[1]
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool)
    with torch.no_grad():
        x = emb(ids) + pos(torch.arange(T))[None]
        h = decoder(x, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=~attention_mask, tgt_is_causal=True)
        results[name] = lm_head(h)
    print(name, "NaN:", torch.isnan(results[name]).any().item())

a, b = results["batch"], results["pad ids 17"]
print("real-token logits, pad ids 0 vs 17:", (a - b)[keep].abs().max().item())
print("prompt 0 batched vs alone:", (a[0, :3] - results["prompt 0 alone"][0]).abs().max().item())
print("next token per prompt:", [a[i, keep[i].sum() - 1].argmax().item() for i in range(3)])
