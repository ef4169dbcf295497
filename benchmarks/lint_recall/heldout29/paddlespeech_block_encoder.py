"""Block-wise (chunk-local) speech encoder with a CTC head, ported from PaddleSpeech to PyTorch.

The Paddle code builds its padding masks with `make_pad_mask` / `make_non_pad_mask` from the
frame lengths, subsamples frames and masks by two, and restricts self-attention to fixed
blocks of frames with an additive block bias; `paddle.Tensor` calls were swapped for their torch
names (`masked_fill`, `unsqueeze`, `F.ctc_loss`) and the layer layout (B, T, D) was kept.

Source: seed self_attention_mask_guide.txt §6 (块状sparse attention, create_block_mask),
conventions.md §2.3 (fully-masked row).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_pad_mask(lengths, max_len=0):
    max_len = max(max_len, int(lengths.max()))
    seq_range = torch.arange(max_len, device=lengths.device)
    return seq_range[None, :] >= lengths[:, None]


def make_non_pad_mask(lengths, max_len=0):
    return ~make_pad_mask(lengths, max_len)


def block_attention_bias(size, block_size, dtype=torch.float32):
    block_ids = torch.arange(size) // block_size
    bias = torch.zeros(size, size, dtype=dtype)
    for start in range(0, size, block_size):
        bias[start:start + block_size, start:start + block_size] = 0
    bias[bias == 0] = float("-inf")  # expect: MC504 paddleblock
    return bias, block_ids


class BlockSelfAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.h, self.d_k = n_head, d_model // n_head
        self.linear_qkv = nn.Linear(d_model, 3 * d_model)
        self.linear_out = nn.Linear(d_model, d_model)

    def forward(self, x, non_pad, block_bias):
        b, t, _ = x.shape
        q, k, v = self.linear_qkv(x).view(b, t, 3, self.h, self.d_k).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.d_k**0.5
        scores = scores + block_bias[:t, :t]
        scores = scores.masked_fill(~non_pad[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, -1)
        return self.linear_out(out)


class BlockEncoder(nn.Module):
    def __init__(self, idim=8, d_model=16, n_head=2, n_layer=2, vocab=12, block_size=4, max_len=64):
        super().__init__()
        self.embed = nn.Conv1d(idim, d_model, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList([BlockSelfAttention(d_model, n_head) for _ in range(n_layer)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layer)])
        self.ctc_lo = nn.Linear(d_model, vocab)
        self.block_bias, self.block_ids = block_attention_bias(max_len, block_size)

    def forward(self, feats, feats_lengths):
        masks = make_non_pad_mask(feats_lengths, feats.shape[1])
        x = self.embed(feats.masked_fill(~masks[..., None], 0.0).transpose(1, 2)).transpose(1, 2)
        masks = masks[:, ::2]
        lengths = masks.sum(dim=1)
        for layer, norm in zip(self.layers, self.norms):
            x = x + layer(norm(x), masks, self.block_bias)
            x = x.masked_fill(~masks[..., None], 0.0)
        return self.ctc_lo(x), lengths

    def block_summary(self, x, masks):
        ids = self.block_ids[: x.shape[1]]
        n_blocks = int(ids.max()) + 1
        onehot = F.one_hot(ids, n_blocks).to(x.dtype) * masks[..., None].to(x.dtype)
        return torch.einsum("btd,btn->bnd", x, onehot) / onehot.sum(1).clamp(min=1)[..., None]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BlockEncoder().eval()
    lengths = torch.tensor([21, 13, 9])
    feats = torch.randn(3, 21, 8)
    targets = torch.randint(1, 12, (3, 4))
    with torch.no_grad():
        logits, out_lens = model(feats, lengths)
        loss = F.ctc_loss(logits.log_softmax(-1).transpose(0, 1), targets, out_lens,
                          torch.full((3,), 4), zero_infinity=False)
        summary = model.block_summary(logits, make_non_pad_mask(out_lens, logits.shape[1]))
        gaps = []
        for i, n in enumerate(lengths.tolist()):
            single, n_out = model(feats[i:i + 1, :n], lengths[i:i + 1])
            gaps.append((single[0, :n_out] - logits[i, :n_out]).abs().max())
    print("logits NaN:", bool(torch.isnan(logits).any()), " CTC loss:", round(loss.item(), 4))
    print("block summary NaN:", bool(torch.isnan(summary).any()))
    print("max |batched - alone| on real frames:", torch.stack(gaps).max().item())
