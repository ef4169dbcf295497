"""Held-out 3: masks of the wrong direction: a keep-mask used as the masked_fill condition in a
local-window vision attention, and a text classifier's label attention handing SDPA a mask that is
True at padding.

Source: lucidrains/halonet-pytorch#4 ("`Tensor.masked_fill_(mask, value)` fills elements of self
tensor with value where mask is True. So your code ... should be `mask = ~mask.bool()`": the
unfolded ones-mask is 1 at real pixels), InseeFrLab/torchTextClassifiers PR #92 ("the attention
mask was inverted when passed to F.scaled_dot_product_attention").
Surroundings: a vision block's forward with einops-free reshapes, a classifier head taking the
tokenizer's batch.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class HaloAttention(nn.Module):
    def __init__(self, dim: int, block_size: int, halo_size: int, dim_head: int = 64, heads: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.scale = dim_head**-0.5
        self.block_size = block_size
        self.halo_size = halo_size
        inner_dim = dim_head * heads
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        block, halo, heads = self.block_size, self.halo_size, self.heads
        q_inp = x.unfold(2, block, block).unfold(3, block, block).reshape(b, c, -1, block * block)
        q_inp = q_inp.permute(0, 2, 3, 1).reshape(-1, block * block, c)
        kv_inp = F.unfold(x, kernel_size=block + halo * 2, stride=block, padding=halo)
        kv_inp = kv_inp.view(b, c, -1, kv_inp.size(-1)).permute(0, 3, 2, 1).reshape(-1, (block + 2 * halo) ** 2, c)
        q = self.to_q(q_inp) * self.scale
        k, v = self.to_kv(kv_inp).chunk(2, dim=-1)
        q, k, v = (t.reshape(t.size(0), t.size(1), heads, -1).transpose(1, 2).reshape(-1, t.size(1), t.size(2) // heads)
                   for t in (q, k, v))
        sim = torch.einsum("b i d, b j d -> b i j", q, k)
        mask = torch.ones(1, 1, h, w, device=x.device)
        mask = F.unfold(mask, kernel_size=block + (halo * 2), stride=block, padding=halo)
        mask = mask.transpose(1, 2).repeat_interleave(heads, dim=0).repeat(b, 1, 1).reshape(-1, 1, mask.size(1))
        mask = mask.bool()
        max_neg_value = -torch.finfo(sim.dtype).max
        sim.masked_fill_(mask, max_neg_value)  # expect: MC519 unfold-keep
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b i j, b j d -> b i d", attn, v)
        return out


class LabelAttentionClassifier(nn.Module):
    def __init__(self, embedding_dim: int, num_classes: int, n_head: int = 4) -> None:
        super().__init__()
        self.n_head = n_head
        self.label_embeds = nn.Parameter(torch.randn(num_classes, embedding_dim))
        self.k_proj = nn.Linear(embedding_dim, embedding_dim)
        self.v_proj = nn.Linear(embedding_dim, embedding_dim)
        self.head = nn.Linear(embedding_dim, 1)

    def forward(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t, d = token_embeddings.shape
        q = self.label_embeds[None].expand(b, -1, -1).view(b, -1, self.n_head, d // self.n_head).transpose(1, 2)
        k = self.k_proj(token_embeddings).view(b, t, self.n_head, -1).transpose(1, 2)
        v = self.v_proj(token_embeddings).view(b, t, self.n_head, -1).transpose(1, 2)
        pad = attention_mask == 0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])  # expect: MC511 label-attention
        return self.head(out.transpose(1, 2).reshape(b, -1, d)).squeeze(-1)


def classify(model: LabelAttentionClassifier, encoder: nn.Module, tokenizer, texts: list[str]) -> torch.Tensor:
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    token_embeddings = encoder(batch["input_ids"])
    return model(token_embeddings, batch["attention_mask"])
