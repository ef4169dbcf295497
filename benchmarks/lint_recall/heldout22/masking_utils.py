"""utils/masking.py: mask helpers for a small nn.MultiheadAttention decoder.

Kept from a Stack Overflow answer to "How do I build the padding mask and the look-ahead
mask for nn.MultiheadAttention?", grown into the project's utility module: lengths to a
padding mask, the look-ahead mask, masked mean pooling, and the `TinyDecoder` that uses
them. Running the module does a quick self-check on random data.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §3 items 9 and 14
"""
import torch
import torch.nn as nn


def lengths_to_padding_mask(lengths, max_len=None):
    """(B,) lengths -> (B, max_len) bool, True at padded positions."""
    max_len = max_len or int(lengths.max())
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] >= lengths[:, None]


def look_ahead_mask(size, device=None):
    """(size, size) bool mask for the `attn_mask` argument of nn.MultiheadAttention."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))  # expect: MC521 utils


def masked_mean(x, padding_mask):
    """Mean over the time axis of (B, T, E), ignoring padded steps."""
    keep = (~padding_mask).unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)


class TinyDecoder(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.emb = nn.Embedding(vocab, dim, padding_idx=pad_id)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids, lengths):
        t = ids.size(1)
        x = self.emb(ids)
        pad = lengths_to_padding_mask(lengths, t)
        causal = look_ahead_mask(t, ids.device)
        h, _ = self.attn(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)  # also: MC521
        x = self.norm(x + h)
        x = self.norm(x + self.ff(x))
        return self.lm_head(x), masked_mean(x, pad)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyDecoder().eval()
    lengths = torch.tensor([6, 4])
    ids = torch.randint(1, 64, (2, 6))
    ids[1, 4:] = 0
    with torch.no_grad():
        logits, pooled = model(ids, lengths)
        changed = ids.clone()
        changed[0, 5] = (changed[0, 5] % 63) + 1
        logits2, _ = model(changed, lengths)
    print("logits", tuple(logits.shape), "pooled", tuple(pooled.shape))
    print("step 0 moved by a change at step 5:", (logits[0, 0] - logits2[0, 0]).abs().max().item())
    print("finite:", bool(torch.isfinite(logits).all()))
