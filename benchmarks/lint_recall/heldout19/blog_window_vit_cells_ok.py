"""Vision Transformer from scratch, part 2: windowed attention (a blog post's notebook) (correct twin).

Exported with `# %%` cells: patch embedding, a block-diagonal attention mask so that each patch
attends only within its window of two patch rows, a small ViT with pre-norm blocks on
`F.scaled_dot_product_attention`, global average pooling, and a few training steps on random
images. The mask cell follows the widely shared `create_block_mask` recipe: it starts from
`torch.zeros`, writes 0 into the window blocks, then turns every cell still equal to 0 into -inf.
Every cell is 0 at that point, so every cell becomes -inf, each patch attends to nothing and
SDPA returns zeros: the attention blocks do nothing, silently.

Twin: starts from `torch.full(..., -math.inf)` and writes 0 into the windows (no `== 0` pass).

Source: seed self_attention_mask_guide.txt §6 `create_block_mask` (`mask = torch.zeros(sz, sz)`,
blocks written 0, `mask[mask == 0] = float('-inf')`).
"""

# %% [markdown]
# # Vision Transformer from scratch, part 2: windowed attention

# %%
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
img_size, patch_size, in_chans, num_classes = 32, 4, 3, 10
grid = img_size // patch_size          # 8 x 8 patches
num_patches = grid * grid              # 64 tokens
window = 2 * grid                      # a window is two rows of patches

# %% [markdown]
# ## The window mask (0 = may attend, -inf = blocked)

# %%
attn_mask = torch.full((num_patches, num_patches), -math.inf)
for start in range(0, num_patches, window):
    attn_mask[start:start + window, start:start + window] = 0
print("visible cells per row:", torch.isfinite(attn_mask).sum(dim=1)[:4].tolist())


# %% [markdown]
# ## Model

# %%
class PatchEmbedding(nn.Module):
    def __init__(self, patch_size, in_chans, embed_dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.norm1(x), attn_mask)
        return x + self.mlp(self.norm2(x))


class WindowViT(nn.Module):
    def __init__(self, attn_mask, dim=64, depth=2, num_heads=4):
        super().__init__()
        self.patch_embed = PatchEmbedding(patch_size, in_chans, dim)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.register_buffer("attn_mask", attn_mask)

    def forward(self, x):
        x = self.patch_embed(x) + self.pos_embed
        for blk in self.blocks:
            x = blk(x, self.attn_mask)
        return self.head(self.norm(x).mean(dim=1))  # global average pooling


# %% [markdown]
# ## A few training steps on random images

# %%
model = WindowViT(attn_mask)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
images, labels = torch.randn(16, in_chans, img_size, img_size), torch.randint(0, num_classes, (16,))
for step in range(5):
    loss = F.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")

# %% sanity check: does attention move the tokens at all, and does it stay inside the window?
tokens = model.patch_embed(images[:1]) + model.pos_embed
with torch.no_grad():
    attn_out = model.blocks[0].attn(model.blocks[0].norm1(tokens), attn_mask)
    bumped = tokens.clone()
    bumped[:, -1] += 1.0  # change a patch in the last window
    moved = model.blocks[0].attn(model.blocks[0].norm1(bumped), attn_mask) - attn_out
print("attention output spread:", attn_out.std(dim=1).mean().item())
print("first window moved by a last-window patch:", moved[:, :window].abs().max().item())
