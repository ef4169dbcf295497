"""Detecting algorithmically generated domains (DGA) in DNS queries, exported to ONNX for the resolver.

A character-level transformer reads the registered domain (TLD stripped) and scores it as
benign or DGA. The resolver plugin runs ONNX Runtime with int64 `input_ids` and
`attention_mask` of shape (batch, 63); `DGAExportWrapper` gives the exported graph that
signature, and `export_onnx` writes `dga_detector.onnx` with dynamic batch and length axes.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6), huggingface/transformers#32195 (item 25), section 1 (SDPA row).
"""

import random
import string

import torch
import torch.nn as nn
import torch.nn.functional as F

CHARS = string.ascii_lowercase + string.digits + "-"
PAD, UNK = 0, 1
STOI = {c: i + 2 for i, c in enumerate(CHARS)}
MAX_LEN = 63
WORDS = ["mail", "shop", "cloud", "news", "bank", "login", "secure", "home", "store", "media", "app", "my", "online",
         "travel", "best", "city", "data", "smart", "green", "blue", "web", "tech", "food", "health"]


def benign_domain(rng):
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) + (str(rng.randint(1, 99)) if rng.random() < 0.1 else "")


def dga_domain(rng):
    alphabet = string.ascii_lowercase + (string.digits if rng.random() < 0.5 else "")
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 28)))


def encode(domains):
    ids = [[STOI.get(c, UNK) for c in d[:MAX_LEN]] for d in domains]
    width = max(len(x) for x in ids)
    input_ids = torch.tensor([x + [PAD] * (width - len(x)) for x in ids])
    return input_ids, (input_ids != PAD).long()


def additive_bias(keep, dtype):
    return torch.where(keep[:, None, None, :], 0.0, torch.finfo(dtype).min).to(dtype)


class CharBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, attn_bias):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class DGADetector(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(len(CHARS) + 2, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(MAX_LEN, d_model)
        self.blocks = nn.ModuleList([CharBlock(d_model, n_heads) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)

    def forward(self, input_ids, attn_bias, keep):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        for block in self.blocks:
            x = block(x, attn_bias)
        w = keep.unsqueeze(-1).to(x.dtype)
        return self.head(self.norm((x * w).sum(1) / w.sum(1))).squeeze(-1)

    def score(self, input_ids, attention_mask):
        keep = attention_mask.bool()
        return self(input_ids, additive_bias(keep, self.pos.weight.dtype), keep)


class DGAExportWrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        attn_bias = attention_mask[:, None, None, :].to(torch.float32)  # expect: MC508 wrapper
        keep = attention_mask > 0
        return torch.sigmoid(self.model(input_ids, attn_bias, keep))


def train(steps=600, batch_size=64, seed=0):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = DGADetector()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        labels = torch.tensor([rng.random() < 0.5 for _ in range(batch_size)], dtype=torch.float32)
        input_ids, attention_mask = encode([dga_domain(rng) if y else benign_domain(rng) for y in labels.tolist()])
        loss = F.binary_cross_entropy_with_logits(model.score(input_ids, attention_mask), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def export_onnx(model, path="dga_detector.onnx"):
    wrapper = DGAExportWrapper(model.eval())
    input_ids, attention_mask = encode(["mailbox", "xjwqpzkvhtr"])
    torch.onnx.export(
        wrapper, (input_ids, attention_mask), path,
        input_names=["input_ids", "attention_mask"], output_names=["p_dga"],
        dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}, "p_dga": {0: "batch"}},
        opset_version=17,
    )


if __name__ == "__main__":
    detector = train()
    export_onnx(detector)
