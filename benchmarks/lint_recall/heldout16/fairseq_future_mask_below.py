"""Held-out 16: a fairseq-style Transformer decoder (T x B x C tensors, learned positions with
`padding_idx`, an `encoder_out` dict with `encoder_padding_mask`, a cached future mask). As in
fairseq, the decoder keeps the future mask in `self._future_mask` and rebuilds it only when a
longer target arrives; the mask itself comes from module-level helpers at the bottom of the file
(`future_mask`, `fill_with_neg_inf`, the fp16-compatible -inf fill).

Source: pbloem/former#10 (the causal mask written with offset 0: "an offset of 0 will create a row
of all -inf, which gives a complete row of NaNs when fed into softmax"), seed guide
`generate_causal_mask` (`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`). The helper
at the bottom calls `torch.triu` on the -inf matrix without `diagonal=1`, so every target position
is also hidden from itself and the first one sees nothing.
"""

from typing import Dict, List, Optional

import torch
from torch import Tensor, nn


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, encoder_out: Tensor, encoder_padding_mask: Optional[Tensor],
                self_attn_mask: Optional[Tensor] = None) -> Tensor:
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, x, x, attn_mask=self_attn_mask, need_weights=False)
        x = residual + self.dropout(x)

        residual = x
        x = self.encoder_attn_layer_norm(x)
        x, _ = self.encoder_attn(x, encoder_out, encoder_out,
                                 key_padding_mask=encoder_padding_mask, need_weights=False)
        x = residual + self.dropout(x)

        residual = x
        x = self.final_layer_norm(x)
        x = self.fc2(self.dropout(torch.relu(self.fc1(x))))
        return residual + self.dropout(x)


class TransformerDecoder(nn.Module):
    def __init__(self, num_embeddings: int, embed_dim: int = 64, num_heads: int = 4, ffn_dim: int = 128,
                 num_layers: int = 2, padding_idx: int = 1, max_positions: int = 256, dropout: float = 0.1):
        super().__init__()
        self.padding_idx = padding_idx
        self.embed_scale = embed_dim ** 0.5
        self.embed_tokens = nn.Embedding(num_embeddings, embed_dim, padding_idx=padding_idx)
        self.embed_positions = nn.Embedding(max_positions + padding_idx + 1, embed_dim, padding_idx=padding_idx)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayer(embed_dim, num_heads, ffn_dim, dropout) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(embed_dim)
        self.output_projection = nn.Linear(embed_dim, num_embeddings, bias=False)
        self.dropout = nn.Dropout(dropout)
        self._future_mask = torch.empty(0)

    def make_positions(self, tokens: Tensor) -> Tensor:
        mask = tokens.ne(self.padding_idx).int()
        return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.padding_idx

    def buffered_future_mask(self, tensor: Tensor) -> Tensor:
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim:
            self._future_mask = future_mask(dim)  # expect: MC503 below
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def extract_features(self, prev_output_tokens: Tensor, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        x = x + self.embed_positions(self.make_positions(prev_output_tokens))
        x = self.dropout(x).transpose(0, 1)  # B x T x C -> T x B x C
        enc = encoder_out["encoder_out"][0]
        enc_padding_mask = encoder_out["encoder_padding_mask"][0] if encoder_out["encoder_padding_mask"] else None
        self_attn_mask = self.buffered_future_mask(x)
        for layer in self.layers:
            x = layer(x, enc, enc_padding_mask, self_attn_mask=self_attn_mask)
        return self.layer_norm(x).transpose(0, 1)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        return self.output_projection(self.extract_features(prev_output_tokens, encoder_out))


def fill_with_neg_inf(t: Tensor) -> Tensor:
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


def future_mask(dim: int) -> Tensor:
    """Additive (dim, dim) mask that hides later target positions."""
    return torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])))  # also: MC503


if __name__ == "__main__":
    torch.manual_seed(0)
    decoder = TransformerDecoder(num_embeddings=50).eval()
    src_len, bsz = 7, 2
    enc = torch.randn(src_len, bsz, 64)
    enc_pad = torch.zeros(bsz, src_len, dtype=torch.bool)
    enc_pad[1, 5:] = True
    encoder_out = {"encoder_out": [enc], "encoder_padding_mask": [enc_pad]}
    prev = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 1, 1]])
    with torch.no_grad():
        logits = decoder(prev, encoder_out)
        mask = decoder.buffered_future_mask(torch.zeros(5, bsz, 64))
        x = torch.randn(5, bsz, 64)
        _, w = decoder.layers[0].self_attn(x, x, x, attn_mask=mask)
    print("logits finite:", bool(torch.isfinite(logits).all()))
    print("row 0 of the future mask has a finite cell:", bool(torch.isfinite(mask[0]).any()))
    print("self-attention weights of position 0 (need_weights=True):", w[0, 0])
    print("weight of each position on itself:", torch.diagonal(w[0]))
