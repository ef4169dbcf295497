"""Vision transformer that prunes uninformative patch tokens halfway through the stack.

After the first stage, each patch is scored by the [CLS] token's attention; patches above the
image's mean importance survive, so images keep different numbers of tokens. Survivors are packed
to the front (the [CLS] token stays first) and the rest of each row is padding, marked in
`pad` (True = padding slot). The second stage runs F.scaled_dot_product_attention.

Source: rasbt/LLMs-from-scratch#1061, conventions.md §1 direction cheat-sheet and §4.1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pad=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if pad is None:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])  # expect: MC511 vit
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x)), q, k


def prune_tokens(x, q_cls, k):
    importance = (q_cls @ k[:, :, 1:].transpose(-2, -1)).softmax(-1).mean(1).squeeze(1)
    keep = importance >= importance.mean(dim=-1, keepdim=True)
    order = torch.argsort(keep.int(), dim=1, descending=True, stable=True)
    n_kept = keep.sum(1)
    patches = torch.gather(x[:, 1:], 1, order[..., None].expand(-1, -1, x.size(-1)))
    width = int(n_kept.max())
    pad = torch.arange(width + 1, device=x.device)[None, :] > n_kept[:, None]
    return torch.cat([x[:, :1], patches[:, :width]], dim=1), pad


class PrunedViT(nn.Module):
    def __init__(self, patch=4, image=16, dim=32, heads=4, depth=4, num_classes=10):
        super().__init__()
        self.to_patches = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.stage1 = nn.ModuleList(Block(dim, heads) for _ in range(depth // 2))
        self.stage2 = nn.ModuleList(Block(dim, heads) for _ in range(depth - depth // 2))
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.to_patches(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1) + self.pos
        for block in self.stage1:
            x, q, k = block(x)
        x, pad = prune_tokens(x, q[:, :, :1], k)
        for block in self.stage2:
            x, _, _ = block(x, pad)
        pooled = (x * ~pad[..., None]).sum(1) / (~pad).sum(1, keepdim=True)
        return self.head(x[:, 0] + pooled)


if __name__ == "__main__":
    torch.manual_seed(0)
    images, labels = torch.randn(6, 3, 16, 16), torch.randint(0, 10, (6,))
    model = PrunedViT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")
