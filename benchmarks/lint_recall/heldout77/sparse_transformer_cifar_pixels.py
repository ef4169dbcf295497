"""Sparse Transformer density model over CIFAR-10 images as sequences of sub-pixels.

Factorized attention: layers alternate a local pattern (the previous row of
sub-pixels) and a strided pattern (every row-length-th position), with the
"fixed" pattern and its summary columns available too, after the OpenAI
sparse_attention reference (get_attn_mask, blocksparse_attention_impl); the
eager path is used for training on CPU and SDPA for sampling.

Source: conventions.md §2.9; huggingface/transformers#32195 (conventions.md §3 item 25); pytorch/pytorch#103963 (item 6)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HPARAMS = {
    "image_size": 4,
    "channels": 3,
    "n_embd": 32,
    "n_head": 4,
    "n_layer": 4,
    "attn_modes": ("local", "strided"),
    "summary_cols": 1,
}


def get_attn_mask(n, attn_mode, local_attn_ctx=None, summary_cols=1, device=None):
    q = torch.arange(n, device=device)[:, None]
    k = torch.arange(n, device=device)[None, :]
    causal = q >= k
    if attn_mode == "all":
        return causal
    if attn_mode == "local":
        return causal & (q - k < local_attn_ctx)
    if attn_mode == "strided":
        return causal & ((q - k) % local_attn_ctx == 0)
    if attn_mode == "fixed":
        same_block = q // local_attn_ctx == k // local_attn_ctx
        summary = k % local_attn_ctx >= local_attn_ctx - summary_cols
        return causal & (same_block | summary)
    raise ValueError(f"unknown attn_mode {attn_mode}")


def split_heads(x, n):
    return x.view(*x.shape[:-1], n, x.shape[-1] // n).transpose(-3, -2)


def merge_heads(x):
    return x.transpose(-3, -2).flatten(-2)


def blocksparse_attention_impl(q, k, v, heads, attn_mode, local_attn_ctx=None, attn_impl="eager"):
    n = q.shape[1]
    q, k, v = split_heads(q, heads), split_heads(k, heads), split_heads(v, heads)
    mask = get_attn_mask(n, attn_mode, local_attn_ctx, HPARAMS["summary_cols"], q.device)
    if attn_impl == "sdpa":
        return merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    scale_amount = 1.0 / math.sqrt(q.shape[-1])
    w = torch.matmul(q, k.transpose(-2, -1)) * scale_amount
    w = w + mask  # expect: MC509 pattern
    w = F.softmax(w, dim=-1)
    return merge_heads(torch.matmul(w, v))


class SparseAttention(nn.Module):
    def __init__(self, n_embd, n_head, attn_mode, local_attn_ctx):
        super().__init__()
        self.n_head, self.attn_mode, self.local_attn_ctx = n_head, attn_mode, local_attn_ctx
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, attn_impl="eager"):
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        a = blocksparse_attention_impl(q, k, v, self.n_head, self.attn_mode, self.local_attn_ctx, attn_impl)
        return self.c_proj(a)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, attn_mode, local_attn_ctx):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = SparseAttention(n_embd, n_head, attn_mode, local_attn_ctx)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, attn_impl="eager"):
        x = x + self.attn(self.ln_1(x), attn_impl)
        return x + self.mlp(self.ln_2(x))


class SparseTransformer(nn.Module):
    def __init__(self, hps=HPARAMS):
        super().__init__()
        self.row_len = hps["image_size"] * hps["channels"]
        self.n_ctx = hps["image_size"] * self.row_len
        self.wte = nn.Embedding(256, hps["n_embd"])
        self.wpe = nn.Parameter(torch.randn(self.n_ctx, hps["n_embd"]) * 0.01)
        modes = hps["attn_modes"]
        self.blocks = nn.ModuleList([
            Block(hps["n_embd"], hps["n_head"], modes[i % len(modes)], self.row_len) for i in range(hps["n_layer"])
        ])
        self.ln_f = nn.LayerNorm(hps["n_embd"])
        self.head = nn.Linear(hps["n_embd"], 256, bias=False)

    def forward(self, pixels, attn_impl="eager"):
        b = pixels.shape[0]
        x = pixels.view(b, -1)
        sos = torch.zeros(b, 1, self.wte.embedding_dim, device=x.device)
        h = torch.cat([sos, self.wte(x[:, :-1])], dim=1) + self.wpe
        for block in self.blocks:
            h = block(h, attn_impl)
        return self.head(self.ln_f(h))

    def bits_per_dim(self, pixels):
        logits = self(pixels)
        nll = F.cross_entropy(logits.transpose(1, 2), pixels.view(pixels.shape[0], -1))
        return nll / math.log(2)

    @torch.no_grad()
    def sample(self, n, generator=None):
        out = torch.zeros(n, self.n_ctx, dtype=torch.long)
        for t in range(self.n_ctx):
            logits = self(out, attn_impl="sdpa")[:, t]
            out[:, t] = torch.multinomial(F.softmax(logits, -1), 1, generator=generator).squeeze(-1)
        return out.view(n, -1, HPARAMS["channels"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SparseTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.randint(0, 256, (4, HPARAMS["image_size"] * HPARAMS["image_size"], HPARAMS["channels"]))
    for step in range(3):
        loss = model.bits_per_dim(images)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} bits/dim {loss.item():.4f}")
    print("fixed pattern keys per row:", get_attn_mask(12, "fixed", 4).sum(-1).tolist())
    print("sample:", model.sample(1, torch.Generator().manual_seed(0))[0, :2].tolist())
