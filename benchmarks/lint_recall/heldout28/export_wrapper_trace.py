"""Serving export: a wrapper module takes the tokenizer's `input_ids` and int64 `attention_mask`,
rebuilds the encoder's extended additive mask with tensor arithmetic only (no Python branching,
so the graph traces), mean-pools, and is traced with torch.jit.trace for the runtime.

Source: huggingface/transformers#32195, conventions.md §1 (HF 4.x AttentionMaskConverter row)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS, PAD = 50, 32, 4, 0


class Encoder(nn.Module):
    """Takes an extended mask: (batch, 1, 1, seq), 0 for tokens and a large negative for padding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o = nn.Linear(DIM, DIM)
        self.ff = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.ReLU(), nn.Linear(2 * DIM, DIM))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, input_ids, extended_mask):
        x = self.emb(input_ids)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5 + extended_mask
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM))
        return self.norm(x + self.ff(x))


class ExportWrapper(nn.Module):
    def __init__(self, encoder, dtype=torch.float32):
        super().__init__()
        self.encoder = encoder
        self.mask_dtype = dtype

    def forward(self, input_ids, attention_mask):
        keep = attention_mask > 0
        neg = torch.finfo(self.mask_dtype).min
        extended = (1 - keep[:, None, None, :]) * neg  # expect: MC512 export
        hidden = self.encoder(input_ids, extended.to(self.mask_dtype))
        weights = keep.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return nn.functional.normalize(pooled, dim=-1)


def batch_of(seqs):
    width = max(map(len, seqs))
    ids = torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])
    return ids, (ids != PAD).long()


if __name__ == "__main__":
    wrapper = ExportWrapper(Encoder()).eval()
    ids, mask = batch_of([[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]])
    try:
        with torch.no_grad():
            traced = torch.jit.trace(wrapper, (ids, mask))
            eager = wrapper(ids, mask)
            other_ids, other_mask = batch_of([[8, 9], [3, 4, 5, 6, 7, 13, 14]])
            print("traced vs eager on the example:", (traced(ids, mask) - eager).abs().max().item())
            alone = wrapper(*batch_of([[8, 9]]))
            print("traced, other batch, vs alone:", (traced(other_ids, other_mask)[0] - alone[0]).abs().max().item())
    except RuntimeError as err:
        print("export failed:", str(err).splitlines()[0])
