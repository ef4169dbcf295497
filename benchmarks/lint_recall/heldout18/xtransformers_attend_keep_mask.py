"""x-transformers-style (lucidrains) encoder: `exists` / `default`, einsum, an `Attend` module with a
flash path and an einsum path, `max_neg_value`, pre-norm layers and a `TransformerWrapper`
that makes the (b, n) bool `mask` from `pad_id` when none is given (True = attend).

The flash path folds the mask in the library's way (`mask & ~causal_mask`), but the einsum path
fills where the keep-mask is True: `sim.masked_fill(mask, mask_value)` instead of `~mask`.

Source: seed self_attention_mask_guide.txt Q1 (a True where a False is meant), conventions.md §1
direction cheat-sheet, lucidrains/x-transformers#240 and #172 (what True means in `mask`, §4.1).
"""
import torch
import torch.nn.functional as F
from torch import einsum, nn


def exists(val):
    return val is not None


def default(val, d):
    if exists(val):
        return val
    return d() if callable(d) else d


def max_neg_value(t):
    return -torch.finfo(t.dtype).max


def split_heads(t, h):
    return t.reshape(*t.shape[:2], h, -1).transpose(1, 2)  # b n (h d) -> b h n d


class Attend(nn.Module):
    def __init__(self, *, causal=False, dropout=0.0, flash=False):
        super().__init__()
        self.causal, self.flash, self.dropout = causal, flash, dropout

    def create_causal_mask(self, i, j, device):
        return torch.ones((i, j), device=device, dtype=torch.bool).triu(j - i + 1)

    def flash_attn(self, q, k, v, mask=None):
        q_len, k_len, causal = q.shape[-2], k.shape[-2], self.causal
        if exists(mask):
            mask = mask[:, None, None, :]  # b j -> b 1 1 j
        if exists(mask) and causal:
            mask = mask & ~self.create_causal_mask(q_len, k_len, device=q.device)
            causal = False
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=causal)

    def forward(self, q, k, v, mask=None):
        if self.flash:
            return self.flash_attn(q, k, v, mask=mask)
        scale = q.shape[-1] ** -0.5
        sim = einsum('b h i d, b h j d -> b h i j', q, k) * scale
        mask_value = max_neg_value(sim)
        if exists(mask):
            mask = mask[:, None, None, :]  # b j -> b 1 1 j
            sim = sim.masked_fill(mask, mask_value)  # expect: MC519 xtransformers
        if self.causal:
            causal_mask = self.create_causal_mask(sim.shape[-2], sim.shape[-1], device=sim.device)
            sim = sim.masked_fill(causal_mask, mask_value)
        attn = sim.softmax(dim=-1)
        return einsum('b h i j, b h j d -> b h i d', attn, v)


class Attention(nn.Module):
    def __init__(self, dim, dim_head=8, heads=4, causal=False, flash=False):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * heads * 2, bias=False)
        self.attend = Attend(causal=causal, flash=flash)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)

    def forward(self, x, context=None, mask=None):
        context = default(context, x)
        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        q, k, v = map(lambda t: split_heads(t, self.heads), (q, k, v))
        out = self.attend(q, k, v, mask=mask)
        return self.to_out(out.transpose(1, 2).flatten(2))  # b h n d -> b n (h d)


class Encoder(nn.Module):
    def __init__(self, dim, depth, heads=4, flash=False):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([nn.LayerNorm(dim), Attention(dim, heads=heads, flash=flash),
                                              nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))]))
        self.final_norm = nn.LayerNorm(dim)

    def forward(self, x, mask=None):
        for attn_norm, attn, ff_norm, ff in self.layers:
            x = attn(attn_norm(x), mask=mask) + x
            x = ff(ff_norm(x)) + x
        return self.final_norm(x)


class TransformerWrapper(nn.Module):
    def __init__(self, *, num_tokens, max_seq_len, attn_layers, dim=32, pad_id=None):
        super().__init__()
        self.pad_id = pad_id
        self.token_emb, self.pos_emb = nn.Embedding(num_tokens, dim), nn.Embedding(max_seq_len, dim)
        self.attn_layers = attn_layers
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, mask=None):
        if not exists(mask) and exists(self.pad_id):
            mask = x != self.pad_id
        x = self.token_emb(x) + self.pos_emb(torch.arange(x.shape[1], device=x.device))
        return self.to_logits(self.attn_layers(x, mask=mask))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=40, max_seq_len=16, attn_layers=Encoder(dim=32, depth=2), pad_id=0).eval()
    x = torch.tensor([[5, 9, 12, 7, 0, 0], [8, 4, 6, 2, 11, 13]])
    with torch.no_grad():
        padded, alone = model(x), model(x[:1, :4])
        for layer in model.attn_layers.layers:
            layer[1].attend.flash = True
        flash = model(x)
    print("padded vs alone:", (padded[0, :4] - alone[0]).abs().max().item())
    print("einsum path vs flash path:", (padded[:, :4] - flash[:, :4]).abs().max().item())
