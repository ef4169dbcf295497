"""PaliGemma-style captioner: a ViT over variable-resolution images and a prefix-LM decoder.

Images of different sizes give different numbers of patches; the processor pads the patch
sequences to the longest image in the batch and returns `patch_counts`. The image tokens and the
text prompt form the prefix, attended bidirectionally; the answer (suffix) is attended causally.
Text is right-padded and comes with an int64 `attention_mask`.

Source: conventions.md §1, §2.6 and §5 item 6
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
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attn_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class VisionTower(nn.Module):
    def __init__(self, patch_dim=12, dim=32, heads=4, depth=2, max_patches=16):
        super().__init__()
        self.embed = nn.Linear(patch_dim, dim)
        self.pos = nn.Parameter(torch.randn(max_patches, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))

    def forward(self, patches, patch_keep):
        x = self.embed(patches) + self.pos[: patches.shape[1]]
        for blk in self.blocks:
            x = blk(x, attn_mask=patch_keep)  # expect: MC515 patches
        return x


class PaliGemmaLike(nn.Module):
    def __init__(self, vocab=60, dim=32, heads=4, depth=2):
        super().__init__()
        self.vision = VisionTower(dim=dim, heads=heads)
        self.projector = nn.Linear(dim, dim)
        self.embed = nn.Embedding(vocab, dim)
        self.decoder = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, patches, patch_counts, input_ids, attention_mask, prompt_lengths):
        b, p = patches.shape[:2]
        patch_keep = torch.arange(p)[None, :] < patch_counts[:, None]
        image_tokens = self.projector(self.vision(patches, patch_keep))
        h = torch.cat([image_tokens, self.embed(input_ids)], dim=1)
        keep = torch.cat([patch_keep, attention_mask.bool()], dim=1)
        n = h.shape[1]
        pos = torch.arange(n)
        causal = pos[:, None] >= pos[None, :]
        in_prefix = pos[None, :] < (p + prompt_lengths)[:, None]
        allowed = (causal | (in_prefix[:, :, None] & in_prefix[:, None, :])) & keep[:, None, :]
        for blk in self.decoder:
            h = blk(h, attn_mask=allowed[:, None])
        return self.lm_head(h[:, p:])


def caption_loss(logits, input_ids, attention_mask, prompt_lengths):
    t = input_ids.shape[1]
    is_suffix = torch.arange(t)[None, :] >= prompt_lengths[:, None]
    labels = input_ids.masked_fill(~(is_suffix & attention_mask.bool()), -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


if __name__ == "__main__":
    torch.manual_seed(0)
    counts = torch.tensor([4, 2, 1, 3])
    patches = torch.randn(4, 4, 12) * (torch.arange(4)[None, :, None] < counts[:, None, None])
    texts = [[3, 4, 5, 9, 10], [3, 6, 11, 12, 13], [3, 7, 14], [3, 8, 15, 16]]
    prompt_lengths = torch.tensor([3, 2, 2, 2])
    t = max(map(len, texts))
    input_ids = torch.tensor([x + [0] * (t - len(x)) for x in texts])
    attention_mask = torch.tensor([[1] * len(x) + [0] * (t - len(x)) for x in texts], dtype=torch.long)
    model = PaliGemmaLike().eval()
    with torch.no_grad():
        logits = model(patches, counts, input_ids, attention_mask, prompt_lengths)
        loss = caption_loss(logits, input_ids, attention_mask, prompt_lengths)
    print("logits", tuple(logits.shape), "loss", round(loss.item(), 4))
