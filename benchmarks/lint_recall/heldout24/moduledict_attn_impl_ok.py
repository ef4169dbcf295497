"""Decoder whose blocks pick an attention implementation from an nn.ModuleDict.

`TinyDecoder.forward` builds one 4-D mask for every layer, the way transformers 5.x
`sdpa_mask` does: bool (B, 1, L, S), True = the query may attend to the key (causal and not
padding). Each block holds `nn.ModuleDict({"sdpa": ..., "eager": ...})` and calls
`self.attn[self.impl]`. The eager module follows `eager_attention_forward`.

Source: conventions.md §2.9 (a 4-D bool mask, True = keep, given to eager attention that does
`attn_weights + attention_mask`: True adds +1 and nothing is masked; transformers
`models/llama/modeling_llama.py:eager_attention_forward`).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


class SdpaAttention(nn.Module):
    def forward(self, q, k, v, attention_mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)


class EagerAttention(nn.Module):
    def forward(self, q, k, v, attention_mask):
        scaling = q.shape[-1] ** -0.5
        attn_weights = torch.einsum("bhqd,bhkd->bhqk", q, k) * scaling
        if attention_mask is not None:
            attn_weights = torch.where(attention_mask, attn_weights, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights.softmax(dim=-1)
        return torch.einsum("bhqk,bhkd->bhqd", attn_weights, v)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, impl: str = "sdpa"):
        super().__init__()
        self.heads = heads
        self.impl = impl
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.norm = nn.RMSNorm(dim)
        self.attn = nn.ModuleDict({"sdpa": SdpaAttention(), "eager": EagerAttention()})

    def forward(self, x, attention_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = self.attn[self.impl](q, k, v, attention_mask)
        return x + self.o_proj(y.transpose(1, 2).reshape(b, n, d))


class TinyDecoder(nn.Module):
    def __init__(self, vocab=40, dim=32, heads=4, layers=2, impl="sdpa"):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, impl) for _ in range(layers))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def set_impl(self, impl: str):
        for layer in self.layers:
            layer.impl = impl

    def forward(self, input_ids, attention_mask):
        n = input_ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask4d = causal[None, None] & attention_mask.bool()[:, None, None, :]
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, mask4d)
        return self.lm_head(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyDecoder().eval()
    ids = torch.tensor([[4, 8, 15, 16, 23, 0], [4, 8, 15, 16, 23, 39]])
    attention_mask = (ids != PAD_ID).long()
    with torch.no_grad():
        model.set_impl("sdpa")
        ref = model(ids, attention_mask)
        model.set_impl("eager")
        out = model(ids, attention_mask)
        # the future must not matter: change the last token and look at position 0
        ids2 = ids.clone()
        ids2[1, -1] = 7
        out2 = model(ids2, attention_mask)
    print("eager vs sdpa, real tokens:", (ref - out)[attention_mask.bool()].abs().max().item())
    print("position 0 after changing the last token:", (out2 - out)[1, 0].abs().max().item())
