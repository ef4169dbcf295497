"""Perceiver encoder-classifier ported from the JAX / Haiku Perceiver IO code to PyTorch.

The Haiku code keeps `attend(q, k, v, dropout_prob, attention_mask)` in the
[batch, index, heads, channels] layout with `einsum('bthd,bThd->bhtT')`, builds the
cross-attention mask with `make_cross_attention_mask(query_mask, kv_mask)` (a vmapped
`jnp.outer`), and runs under a `jmp` precision policy; the port keeps the names, the `einsum`
strings and a `Policy` with `param_dtype` / `compute_dtype`, and masks variable-size patch sets.

Source: huggingface/lerobot PR #710, NVIDIA/apex#1052, conventions.md §2.3 and §3 item 19.
"""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Policy:
    param_dtype: torch.dtype = torch.float32
    compute_dtype: torch.dtype = torch.float32


def make_cross_attention_mask(query_mask, kv_mask):
    return torch.einsum("bq,bk->bqk", query_mask.float(), kv_mask.float()).bool()


def attend(q, k, v, attention_mask=None):
    batch, q_indices, num_heads, q_head_dim = q.shape
    attention = torch.einsum("bthd,bThd->bhtT", q, k) * q_head_dim**-0.5
    if attention_mask is not None:
        big_neg = torch.finfo(attention.dtype).min
        attention = attention.masked_fill(~attention_mask[:, None, :, :], big_neg)
    normalized = torch.softmax(attention, dim=-1)
    summed = torch.einsum("bhtT,bThd->bthd", normalized, v)
    return summed.reshape(batch, q_indices, -1)


class Attention(nn.Module):
    def __init__(self, q_dim, kv_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(q_dim, q_dim)
        self.k = nn.Linear(kv_dim, q_dim)
        self.v = nn.Linear(kv_dim, q_dim)
        self.o = nn.Linear(q_dim, q_dim)

    def forward(self, inputs_q, inputs_kv, attention_mask=None):
        b, t, _ = inputs_q.shape
        q = self.q(inputs_q).view(b, t, self.num_heads, -1)
        k = self.k(inputs_kv).view(b, inputs_kv.shape[1], self.num_heads, -1)
        v = self.v(inputs_kv).view(b, inputs_kv.shape[1], self.num_heads, -1)
        return self.o(attend(q, k, v, attention_mask=attention_mask))


class PerceiverClassifier(nn.Module):
    def __init__(self, patch_dim=12, num_latents=4, latent_dim=16, num_heads=2, num_classes=5, policy=Policy()):
        super().__init__()
        self.policy = policy
        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim) * 0.5)
        self.input_proj = nn.Linear(patch_dim + 2, latent_dim)
        self.cross_attend = Attention(latent_dim, latent_dim, 1)
        self.self_attend = Attention(latent_dim, latent_dim, num_heads)
        self.ln_q, self.ln_kv, self.ln_self = nn.LayerNorm(latent_dim), nn.LayerNorm(latent_dim), nn.LayerNorm(latent_dim)
        self.head = nn.Linear(latent_dim, num_classes)
        self.to(policy.param_dtype)

    def forward(self, patches, coords, input_mask):
        dtype = self.policy.compute_dtype
        inputs = self.input_proj(torch.cat([patches, coords], dim=-1).to(dtype))
        latents = self.latents.to(dtype).expand(patches.shape[0], -1, -1)
        query_mask = torch.ones(latents.shape[:2], dtype=torch.bool)
        mask = make_cross_attention_mask(query_mask, input_mask)
        z = latents + self.cross_attend(self.ln_q(latents), self.ln_kv(inputs), attention_mask=mask)
        z = z + self.self_attend(self.ln_self(z), self.ln_self(z))
        return self.head(z.mean(dim=1)).float()


def patchify(images, sizes, patch=2):
    b, c, h, w = images.shape
    grid = images.unfold(2, patch, patch).unfold(3, patch, patch)
    patches = grid.permute(0, 2, 3, 1, 4, 5).reshape(b, (h // patch) * (w // patch), -1)
    ys, xs = torch.meshgrid(torch.arange(h // patch), torch.arange(w // patch), indexing="ij")
    coords = torch.stack([ys, xs], -1).reshape(1, -1, 2).float().expand(b, -1, -1) / (h // patch)
    rows = torch.tensor([s[0] // patch for s in sizes])[:, None]
    cols = torch.tensor([s[1] // patch for s in sizes])[:, None]
    input_mask = (ys.reshape(1, -1) < rows) & (xs.reshape(1, -1) < cols)
    return patches, coords, input_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    images = torch.randn(2, 3, 8, 8)
    sizes = [(8, 8), (6, 4)]
    patches, coords, input_mask = patchify(images, sizes)
    model = PerceiverClassifier().eval()
    with torch.no_grad():
        reference = model(patches, coords, input_mask)
        print("float32 logits:", [[round(v, 3) for v in row] for row in reference.tolist()])
        keep = input_mask[1]
        alone = model(patches[1:, keep], coords[1:, keep], input_mask[1:, keep])
        print("float32 padded vs real patches only:", (alone - reference[1:]).abs().max().item())
        half_policy = Policy(param_dtype=torch.bfloat16, compute_dtype=torch.bfloat16)
        model_bf16 = copy.deepcopy(model).to(half_policy.param_dtype)
        model_bf16.policy = half_policy
        try:
            mixed = model_bf16(patches, coords, input_mask)
            print("bfloat16 compute vs float32, max diff:", (mixed - reference).abs().max().item())
        except RuntimeError as err:
            print("bfloat16 compute raised:", err)
