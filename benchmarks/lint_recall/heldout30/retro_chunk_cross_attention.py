"""RETRO-style decoder with chunked cross-attention over retrieved neighbours.

The sequence is split into chunks of `chunk_size` tokens; for every chunk the retriever returns
`k` neighbour passages of different lengths, padded with PAD. The neighbours are encoded
bidirectionally, and the tokens of chunk u cross-attend to the neighbours retrieved for chunk
u - 1 (so nothing is read from the chunk's own future); the first chunk has no neighbours and
its cross-attention output is zero.

Source: seed masked_fill_inplace.txt; seed self_attention_mask_guide.txt §2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class NeighbourEncoder(nn.Module):
    def __init__(self, vocab, dim, heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)

    def forward(self, neighbours):
        b, u, k, r = neighbours.shape
        flat = neighbours.reshape(b * u * k, r)
        enc = self.layer(self.embed(flat), src_key_padding_mask=flat == PAD)
        return enc.reshape(b, u, k * r, -1), (neighbours != PAD).reshape(b, u, k * r)


class ChunkedCrossAttention(nn.Module):
    def __init__(self, dim, heads, chunk_size):
        super().__init__()
        self.heads, self.chunk_size = heads, chunk_size
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, h, memory, memory_keep):
        b, t, d = h.shape
        u, m = t // self.chunk_size, self.chunk_size
        memory = torch.cat([torch.zeros_like(memory[:, :1]), memory[:, :-1]], dim=1)
        memory_keep = torch.cat([torch.zeros_like(memory_keep[:, :1]), memory_keep[:, :-1]], dim=1)
        q = self.q(h).view(b, u, m, self.heads, -1).transpose(2, 3)
        k, v = self.kv(memory).view(b, u, -1, 2, self.heads, d // self.heads).permute(3, 0, 1, 4, 2, 5)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        scores.masked_fill(~memory_keep[:, :, None, None, :], torch.finfo(scores.dtype).min)  # expect: MC525 retro
        out = scores.softmax(dim=-1) @ v
        has_memory = memory_keep.any(dim=-1)
        out = torch.where(has_memory[:, :, None, None, None], out, torch.zeros_like(out))
        return self.o(out.transpose(2, 3).reshape(b, t, d))


class RetroDecoderLayer(nn.Module):
    def __init__(self, dim, heads, chunk_size):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.cca = ChunkedCrossAttention(dim, heads, chunk_size)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, h, memory, memory_keep):
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        h = h + self.cca(self.ln2(h), memory, memory_keep)
        return h + self.ff(self.ln3(h))


class Retro(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, n_layers=2, chunk_size=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(64, dim)
        self.encoder = NeighbourEncoder(vocab, dim, heads)
        self.layers = nn.ModuleList(RetroDecoderLayer(dim, heads, chunk_size) for _ in range(n_layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, neighbours):
        memory, memory_keep = self.encoder(neighbours)
        h = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        for layer in self.layers:
            h = layer(h, memory, memory_keep)
        return self.head(h)


def pad_neighbours(batch_neighbours, length):
    return torch.tensor([[[n + [PAD] * (length - len(n)) for n in chunk] for chunk in row]
                         for row in batch_neighbours])


if __name__ == "__main__":
    torch.manual_seed(0)
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]])
    retrieved = [[[[20, 21, 22], [23, 24]], [[25, 26, 27, 28], [29]], [[30, 31], [32, 33, 34]]]]
    model = Retro().eval()
    with torch.no_grad():
        short = model(input_ids, pad_neighbours(retrieved, 4))
        long = model(input_ids, pad_neighbours(retrieved, 7))
    print("logits", tuple(short.shape))
    print("neighbour padding length changes logits by", (short - long).abs().max().item())
