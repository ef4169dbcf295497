"""Recurrent Memory Transformer (RMT) classifier for long documents.

`num_memory` learned memory tokens are prepended to every segment; the encoder reads memory and
segment bidirectionally, and the memory tokens' outputs become the memory for the next segment.
A segment that is all padding (the document already ended) leaves the memory unchanged. The
collator returns int64 `input_ids` and `attention_mask` (1 = real token), right-padded.

Source: conventions.md §1 and §5 item 7; tools.md §0 P2
"""
import torch
import torch.nn as nn

PAD = 0


def collate(docs):
    t = max(map(len, docs))
    return {"input_ids": torch.tensor([d + [PAD] * (t - len(d)) for d in docs], dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(d) + [0] * (t - len(d)) for d in docs], dtype=torch.long)}


class MemoryEncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, x, key_padding_mask):
        a, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask)
        x = self.ln1(x + a)
        return self.ln2(x + self.ff(x))


class RMTClassifier(nn.Module):
    def __init__(self, vocab=100, dim=32, heads=4, n_layers=2, num_memory=2, segment_len=4, n_classes=3):
        super().__init__()
        self.num_memory, self.segment_len = num_memory, segment_len
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(num_memory + segment_len, dim)
        self.memory_init = nn.Parameter(torch.randn(num_memory, dim) * 0.02)
        self.layers = nn.ModuleList(MemoryEncoderLayer(dim, heads) for _ in range(n_layers))
        self.classifier = nn.Linear(dim, n_classes)

    def read_segment(self, memory, seg_ids, seg_mask):
        b = seg_ids.shape[0]
        full_mask = torch.cat([seg_mask.new_ones(b, self.num_memory), seg_mask], dim=1)
        key_padding_mask = full_mask == 0
        h = torch.cat([memory, self.embed(seg_ids)], dim=1)
        h = h + self.pos(torch.arange(h.shape[1]))
        for layer in self.layers:
            h = layer(h, key_padding_mask.to(torch.bool))
        return h[:, : self.num_memory]

    def forward(self, input_ids, attention_mask):
        b, t = input_ids.shape
        memory = self.memory_init.expand(b, -1, -1)
        for start in range(0, t, self.segment_len):
            seg_ids = input_ids[:, start:start + self.segment_len]
            seg_mask = attention_mask[:, start:start + self.segment_len]
            new_memory = self.read_segment(memory, seg_ids, seg_mask)
            has_tokens = seg_mask.sum(dim=1) > 0
            memory = torch.where(has_tokens[:, None, None], new_memory, memory)
        return self.classifier(memory.mean(dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = collate([list(range(5, 19)), list(range(30, 36)), list(range(40, 50))])
    model = RMTClassifier().eval()
    with torch.no_grad():
        logits = model(**batch)
    print("logits", logits.shape, "nan", torch.isnan(logits).any().item())
    print("predictions", logits.argmax(-1).tolist())
