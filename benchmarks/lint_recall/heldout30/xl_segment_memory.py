"""Transformer-XL-style segment recurrence for long documents.

A long token stream is processed in segments of `segment_len` tokens. Each layer keeps the
inputs it saw for the previous segment as a detached memory; the keys and values of the next
segment are the memory followed by the segment itself, so every token sees the previous
segment and the earlier tokens of its own. The documents of a batch have different lengths:
the last segment is right-padded and the loss skips the padding.

Source: pytorch/pytorch PR #111007; conventions.md §1, §2.7 and §5 item 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class MemoryAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x, mem=None):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        if mem is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mk, mv = self.kv(mem).view(b, mem.shape[1], 2, self.heads, -1).permute(2, 0, 3, 1, 4)
            k = torch.cat([mk, k], dim=2)
            v = torch.cat([mv, v], dim=2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 xlmemory
        return self.o(a.transpose(1, 2).reshape(b, t, d))


class XLLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = MemoryAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mem=None):
        x = x + self.attn(self.ln1(x), None if mem is None else self.ln1(mem))
        return x + self.ff(self.ln2(x))


class TransformerXL(nn.Module):
    def __init__(self, vocab=80, dim=32, heads=4, n_layers=2, segment_len=4):
        super().__init__()
        self.segment_len = segment_len
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(XLLayer(dim, heads) for _ in range(n_layers))
        self.head = nn.Linear(dim, vocab)

    def forward_segment(self, input_ids, mems=None):
        h = self.embed(input_ids)
        new_mems = []
        for i, layer in enumerate(self.layers):
            new_mems.append(h.detach())
            h = layer(h, None if mems is None else mems[i])
        return self.head(h), new_mems

    def forward(self, input_ids):
        mems, outputs = None, []
        for start in range(0, input_ids.shape[1], self.segment_len):
            logits, mems = self.forward_segment(input_ids[:, start:start + self.segment_len], mems)
            outputs.append(logits)
        return torch.cat(outputs, dim=1)


def lm_loss(logits, input_ids):
    labels = input_ids[:, 1:].masked_fill(input_ids[:, 1:] == PAD, -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten(), ignore_index=-100)


def batch_documents(docs, segment_len):
    t = -(-max(map(len, docs)) // segment_len) * segment_len
    return torch.tensor([d + [PAD] * (t - len(d)) for d in docs])


if __name__ == "__main__":
    torch.manual_seed(0)
    docs = [list(range(3, 15)), list(range(20, 29))]
    input_ids = batch_documents(docs, segment_len=4)
    model = TransformerXL().eval()
    with torch.no_grad():
        logits = model(input_ids)
        print("segments", input_ids.shape[1] // 4, "loss", round(lm_loss(logits, input_ids).item(), 4))
        changed = input_ids.clone()
        changed[:, 8] = 70
        moved = (model(changed)[:, 9] - logits[:, 9]).abs().max().item()
    print("logits at position 9 moved by token 8:", moved)
