"""Pix2Seq: object detection as language modelling.

Boxes are quantized into coordinate bins and written, with their class token,
as one token sequence per image; a ViT encoder reads the padded image batch and
a causal decoder emits the sequence, with a key/value cache at inference.

Source: conventions.md section 1 (the SDPA is_causal row), section 2.7 and
section 5 item 8; pytorch/pytorch PR #111007.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_BINS = 64
NUM_CLASSES = 10
PAD, BOS, DETECT, EOS = 0, 1, 2, 3
COORD_OFFSET = 4
CLASS_OFFSET = COORD_OFFSET + NUM_BINS
VOCAB = CLASS_OFFSET + NUM_CLASSES
PROMPT = (BOS, DETECT)


def build_target_sequence(boxes, labels, max_objects):
    seq = list(PROMPT)
    for box, label in zip(boxes.tolist(), labels.tolist()):
        bins = [COORD_OFFSET + min(int(c * NUM_BINS), NUM_BINS - 1) for c in box]
        seq += bins + [CLASS_OFFSET + label]
    seq.append(EOS)
    width = len(PROMPT) + 5 * max_objects + 1
    return torch.tensor(seq + [PAD] * (width - len(seq)))


class ImageEncoder(nn.Module):
    def __init__(self, dim=64, patch=8, depth=2, heads=4):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, 256, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)

    def forward(self, pixels, pixel_mask):
        x = self.embed(pixels).flatten(2).transpose(1, 2)
        patch_pad = F.max_pool2d(pixel_mask[:, None].float(), self.patch)[:, 0] > 0.5
        patch_pad = patch_pad.flatten(1)
        x = self.blocks(x + self.pos[:, : x.shape[1]], src_key_padding_mask=patch_pad)
        return x, ~patch_pad


class CachedSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(t, k.shape[2], dtype=torch.bool, device=q.device).tril(k.shape[2] - t))
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn = CachedSelfAttention(dim, heads)
        self.q_proj, self.kv_proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim)
        self.o_proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def cross(self, x, memory, memory_keep):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv_proj(memory).view(b, memory.shape[1], 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_keep[:, None, None, :])
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, memory, memory_keep, cache=None):
        x = x + self.self_attn(self.ln1(x), cache=cache)
        x = x + self.cross(self.ln2(x), memory, memory_keep)
        return x + self.mlp(self.ln3(x))


class Pix2Seq(nn.Module):
    def __init__(self, dim=64, heads=4, depth=2, max_len=64):
        super().__init__()
        self.encoder = ImageEncoder(dim)
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([DecoderBlock(dim, heads) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)

    def decode(self, tokens, memory, memory_keep, caches=None, start=0):
        positions = torch.arange(start, start + tokens.shape[1])
        x = self.tok(tokens) + self.pos(positions)
        for i, blk in enumerate(self.blocks):
            x = blk(x, memory, memory_keep, cache=None if caches is None else caches[i])
        return self.lm_head(self.ln_f(x))

    def forward(self, pixels, pixel_mask, seq):
        memory, memory_keep = self.encoder(pixels, pixel_mask)
        return self.decode(seq[:, :-1], memory, memory_keep)

    @torch.no_grad()
    def generate(self, pixels, pixel_mask, max_new_tokens=15):
        memory, memory_keep = self.encoder(pixels, pixel_mask)
        caches = [{} for _ in self.blocks]
        seq = torch.tensor([PROMPT] * pixels.shape[0])
        logits = self.decode(seq, memory, memory_keep, caches)
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            logits = self.decode(nxt, memory, memory_keep, caches, start=seq.shape[1])
            seq = torch.cat([seq, nxt], dim=1)
        return seq


if __name__ == "__main__":
    torch.manual_seed(0)
    pixels = torch.zeros(2, 3, 64, 64)
    pixel_mask = torch.ones(2, 64, 64, dtype=torch.bool)
    pixels[0], pixel_mask[0] = torch.randn(3, 64, 64), False
    pixels[1, :, :48, :40], pixel_mask[1, :48, :40] = torch.randn(3, 48, 40), False
    seq = torch.stack([
        build_target_sequence(torch.tensor([[0.1, 0.2, 0.5, 0.6], [0.3, 0.3, 0.9, 0.8]]), torch.tensor([2, 5]), 2),
        build_target_sequence(torch.tensor([[0.2, 0.1, 0.4, 0.7]]), torch.tensor([7]), 2),
    ])
    model = Pix2Seq()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        logits = model(pixels, pixel_mask, seq)
        loss = F.cross_entropy(logits.flatten(0, 1), seq[:, 1:].flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print("loss", round(loss.item(), 4), "generated", tuple(model.generate(pixels, pixel_mask).shape))
