"""ESM-2 protein language model with masked-residue training and a contact prediction head.

Layout of facebookresearch/esm (esm/model/esm2.py, esm/modules.py, esm/multihead_attention.py).
Source: seed masked_fill_inplace.txt (注意, 梯度计算风险),
conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

AMINO_ACIDS = "LAGVSERTIDPKQNFYMHWC"


class Alphabet:
    def __init__(self) -> None:
        self.all_toks = ["<cls>", "<pad>", "<eos>", "<unk>", *AMINO_ACIDS, "<mask>"]
        self.tok_to_idx = {t: i for i, t in enumerate(self.all_toks)}
        self.padding_idx, self.cls_idx = self.tok_to_idx["<pad>"], self.tok_to_idx["<cls>"]
        self.eos_idx, self.mask_idx = self.tok_to_idx["<eos>"], self.tok_to_idx["<mask>"]

    def get_batch_converter(self):
        def convert(raw_batch: list[tuple[str, str]]):
            max_len = max(len(seq) for _, seq in raw_batch)
            tokens = torch.full((len(raw_batch), max_len + 2), self.padding_idx, dtype=torch.int64)
            for i, (_, seq) in enumerate(raw_batch):
                tokens[i, 0] = self.cls_idx
                tokens[i, 1 : len(seq) + 1] = torch.tensor([self.tok_to_idx[a] for a in seq])
                tokens[i, len(seq) + 1] = self.eos_idx
            return [label for label, _ in raw_batch], [seq for _, seq in raw_batch], tokens

        return convert


@dataclass
class ESM2Config:
    num_layers: int = 3
    embed_dim: int = 64
    attention_heads: int = 4
    token_dropout: bool = True


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, q: torch.Tensor, k: torch.Tensor):
        t = torch.arange(k.shape[-2], device=k.device).type_as(self.inv_freq)
        emb = torch.cat([torch.outer(t, self.inv_freq)] * 2, dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj, self.k_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim),
            nn.Linear(embed_dim, embed_dim),
        )
        self.rot_emb = RotaryEmbedding(dim=self.head_dim)

    def forward(self, query, key_padding_mask=None, need_head_weights=False):
        tgt_len, bsz, embed_dim = query.size()

        def shape(t: torch.Tensor) -> torch.Tensor:
            return t.view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q, k, v = (
            shape(self.q_proj(query) * self.scaling),
            shape(self.k_proj(query)),
            shape(self.v_proj(query)),
        )
        q, k = self.rot_emb(q, k)
        attn_weights = q @ k.transpose(-1, -2)
        if key_padding_mask is not None:
            attn_weights = attn_weights.masked_fill(
                key_padding_mask[:, None, None, :], float("-inf")
            )
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        if key_padding_mask is not None:
            attn_weights_float = attn_weights_float.masked_fill(key_padding_mask[:, None, :, None], 0.0)
        attn = (
            (attn_weights_float.type_as(v) @ v).permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        )
        return self.out_proj(attn), (attn_weights_float if need_head_weights else None)


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1, self.fc2 = (
            nn.Linear(embed_dim, 4 * embed_dim),
            nn.Linear(4 * embed_dim, embed_dim),
        )
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, self_attn_padding_mask=None, need_head_weights=False):
        residual = x
        x, attn = self.self_attn(
            self.self_attn_layer_norm(x),
            key_padding_mask=self_attn_padding_mask,
            need_head_weights=need_head_weights,
        )
        x = residual + x
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return x, attn


def symmetrize(x: torch.Tensor) -> torch.Tensor:
    return x + x.transpose(-1, -2)


def apc(x: torch.Tensor) -> torch.Tensor:
    a1, a2 = x.sum(-1, keepdims=True), x.sum(-2, keepdims=True)
    a12 = x.sum((-1, -2), keepdims=True)
    return x - a1 * a2 / a12.clamp(min=1e-8)


class ContactPredictionHead(nn.Module):
    def __init__(self, in_features: int, eos_idx: int) -> None:
        super().__init__()
        self.eos_idx = eos_idx
        self.regression = nn.Linear(in_features, 1)

    def forward(self, tokens: torch.Tensor, attentions: torch.Tensor) -> torch.Tensor:
        eos_mask = tokens.ne(self.eos_idx).to(attentions)
        eos_mask = eos_mask.unsqueeze(1) * eos_mask.unsqueeze(2)
        attentions = attentions * eos_mask[:, None, None, :, :]
        attentions = attentions[..., 1:-1, 1:-1]
        batch_size, layers, heads, seqlen, _ = attentions.size()
        attentions = apc(symmetrize(attentions.view(batch_size, layers * heads, seqlen, seqlen)))
        return torch.sigmoid(self.regression(attentions.permute(0, 2, 3, 1)).squeeze(3))


class ESM2(nn.Module):
    def __init__(self, cfg: ESM2Config, alphabet: Alphabet) -> None:
        super().__init__()
        self.cfg, self.alphabet = cfg, alphabet
        self.padding_idx, self.mask_idx = alphabet.padding_idx, alphabet.mask_idx
        self.embed_scale = 1.0
        self.embed_tokens = nn.Embedding(
            len(alphabet.all_toks), cfg.embed_dim, padding_idx=self.padding_idx
        )
        self.layers = nn.ModuleList(
            TransformerLayer(cfg.embed_dim, cfg.attention_heads) for _ in range(cfg.num_layers)
        )
        self.emb_layer_norm_after = nn.LayerNorm(cfg.embed_dim)
        self.lm_head = nn.Linear(cfg.embed_dim, len(alphabet.all_toks))
        self.contact_head = ContactPredictionHead(
            cfg.num_layers * cfg.attention_heads, alphabet.eos_idx
        )

    def forward(self, tokens: torch.Tensor, return_contacts: bool = False):
        padding_mask = tokens.eq(self.padding_idx)
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.cfg.token_dropout:
            x = x.masked_fill((tokens == self.mask_idx).unsqueeze(-1), 0.0)
            mask_ratio_train = 0.15 * 0.8
            src_lengths = (~padding_mask).sum(-1)
            mask_ratio_observed = (tokens == self.mask_idx).sum(-1).to(x.dtype) / src_lengths
            x = x * (1 - mask_ratio_train) / (1 - mask_ratio_observed)[:, None, None]
        x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)
        attn_weights = []
        for layer in self.layers:
            x, attn = layer(
                x, self_attn_padding_mask=padding_mask, need_head_weights=return_contacts
            )
            if return_contacts:
                attn_weights.append(attn)
        result = {"logits": self.lm_head(self.emb_layer_norm_after(x).transpose(0, 1))}
        if return_contacts:
            attentions = torch.stack(attn_weights, 1)
            keep = 1 - padding_mask.type_as(attentions)
            attentions = attentions * (keep.unsqueeze(1) * keep.unsqueeze(2))[:, None, None, :, :]
            result["contacts"] = self.contact_head(tokens, attentions)
        return result


def mask_tokens(tokens: torch.Tensor, alphabet: Alphabet, gen: torch.Generator):
    special = (
        (tokens == alphabet.padding_idx)
        | (tokens == alphabet.cls_idx)
        | (tokens == alphabet.eos_idx)
    )
    chosen = (torch.rand(tokens.shape, generator=gen) < 0.15) & ~special
    labels = tokens.masked_fill(~chosen, -100)
    inputs = tokens.masked_fill(chosen, alphabet.mask_idx)
    return inputs, labels


def synthetic_proteins(n: int, gen: torch.Generator):
    seqs, contacts = [], []
    for i in range(n):
        length = int(torch.randint(12, 30, (1,), generator=gen))
        half = "".join(
            AMINO_ACIDS[j] for j in torch.randint(0, 10, (length // 2,), generator=gen).tolist()
        )
        mirror = "".join(AMINO_ACIDS[AMINO_ACIDS.index(a) + 10] for a in reversed(half))
        seq = half + mirror
        idx = torch.arange(len(seq))
        contacts.append((idx[:, None] + idx[None, :] == len(seq) - 1).float())
        seqs.append((f"prot{i}", seq))
    return seqs, contacts


if __name__ == "__main__":
    torch.manual_seed(0)
    alphabet = Alphabet()
    batch_converter = alphabet.get_batch_converter()
    model = ESM2(ESM2Config(), alphabet)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    gen = torch.Generator().manual_seed(0)
    for step in range(60):
        raw, contact_maps = synthetic_proteins(16, gen)
        _, seqs, tokens = batch_converter(raw)
        inputs, labels = mask_tokens(tokens, alphabet, gen)
        out = model(inputs, return_contacts=True)
        mlm = F.cross_entropy(out["logits"].flatten(0, 1), labels.flatten(), ignore_index=-100)
        target = torch.zeros_like(out["contacts"])
        valid = torch.zeros_like(out["contacts"], dtype=torch.bool)
        for i, c in enumerate(contact_maps):
            target[i, : c.shape[0], : c.shape[1]], valid[i, : c.shape[0], : c.shape[1]] = c, True
        contact_loss = F.binary_cross_entropy(out["contacts"][valid], target[valid])
        loss = mlm + contact_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} mlm {mlm.item():.3f} contact {contact_loss.item():.3f}")
    model.eval()
    raw, _ = synthetic_proteins(4, gen)
    _, _, tokens = batch_converter(raw)
    i = min(range(len(raw)), key=lambda j: len(raw[j][1]))
    with torch.no_grad():
        batched = model(tokens)["logits"][i]
        alone = model(batch_converter(raw[i : i + 1])[2])["logits"][0]
    n = alone.shape[0]
    print("alone vs batched", (batched[:n] - alone).abs().max().item())
    print("residue perplexity", math.exp(F.cross_entropy(alone[1:-1], tokens[i, 1 : n - 1]).item()))
