"""ESM-2 style protein language model, masked-LM pre-training on multi-chain complexes.

Written after facebookresearch/esm (esm/data.py Alphabet and BatchConverter,
esm/model/esm2.py, esm/modules.py, esm/rotary_embedding.py): a BOS/EOS alphabet,
rotary embeddings, pre-LayerNorm layers, token dropout with the train-time mask ratio,
an LM head tied to the embeddings. The chains of a complex are told apart by a
``sequence_id`` per token, as in ESM3, and attend only within their own chain.

Source: Biohub/esm#299, pytorch/pytorch#103749, conventions.md §2.3 and §3 items 5 and 22.
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PROTEIN_TOKS = list("LAGVSERTIDPKQNFYMHWCXBUZO.-")


class Alphabet:
    def __init__(self):
        self.prepend_toks = ["<cls>", "<pad>", "<eos>", "<unk>"]
        self.append_toks = ["<null_1>", "<mask>"]
        self.all_toks = self.prepend_toks + PROTEIN_TOKS + self.append_toks
        self.tok_to_idx = {tok: i for i, tok in enumerate(self.all_toks)}
        self.padding_idx = self.tok_to_idx["<pad>"]
        self.cls_idx = self.tok_to_idx["<cls>"]
        self.eos_idx = self.tok_to_idx["<eos>"]
        self.unk_idx = self.tok_to_idx["<unk>"]
        self.mask_idx = self.tok_to_idx["<mask>"]

    def __len__(self):
        return len(self.all_toks)

    def encode(self, text):
        return [self.tok_to_idx.get(tok, self.unk_idx) for tok in text]

    def get_batch_converter(self):
        return BatchConverter(self)


class BatchConverter:
    """Turns (label, "CHAIN_A:CHAIN_B") pairs into padded tokens and per-token chain ids."""

    def __init__(self, alphabet):
        self.alphabet = alphabet

    def __call__(self, raw_batch):
        labels, encoded, chain_ids = [], [], []
        for label, seq_str in raw_batch:
            toks, ids = [self.alphabet.cls_idx], [0]
            for chain_index, chain in enumerate(seq_str.split(":")):
                enc = self.alphabet.encode(chain)
                toks.extend(enc)
                ids.extend([chain_index] * len(enc))
            toks.append(self.alphabet.eos_idx)
            ids.append(ids[-1])
            labels.append(label)
            encoded.append(toks)
            chain_ids.append(ids)
        max_len = max(len(t) for t in encoded)
        tokens = torch.full((len(encoded), max_len), self.alphabet.padding_idx, dtype=torch.int64)
        sequence_id = torch.full((len(encoded), max_len), -1, dtype=torch.int64)
        for i, (toks, ids) in enumerate(zip(encoded, chain_ids)):
            tokens[i, : len(toks)] = torch.tensor(toks)
            sequence_id[i, : len(ids)] = torch.tensor(ids)
        return labels, tokens, sequence_id


def mask_tokens(tokens, alphabet, mask_prob=0.15, generator=None):
    """BERT-style corruption of residue tokens: 80% <mask>, 10% random residue, 10% kept."""
    special = (tokens == alphabet.padding_idx) | (tokens == alphabet.cls_idx) | (tokens == alphabet.eos_idx)
    probs = torch.full(tokens.shape, mask_prob).masked_fill(special, 0.0)
    selected = torch.bernoulli(probs, generator=generator).bool()
    labels = tokens.masked_fill(~selected, -100)
    roll = torch.rand(tokens.shape, generator=generator)
    corrupted = tokens.masked_fill(selected & (roll < 0.8), alphabet.mask_idx)
    random_res = torch.randint(4, 4 + len(PROTEIN_TOKS) - 2, tokens.shape, generator=generator)
    corrupted = torch.where(selected & (roll >= 0.8) & (roll < 0.9), random_res, corrupted)
    return corrupted, labels


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    cos = cos[:, : x.shape[-2], :]
    sin = sin[:, : x.shape[-2], :]
    return (x * cos) + (rotate_half(x) * sin)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, q, k):
        t = torch.arange(k.shape[-2], device=k.device).type_as(self.inv_freq)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1).to(k.device)
        cos, sin = emb.cos()[None, :, :], emb.sin()[None, :, :]
        return apply_rotary_pos_emb(q, cos, sin), apply_rotary_pos_emb(k, cos, sin)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.rot_emb = RotaryEmbedding(dim=self.head_dim)

    def forward(self, query, attn_keep=None):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(query)
        v = self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        q, k = self.rot_emb(q, k)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_keep is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(~attn_keep.unsqueeze(1), float("-inf"))  # expect: MC507 esm
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim, ffn_embed_dim, attention_heads):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, self_attn_mask=None):
        residual = x
        x = self.self_attn(self.self_attn_layer_norm(x), attn_keep=self_attn_mask)
        x = residual + x
        residual = x
        x = self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return residual + x


class RobertaLMHead(nn.Module):
    def __init__(self, embed_dim, output_dim, weight):
        super().__init__()
        self.dense = nn.Linear(embed_dim, embed_dim)
        self.layer_norm = nn.LayerNorm(embed_dim)
        self.weight = weight
        self.bias = nn.Parameter(torch.zeros(output_dim))

    def forward(self, features):
        x = self.layer_norm(F.gelu(self.dense(features)))
        return F.linear(x, self.weight) + self.bias


@dataclass
class ESM2Config:
    num_layers: int = 3
    embed_dim: int = 64
    attention_heads: int = 4
    token_dropout: bool = True


class ESM2(nn.Module):
    def __init__(self, config: ESM2Config, alphabet: Alphabet):
        super().__init__()
        self.config = config
        self.padding_idx, self.mask_idx = alphabet.padding_idx, alphabet.mask_idx
        self.embed_scale = 1
        self.embed_tokens = nn.Embedding(len(alphabet), config.embed_dim, padding_idx=self.padding_idx)
        self.layers = nn.ModuleList(
            TransformerLayer(config.embed_dim, 4 * config.embed_dim, config.attention_heads)
            for _ in range(config.num_layers)
        )
        self.emb_layer_norm_after = nn.LayerNorm(config.embed_dim)
        self.lm_head = RobertaLMHead(config.embed_dim, len(alphabet), self.embed_tokens.weight)

    @staticmethod
    def _chain_attention_mask(sequence_id, padding_mask):
        same_chain = sequence_id.unsqueeze(-1) == sequence_id.unsqueeze(-2)
        real = ~padding_mask
        return same_chain & real.unsqueeze(-1) & real.unsqueeze(-2)

    def forward(self, tokens, sequence_id):
        padding_mask = tokens.eq(self.padding_idx)
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.config.token_dropout:
            x = x.masked_fill((tokens == self.mask_idx).unsqueeze(-1), 0.0)
            mask_ratio_train = 0.15 * 0.8
            src_lengths = (~padding_mask).sum(-1)
            mask_ratio_observed = (tokens == self.mask_idx).sum(-1).to(x.dtype) / src_lengths
            x = x * (1 - mask_ratio_train) / (1 - mask_ratio_observed)[:, None, None]
        x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        attn_keep = self._chain_attention_mask(sequence_id, padding_mask)
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, self_attn_mask=attn_keep)
        x = self.emb_layer_norm_after(x).transpose(0, 1)
        return {"logits": self.lm_head(x), "representations": x}


def random_complex(rng, n_chains):
    residues = "LAGVSERTIDPKQNFYMHWC"
    return ":".join("".join(rng.choice(residues) for _ in range(rng.randint(6, 20))) for _ in range(n_chains))


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    alphabet = Alphabet()
    batch_converter = alphabet.get_batch_converter()
    model = ESM2(ESM2Config(), alphabet)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(f"complex_{i}", random_complex(rng, rng.randint(1, 3))) for i in range(64)]
    for step in range(20):
        _, tokens, sequence_id = batch_converter(data[(step * 8) % 64 : (step * 8) % 64 + 8])
        corrupted, labels = mask_tokens(tokens, alphabet)
        out = model(corrupted, sequence_id)
        loss = F.cross_entropy(out["logits"].reshape(-1, len(alphabet)), labels.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f} ppl {math.exp(min(loss.item(), 20)):.2f}")
    model.eval()
    with torch.no_grad():
        _, tokens, sequence_id = batch_converter([data[0], ("long", "A" * 40 + ":" + "G" * 30)])
        batched = model(tokens, sequence_id)["logits"][0, : (tokens[0] != alphabet.padding_idx).sum()]
        _, tokens1, sequence_id1 = batch_converter([data[0]])
        alone = model(tokens1, sequence_id1)["logits"][0]
        print("batched vs alone:", (batched - alone).abs().max().item())
