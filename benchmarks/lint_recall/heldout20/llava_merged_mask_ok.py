"""LLaVA-like merge: CLIP patch features projected into the LM and spliced in at <image>.

Each prompt holds one IMAGE_TOKEN placeholder; `merge_image_tokens` expands it to N_PATCHES
projected patch embeddings, left-pads the batch for generation and returns the combined
`attention_mask` (1 = real text or image token). The decoder is eager (scores + 4-D bias).
Twin (correct): one bool `future | padding` is filled once with finfo.min (no overflow).
Source: huggingface/transformers PR #27114 and PR #26421, NVIDIA-NeMo/Automodel PR #2658,
conventions.md §2.3 and §3 items 15-16.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, IMAGE_TOKEN, VOCAB, N_PATCHES, DIM = 0, 1, 200, 4, 32


class Projector(nn.Module):  # mm_projector: 2-layer MLP, as in LLaVA-1.5
    def __init__(self, vision_dim=48):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(vision_dim, DIM), nn.GELU(), nn.Linear(DIM, DIM))

    def forward(self, patches):
        return self.net(patches)


def merge_image_tokens(input_ids, image_embeds, embed_tokens):
    rows = []
    for ids, img in zip(input_ids, image_embeds):
        at = ids.tolist().index(IMAGE_TOKEN)
        rows.append(torch.cat([embed_tokens(ids[:at]), img, embed_tokens(ids[at + 1:])]))
    width = max(r.shape[0] for r in rows)
    embeds = torch.stack([F.pad(r, (0, 0, width - r.shape[0], 0)) for r in rows])  # left padding
    attention_mask = torch.stack([torch.arange(width) >= width - r.shape[0] for r in rows]).long()
    return embeds, attention_mask


def build_4d_bias(attention_mask, dtype):
    B, L = attention_mask.shape
    mn = torch.finfo(dtype).min
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    blocked = future | (attention_mask[:, None, None, :] == 0)
    bias = torch.zeros(B, 1, L, L, dtype=dtype).masked_fill(blocked, mn)
    return bias


class DecoderLayer(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.heads, self.qkv, self.o = heads, nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ln, self.mlp = nn.LayerNorm(DIM), nn.Sequential(nn.Linear(DIM, 64), nn.SiLU(), nn.Linear(64, DIM))

    def forward(self, x, bias):
        B, L, _ = x.shape
        q, k, v = self.qkv(self.ln(x)).view(B, L, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        scores = scores + bias
        a = scores.softmax(-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, L, DIM))
        return x + self.mlp(x)


class TinyLlava(nn.Module):
    def __init__(self):
        super().__init__()
        self.projector, self.embed_tokens = Projector(), nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([DecoderLayer() for _ in range(2)])
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, patches):
        x, attention_mask = merge_image_tokens(input_ids, self.projector(patches), self.embed_tokens)
        bias = build_4d_bias(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, bias)
        return self.lm_head(x), attention_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLlava().eval()
    prompts = [torch.tensor([5, IMAGE_TOKEN, 7, 8, 9, 10, 11]), torch.tensor([5, IMAGE_TOKEN, 7])]
    patches = torch.randn(2, N_PATCHES, 48)
    with torch.no_grad():
        logits, am = model(prompts, patches)
        bias = build_4d_bias(am, torch.float32)
        alone, _ = model(prompts[1:], patches[1:])
    print("-inf cells", torch.isinf(bias).sum().item(), "last-token drift", (logits[1, -1] - alone[0, -1]).abs().max().item())
