"""Kaggle kernel, "LLM - Detect AI Generated Text": a tiny decoder-only classifier trained from scratch.

Competition-notebook layout: CFG, a toy byte tokenizer with left padding (decoder models pool the
last token), Dataset and collate, a small causal transformer whose mask helpers were copied from
an older transformers release (`_make_causal_mask`, `_expand_mask`,
`_prepare_decoder_attention_mask`), a train loop and the submission step.

Source: huggingface/transformers PR #27114 (and PR #26421), NVIDIA-NeMo/Automodel PR #2658,
conventions.md section 2.3 and section 5 item 4 (a causal plane and a padding plane, both filled
with finfo.min, summed: the overlap becomes -inf).
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class CFG:
    seed = 2023
    max_len = 40
    batch_size = 8
    epochs = 3
    lr = 1e-3
    d_model = 48
    n_heads = 4
    n_layers = 2
    pad_id = 0


def encode(text):
    ids = [b + 1 for b in text.encode("utf-8")][-CFG.max_len:]
    return ids


class EssayDataset(Dataset):
    def __init__(self, texts, labels=None):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return encode(self.texts[i]), (self.labels[i] if self.labels is not None else -1)


def collate_left_pad(batch):
    L = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), L), CFG.pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(batch), L, dtype=torch.long)
    for i, (ids, _) in enumerate(batch):
        input_ids[i, L - len(ids):] = torch.tensor(ids)
        attention_mask[i, L - len(ids):] = 1
    return input_ids, attention_mask, torch.tensor([y for _, y in batch])


def _make_causal_mask(tgt_len, dtype, device):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    return torch.triu(mask, diagonal=1)[None, None, :, :]  # (1, 1, L, L)


def _expand_mask(mask, dtype):
    inverted_mask = 1.0 - mask[:, None, None, :].to(dtype)  # (B, 1, 1, L), 1.0 at padding
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _prepare_decoder_attention_mask(attention_mask, dtype):
    causal = _make_causal_mask(attention_mask.shape[-1], dtype, attention_mask.device)
    expanded = _expand_mask(attention_mask, dtype)
    return torch.minimum(expanded, causal)


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.qkv, self.o = h, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, attn_bias):
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        w = q @ k.transpose(-1, -2) / math.sqrt(D // self.h) + attn_bias
        x = x + self.o((w.softmax(-1) @ v).transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.ln2(x))


class DetectModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(257, CFG.d_model, padding_idx=CFG.pad_id)
        self.pos = nn.Embedding(CFG.max_len, CFG.d_model)
        self.blocks = nn.ModuleList([Block(CFG.d_model, CFG.n_heads) for _ in range(CFG.n_layers)])
        self.head = nn.Linear(CFG.d_model, 1)

    def forward(self, input_ids, attention_mask):
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.emb(input_ids) + self.pos(positions)
        attn_bias = _prepare_decoder_attention_mask(attention_mask, x.dtype)
        for blk in self.blocks:
            x = blk(x, attn_bias)
        return self.head(x[:, -1]).squeeze(-1)  # left padding: the last token is real


if __name__ == "__main__":
    random.seed(CFG.seed)
    torch.manual_seed(CFG.seed)
    human = ["i went to the park and it was fun", "my dog ate my homework again", "we should have less homework"]
    ai = ["In conclusion, technology offers numerous benefits.", "Furthermore, it is essential to consider this."]
    texts = [random.choice(human) for _ in range(16)] + [random.choice(ai) for _ in range(16)]
    labels = [0.0] * 16 + [1.0] * 16
    loader = DataLoader(EssayDataset(texts, labels), batch_size=CFG.batch_size, shuffle=True, collate_fn=collate_left_pad)
    model = DetectModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    for epoch in range(CFG.epochs):
        for input_ids, attention_mask, y in loader:
            loss = F.binary_cross_entropy_with_logits(model(input_ids, attention_mask), y.float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    input_ids, attention_mask, _ = collate_left_pad([(encode(t), -1) for t in ["my dog", human[2], ai[0]]])
    bias = _prepare_decoder_attention_mask(attention_mask, torch.float32)
    print("-inf cells in the mask (expect 0):", torch.isinf(bias).sum().item())
    with torch.no_grad():
        print("submission:", torch.sigmoid(model(input_ids, attention_mask)).tolist())
