"""One-sentence summaries of mobile app screenshots (Screen2Words-style) from raw pixels.

A PyTorch port of google-research/pix2struct (Flax on T5X): screenshots keep their aspect
ratio and are cut into at most `max_patches` patches with 1-based row / column ids
(`extract_flattened_patches`, id 0 for padding), a ViT encoder reads the flattened patches, and
a T5-style decoder writes the summary. T5X conventions are kept: 0 is both the padding id and
the first decoder input, the decoder's padding comes from `decoder_target_tokens > 0`, and the
encoder mask travels as `encoder_mask`. Flax attention became F.scaled_dot_product_attention.

Source: conventions.md 1 (SDPA is_causal row), 2.7 and 5.8; pytorch/pytorch PR #111007
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SCREENS = {
    "login": ("login screen with email and password fields", [(0.2, 0.9, "field"), (0.35, 0.9, "field"), (0.55, 0.6, "button")]),
    "settings": ("settings page with a list of toggles", [(0.1 + 0.15 * i, 0.9, "toggle") for i in range(5)]),
    "gallery": ("photo gallery with a grid of pictures", [(0.1 + 0.2 * i, 0.9, "image") for i in range(4)]),
    "chat": ("chat conversation with message bubbles", [(0.15, 0.6, "bubble"), (0.35, 0.6, "mine"), (0.55, 0.6, "bubble")]),
    "map": ("map view with a search bar", [(0.05, 0.9, "field"), (0.3, 0.9, "map"), (0.6, 0.9, "map")]),
}
COLORS = {"field": (0.9, 0.9, 0.9), "button": (0.1, 0.4, 0.9), "toggle": (0.2, 0.8, 0.3), "image": (0.8, 0.5, 0.2),
          "bubble": (0.7, 0.7, 0.7), "mine": (0.3, 0.6, 1.0), "map": (0.6, 0.8, 0.6)}
VOCAB = ["<pad>", "</s>"] + sorted({w for text, _ in SCREENS.values() for w in text.split()})


@dataclass
class Pix2StructConfig:
    patch_size: int = 4
    max_patches: int = 72
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    dropout_rate: float = 0.1
    max_decode_len: int = 10


def render_screen(kind, rng):
    height = rng.choice([28, 36, 44])
    image = torch.ones(3, height, 24) * torch.tensor([0.98, 0.98, 0.95])[:, None, None]
    for top, width, element in SCREENS[kind][1]:
        y, w = int(top * height), max(4, int(width * 24))
        x0 = 24 - w if element == "mine" else 1
        image[:, y:y + max(3, height // 10), x0:x0 + w - 1] = torch.tensor(COLORS[element])[:, None, None]
    return image + 0.02 * torch.randn_like(image)


def extract_flattened_patches(image, cfg):
    c, h, w = image.shape
    p = cfg.patch_size
    patches = image.unfold(1, p, p).unfold(2, p, p).permute(1, 2, 0, 3, 4)
    rows, cols = patches.shape[:2]
    row_ids = torch.arange(1, rows + 1)[:, None].expand(rows, cols).reshape(-1, 1).float()
    col_ids = torch.arange(1, cols + 1)[None, :].expand(rows, cols).reshape(-1, 1).float()
    flat = torch.cat([row_ids, col_ids, patches.reshape(rows * cols, -1)], dim=-1)
    out = torch.zeros(cfg.max_patches, flat.shape[-1])
    out[:flat.shape[0]] = flat
    return out


def collate(samples, cfg):
    flattened_patches = torch.stack([extract_flattened_patches(image, cfg) for image, _ in samples])
    targets = [[VOCAB.index(w) for w in text.split()] + [1] for _, text in samples]
    decoder_target_tokens = torch.zeros(len(samples), max(map(len, targets)), dtype=torch.long)
    for i, t in enumerate(targets):
        decoder_target_tokens[i, :len(t)] = torch.tensor(t)
    return {"flattened_patches": flattened_patches, "encoder_mask": flattened_patches[..., 0] > 0,
            "decoder_target_tokens": decoder_target_tokens,
            "decoder_input_tokens": F.pad(decoder_target_tokens, (1, 0))[:, :-1]}


class Attention(nn.Module):
    def __init__(self, cfg, causal=False):
        super().__init__()
        self.num_heads, self.causal, self.dropout_rate = cfg.num_heads, causal, cfg.dropout_rate
        self.query, self.key, self.value, self.out = (nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False) for _ in range(4))

    def heads(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, -1).transpose(1, 2)

    def forward(self, inputs_q, inputs_kv, kv_keep):
        q, k, v = self.heads(self.query(inputs_q)), self.heads(self.key(inputs_kv)), self.heads(self.value(inputs_kv))
        dropout_p = self.dropout_rate if self.training else 0.0
        if self.causal:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=kv_keep[:, None, None, :] & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(), dropout_p=dropout_p)
        else:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=kv_keep[:, None, None, :], dropout_p=dropout_p)
        return self.out(x.transpose(1, 2).flatten(2))


class Block(nn.Module):
    def __init__(self, cfg, decoder):
        super().__init__()
        self.self_attention = Attention(cfg, causal=decoder)
        self.cross_attention = Attention(cfg) if decoder else None
        self.norms = nn.ModuleList(nn.RMSNorm(cfg.hidden_size) for _ in range(3))
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, x, keep, encoded=None, encoder_mask=None):
        y = self.norms[0](x)
        x = x + self.self_attention(y, y, keep)
        if self.cross_attention is not None:
            x = x + self.cross_attention(self.norms[1](x), encoded, encoder_mask)
        return x + self.mlp(self.norms[2](x))


class Pix2Struct(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg, d = cfg, cfg.hidden_size
        self.patch_projection = nn.Linear(3 * cfg.patch_size ** 2, d)
        self.row_embedder, self.column_embedder = nn.Embedding(16, d), nn.Embedding(16, d)
        self.encoder = nn.ModuleList(Block(cfg, False) for _ in range(cfg.num_layers))
        self.token_embedder = nn.Embedding(len(VOCAB), d)
        self.decoder_positions = nn.Embedding(32, d)
        self.decoder = nn.ModuleList(Block(cfg, True) for _ in range(cfg.num_layers))
        self.encoder_norm, self.decoder_norm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.logits_dense = nn.Linear(d, len(VOCAB), bias=False)

    def encode(self, flattened_patches, encoder_mask):
        rows, cols = flattened_patches[..., 0].long(), flattened_patches[..., 1].long()
        x = self.patch_projection(flattened_patches[..., 2:]) + self.row_embedder(rows) + self.column_embedder(cols)
        for block in self.encoder:
            x = block(x, encoder_mask)
        return self.encoder_norm(x)

    def decode(self, encoded, encoder_mask, decoder_input_tokens, decoder_target_tokens):
        positions = torch.arange(decoder_input_tokens.shape[1])
        y = self.token_embedder(decoder_input_tokens) + self.decoder_positions(positions)
        for block in self.decoder:
            y = block(y, decoder_target_tokens > 0, encoded, encoder_mask)
        return self.logits_dense(self.decoder_norm(y))

    def forward(self, batch):
        encoded = self.encode(batch["flattened_patches"], batch["encoder_mask"])
        return self.decode(encoded, batch["encoder_mask"], batch["decoder_input_tokens"], batch["decoder_target_tokens"])

    @torch.no_grad()
    def predict(self, batch):
        encoded = self.encode(batch["flattened_patches"], batch["encoder_mask"])
        tokens = torch.zeros(encoded.shape[0], 1, dtype=torch.long)
        for _ in range(self.cfg.max_decode_len):
            logits = self.decode(encoded, batch["encoder_mask"], tokens, torch.ones_like(tokens))
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
        return tokens[:, 1:]


def main():
    cfg, rng = Pix2StructConfig(), random.Random(0)
    torch.manual_seed(0)
    model = Pix2Struct(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    kinds = sorted(SCREENS)
    for step in range(150):
        batch = collate([(render_screen(k, rng), SCREENS[k][0]) for k in rng.choices(kinds, k=24)], cfg)
        logits = model(batch)
        loss = F.cross_entropy(logits.transpose(1, 2), batch["decoder_target_tokens"], ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    test = [(render_screen(k, rng), SCREENS[k][0]) for k in rng.choices(kinds, k=40)]
    predicted = model.predict(collate(test, cfg)).tolist()
    texts = [" ".join(VOCAB[i] for i in p[:p.index(1)] if i > 1) if 1 in p else "" for p in predicted]
    print("loss %.3f  exact summaries %.3f" % (loss.item(), sum(t == s for t, (_, s) in zip(texts, test)) / len(test)))


if __name__ == "__main__":
    main()
