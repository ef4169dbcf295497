"""GRU seq2seq with Luong attention; the source-padding handling lives in a mixin.

`SourcePaddingMixin` gives any attention module `source_keep(src)`, a float (B, S) mask
(1.0 = real source token, 0.0 = padding), and `masked_softmax(scores, keep)`, which should
give the padded source positions no weight. `LuongAttention` (bmm, "general" score) and the
decoder use it at every target step.

Source: seed self_attention_mask_guide.txt §3 (常见误区: "PyTorch中mask是'加法'而非'乘法'")
and §7 Q3 (additive vs multiplicative masks): a 0/1 mask multiplied into the logits before
softmax leaves the masked positions with exp(0) weight.
"""
import torch
import torch.nn as nn

PAD_ID = 0


class SourcePaddingMixin:
    pad_id: int = PAD_ID

    def source_keep(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.pad_id).float()

    def masked_softmax(self, scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """scores (B, T, S), keep (B, S): softmax over S with padded positions left out."""
        scores = scores.masked_fill(keep[:, None, :] == 0, float("-inf"))
        return torch.softmax(scores, dim=-1)


class LuongAttention(SourcePaddingMixin, nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.W = nn.Linear(hidden, hidden, bias=False)
        self.combine = nn.Linear(2 * hidden, hidden)

    def forward(self, dec_h, enc_out, keep):
        # dec_h (B, T, H), enc_out (B, S, H)
        scores = torch.bmm(dec_h, self.W(enc_out).transpose(1, 2))
        weights = self.masked_softmax(scores, keep)
        context = torch.bmm(weights, enc_out)
        return torch.tanh(self.combine(torch.cat([context, dec_h], dim=-1))), weights


class Seq2Seq(SourcePaddingMixin, nn.Module):
    def __init__(self, vocab: int = 30, hidden: int = 32):
        super().__init__()
        self.src_embed = nn.Embedding(vocab, hidden, padding_idx=PAD_ID)
        self.tgt_embed = nn.Embedding(vocab, hidden, padding_idx=PAD_ID)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.attention = LuongAttention(hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, tgt_in):
        keep = self.source_keep(src)
        enc_out, h = self.encoder(self.src_embed(src))
        dec_h, _ = self.decoder(self.tgt_embed(tgt_in), h)
        attended, weights = self.attention(dec_h, enc_out, keep)
        return self.out(attended), weights


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Seq2Seq().eval()
    src = torch.tensor([[5, 6, 7, 0, 0, 0], [5, 6, 7, 8, 9, 10]])
    tgt_in = torch.tensor([[1, 11, 12], [1, 13, 14]])
    with torch.no_grad():
        logits, weights = model(src, tgt_in)
    pad = src == PAD_ID
    on_pad = (weights * pad[:, None, :]).sum(-1)
    print("attention weight on padded source tokens (row 0):", on_pad[0].tolist())
    print("logits finite:", bool(torch.isfinite(logits).all()))
