"""Streaming speech encoder (U2 / Emformer style): frames are grouped into chunks, each frame sees
its own chunk and a fixed number of chunks to the left, and utterances of different lengths are
batched with zero-padded features. A CTC head reads the encoder output.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
FEATS, DIM, HEADS, VOCAB = 20, 32, 4, 12


def make_masks(lengths, max_len, chunk, left_chunks):
    """Returns (chunk_blocked, valid): chunk_blocked (T, T) True where a frame may not look,
    valid (B, T) True on real frames."""
    idx = torch.arange(max_len)
    chunk_id = idx // chunk
    ahead = chunk_id[None, :] > chunk_id[:, None]
    too_far = chunk_id[None, :] < chunk_id[:, None] - left_chunks
    valid = idx[None, :] < lengths[:, None]
    return ahead | too_far, valid


class ChunkSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)

    def forward(self, x, masks):
        chunk_blocked, valid = masks
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (DIM // HEADS) ** -0.5
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(chunk_blocked, neg)
        scores = scores.masked_fill(~valid[:, None, None, :], neg)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM))


class StreamingEncoder(nn.Module):
    def __init__(self, chunk=4, left_chunks=1):
        super().__init__()
        self.chunk, self.left_chunks = chunk, left_chunks
        self.subsample = nn.Linear(FEATS, DIM)
        self.layers = nn.ModuleList(ChunkSelfAttention() for _ in range(2))
        self.norms = nn.ModuleList(nn.LayerNorm(DIM) for _ in range(2))
        self.ctc = nn.Linear(DIM, VOCAB)

    def forward(self, feats, lengths):
        masks = make_masks(lengths, feats.shape[1], self.chunk, self.left_chunks)
        x = self.subsample(feats)
        for attn, norm in zip(self.layers, self.norms):
            x = x + attn(norm(x), masks)
        log_probs = self.ctc(x).log_softmax(-1)
        return log_probs, masks[1]


def pad_batch(utts):
    lengths = torch.tensor([u.shape[0] for u in utts])
    feats = torch.zeros(len(utts), int(lengths.max()), FEATS)
    for i, u in enumerate(utts):
        feats[i, : u.shape[0]] = u
    return feats, lengths


if __name__ == "__main__":
    enc = StreamingEncoder().eval()
    utts = [torch.randn(16, FEATS), torch.randn(9, FEATS), torch.randn(13, FEATS)]
    with torch.no_grad():
        log_probs, valid = enc(*pad_batch(utts))
        worst = 0.0
        for i, u in enumerate(utts):
            alone, _ = enc(*pad_batch([u]))
            n = u.shape[0]
            worst = max(worst, (log_probs[i, :n] - alone[0, :n]).abs().max().item())
        greedy = log_probs.argmax(-1).masked_fill(~valid, -1)
    print(f"batched vs alone, max log-prob difference on real frames: {worst:.3g}")
    print("greedy CTC ids of the shortest utterance:", greedy[1, :9].tolist())
