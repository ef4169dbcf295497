"""Keyword spotting with self-attention and attention pooling, ported from MXNet Gluon to PyTorch.

The Gluon model runs a strided convolution over log-mel frames, one self-attention layer, and
pools the frames with GluonNLP's `masked_softmax(F, att_score, mask, dtype)` recipe (fill the
masked scores, softmax, multiply by the mask). `F.SequenceMask` became `sequence_mask_fill`,
`F.where` became `masked_fill`, the (batch, time, channel) layout and the helper names were kept.

Source: TransformerLensOrg/TransformerLens PR #366, conventions.md §1 (direction cheat-sheet,
values used in the wild) and §5 item 5, seed self_attention_mask_guide.txt §3 (常见误区).
"""
import torch
import torch.nn as nn


def sequence_mask_fill(data, sequence_length, value=0.0, axis=1):
    steps = torch.arange(data.shape[axis])
    keep = steps[None, :] < sequence_length[:, None]
    shape = [keep.shape[0]] + [1] * (data.dim() - 1)
    shape[axis] = data.shape[axis]
    return data.masked_fill(~keep.view(shape), value), keep


def masked_softmax(att_score, mask):
    if mask is not None:
        att_score = att_score.masked_fill(~mask, -1e-18)  # expect: MC516 gluonsoftmax
        att_weights = torch.softmax(att_score, dim=-1) * mask.to(att_score.dtype)
    else:
        att_weights = torch.softmax(att_score, dim=-1)
    return att_weights


class ConvFrontEnd(nn.Module):
    def __init__(self, n_mels, channels):
        super().__init__()
        self.conv = nn.Conv1d(n_mels, channels, kernel_size=3, stride=2, padding=1)

    def forward(self, feats, lengths):
        feats, _ = sequence_mask_fill(feats, lengths)
        x = torch.relu(self.conv(feats.transpose(1, 2))).transpose(1, 2)
        return x, (lengths + 1) // 2


class KeywordSpotter(nn.Module):
    def __init__(self, n_mels=10, channels=16, num_heads=2, num_keywords=4):
        super().__init__()
        self.frontend = ConvFrontEnd(n_mels, channels)
        self.self_attn = nn.MultiheadAttention(channels, num_heads, batch_first=True)
        self.norm = nn.LayerNorm(channels)
        self.att_proj = nn.Linear(channels, channels)
        self.att_vector = nn.Linear(channels, 1, bias=False)
        self.classifier = nn.Linear(channels, num_keywords)

    def forward(self, feats, lengths):
        x, lengths = self.frontend(feats, lengths)
        x, valid = sequence_mask_fill(x, lengths)
        attn_out, _ = self.self_attn(x, x, x, key_padding_mask=~valid, need_weights=False)
        x = self.norm(x + attn_out)
        att_score = self.att_vector(torch.tanh(self.att_proj(x))).squeeze(-1)
        att_weights = masked_softmax(att_score, valid)
        pooled = torch.einsum("bt,btc->bc", att_weights, x)
        return self.classifier(pooled), att_weights


if __name__ == "__main__":
    torch.manual_seed(0)
    model = KeywordSpotter().eval()
    lengths = torch.tensor([20, 11, 7])
    feats = torch.randn(3, 20, 10)
    with torch.no_grad():
        logits, weights = model(feats, lengths)
        alone = torch.cat([model(feats[i:i + 1, :n], lengths[i:i + 1])[0] for i, n in enumerate(lengths.tolist())])
    print("pooling weight sums:", [round(v, 4) for v in weights.sum(-1).tolist()])
    print("max |batched - alone|:", (logits - alone).abs().max().item())
    print("predicted keywords:", logits.argmax(-1).tolist(), "alone:", alone.argmax(-1).tolist())
