"""CLIP-like text tower: causal Transformer over BPE ids, pooled at the EOT token, contrastive loss.

Follows openai/CLIP model.py: `build_attention_mask` registered once, ResidualAttentionBlock on
nn.MultiheadAttention (sequence-first, need_weights=False), `text_projection`, `logit_scale`.
Bug: the causal mask is built with triu and no diagonal=1: every token is hidden from itself.
Source: seed self_attention_mask_guide.txt §3 (`generate_causal_mask`:
`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`), conventions.md §2.7.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SOT, EOT, VOCAB = 1, 99, 100


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, attn_mask):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.attn_mask = attn_mask

    def attention(self, x):
        mask = self.attn_mask[: x.shape[0], : x.shape[0]]
        return self.attn(x, x, x, need_weights=False, attn_mask=mask)[0]

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TextTower(nn.Module):
    def __init__(self, context_length=16, width=32, heads=4, layers=2, embed_dim=24):
        super().__init__()
        self.context_length = context_length
        self.token_embedding = nn.Embedding(VOCAB, width)
        self.positional_embedding = nn.Parameter(torch.randn(context_length, width) * 0.01)
        mask = self.build_attention_mask()
        self.blocks = nn.ModuleList([ResidualAttentionBlock(width, heads, mask) for _ in range(layers)])
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.randn(width, embed_dim) * width ** -0.5)
        self.logit_scale = nn.Parameter(torch.tensor(2.659))

    def build_attention_mask(self):
        n = self.context_length
        return torch.triu(torch.full((n, n), float("-inf")))  # expect: MC503 clip

    def encode_text(self, text):
        x = self.token_embedding(text) + self.positional_embedding
        x = x.permute(1, 0, 2)  # NLD -> LND
        for block in self.blocks:
            x = block(x)
        x = self.ln_final(x.permute(1, 0, 2))
        # features at the EOT token (the highest id in each sequence)
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection


def tokenize(texts, context_length=16):
    out = torch.zeros(len(texts), context_length, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = [SOT] + [2 + sum(map(ord, w)) % (EOT - 2) for w in t.split()][: context_length - 2] + [EOT]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    tower = TextTower()
    image_features = F.normalize(torch.randn(4, 24), dim=-1)  # stand-in for the image tower
    text = tokenize(["a photo of a cat", "a photo of a dog", "a diagram", "red car on a street"])
    opt = torch.optim.AdamW(tower.parameters(), lr=1e-3)
    for _ in range(50):
        text_features = F.normalize(tower.encode_text(text), dim=-1)
        logits = tower.logit_scale.exp() * image_features @ text_features.T
        labels = torch.arange(4)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4), "mask row 0", tower.build_attention_mask()[0, :3].tolist())
