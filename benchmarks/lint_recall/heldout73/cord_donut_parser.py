"""OCR-free receipt parsing (CORD) with a Donut-style encoder-decoder.

A window-attention image encoder reads the receipt; an mBART-like decoder
prompted with ``<s_cord-v2>`` writes the fields as tokens that
``token2json`` turns back into a dict. ``--fp16`` runs inference in half
precision as the released checkpoints are served.

Source: NVIDIA/apex#1052 and #1105 (conventions.md §3 item 18), huggingface/lerobot PR #710 (item 19); conventions.md §2.3, §5 item 5.
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

NEG_INF = torch.finfo(torch.float32).min
SPECIAL = ["<pad>", "<s>", "</s>", "<s_cord-v2>", "<s_menu>", "</s_menu>", "<s_nm>", "</s_nm>", "<s_price>", "</s_price>", "<s_total>", "</s_total>"]
WORDS = ["latte", "bagel", "tea", "cake", "4.50", "3.00", "2.20", "9.70", "12.00"]
VOCAB = SPECIAL + WORDS
TOK = {t: i for i, t in enumerate(VOCAB)}
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def json2token(obj):
    if isinstance(obj, dict):
        out = []
        for key, value in obj.items():
            out += [f"<s_{key}>"] + json2token(value) + [f"</s_{key}>"]
        return out
    if isinstance(obj, list):
        return [t for item in obj for t in json2token(item)]
    return [str(obj)]


def token2json(tokens):
    stack, out = [{}], []
    for tok in tokens:
        if tok.startswith("<s_") and tok != "<s_cord-v2>":
            stack.append({"key": tok[3:-1], "value": []})
        elif tok.startswith("</s_") and len(stack) > 1:
            node = stack.pop()
            stack[-1].setdefault(node["key"], " ".join(node["value"]) if node["value"] else None)
        elif len(stack) > 1 and not tok.startswith("<"):
            stack[-1]["value"].append(tok)
    out.append(stack[0])
    return out[0]


class WindowBlock(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.window = window
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x, h, w):
        b, _, c = x.shape
        ws = self.window
        win = self.norm1(x).view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        win = self.attn(win, win, win, need_weights=False)[0]
        win = win.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h * w, c)
        x = x + win
        return x + self.mlp(self.norm2(x))


class SwinEncoder(nn.Module):
    def __init__(self, dim=32, heads=4, window=4, patch=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.ModuleList([WindowBlock(dim, heads, window) for _ in range(2)])

    def forward(self, pixel_values):
        x = self.patch_embed(pixel_values)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        for blk in self.blocks:
            x = blk(x, h, w)
        return x


class BartDecoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.self_qkv = nn.Linear(dim, dim * 3)
        self.self_out = nn.Linear(dim, dim)
        self.cross_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.fc = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(3)])

    def self_attention(self, x, allowed):
        b, n, c = x.shape
        q, k, v = self.self_qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(c // self.heads)
        scores = scores.masked_fill(~allowed, NEG_INF)  # expect: MC517 half
        out = scores.softmax(dim=-1) @ v
        return self.self_out(out.transpose(1, 2).reshape(b, n, c))

    def forward(self, x, allowed, encoder_hidden_states):
        x = self.norms[0](x + self.self_attention(x, allowed))
        x = self.norms[1](x + self.cross_attn(x, encoder_hidden_states, encoder_hidden_states, need_weights=False)[0])
        return self.norms[2](x + self.fc(x))


class DonutModel(nn.Module):
    def __init__(self, dim=32, heads=4, max_length=24):
        super().__init__()
        self.encoder = SwinEncoder(dim, heads)
        self.embed_tokens = nn.Embedding(len(VOCAB), dim, padding_idx=PAD_ID)
        self.embed_positions = nn.Embedding(max_length, dim)
        self.layers = nn.ModuleList([BartDecoderLayer(dim, heads) for _ in range(2)])
        self.lm_head = nn.Linear(dim, len(VOCAB), bias=False)

    def decode(self, decoder_input_ids, encoder_hidden_states):
        b, n = decoder_input_ids.shape
        causal = torch.ones(n, n, dtype=torch.bool, device=decoder_input_ids.device).tril()
        allowed = causal[None, None] & (decoder_input_ids != PAD_ID)[:, None, None, :]
        x = self.embed_tokens(decoder_input_ids) + self.embed_positions(torch.arange(n))[None]
        for layer in self.layers:
            x = layer(x, allowed, encoder_hidden_states)
        return self.lm_head(x)

    def forward(self, pixel_values, decoder_input_ids, labels):
        logits = self.decode(decoder_input_ids, self.encoder(pixel_values))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)

    @torch.no_grad()
    def inference(self, pixel_values, prompt="<s_cord-v2>", max_new_tokens=12):
        memory = self.encoder(pixel_values)
        ids = torch.tensor([[TOK[prompt]]] * pixel_values.shape[0])
        for _ in range(max_new_tokens):
            logits = self.decode(ids, memory)[:, -1].float()
            logits[:, [PAD_ID, BOS_ID, TOK[prompt]]] = NEG_INF
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            if (ids[:, -1] == EOS_ID).all():
                break
        return [token2json([VOCAB[i] for i in row.tolist()]) for row in ids]


def prepare_targets(parses, max_length=24):
    seqs = [[TOK["<s_cord-v2>"]] + [TOK[t] for t in json2token(p)] + [EOS_ID] for p in parses]
    width = min(max(map(len, seqs)), max_length)
    ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s[:width])] = torch.tensor(s[:width])
    labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD_ID, -100)
    return ids[:, :-1], labels


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    parses = [{"menu": [{"nm": "latte", "price": "4.50"}, {"nm": "bagel", "price": "3.00"}], "total": "9.70"},
              {"menu": {"nm": "tea", "price": "2.20"}, "total": "2.20"}]
    pixel_values = torch.randn(2, 3, 32, 32)
    decoder_input_ids, labels = prepare_targets(parses)
    model = DonutModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(3):
        loss = model(pixel_values, decoder_input_ids, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    if args.fp16:
        model, pixel_values = model.half(), pixel_values.half()
    print(model.inference(pixel_values))
