"""A small translation Transformer in fairseq's layout, trained in float32, served in float16.

Source: NVIDIA/apex#1052 and facebookresearch/fairseq#3575 (conventions.md §3 item 18),
conventions.md §2.3, tools.md §0 P5.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_positions(tensor, padding_idx: int):
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def fill_with_neg_inf(t):
    return t.float().fill_(float("-inf")).type_as(t)


class LayerDropModuleList(nn.ModuleList):
    def __init__(self, p, modules=None):
        super().__init__(modules)
        self.p = p

    def __iter__(self):
        dropout_probs = torch.empty(len(self)).uniform_()
        for i, m in enumerate(super().__iter__()):
            if not self.training or (dropout_probs[i] > self.p):
                yield m


class LearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx):
        super().__init__(num_embeddings + padding_idx + 1, embedding_dim, padding_idx)

    def forward(self, input):
        return super().forward(make_positions(input, self.padding_idx))


@dataclass
class TransformerConfig:
    vocab_size: int = 24
    pad: int = 1
    eos: int = 2
    embed_dim: int = 64
    ffn_embed_dim: int = 128
    attention_heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    max_positions: int = 64
    dropout: float = 0.1
    decoder_layerdrop: float = 0.1


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.k_proj, self.v_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.q_proj, self.out_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        (tgt_len, bsz, embed_dim), src_len = query.size(), key.size(0)
        q = self.q_proj(query) * self.scaling
        k, v = self.k_proj(key), self.v_proj(value)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(src_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(src_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights += attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), -1e8)  # expect: MC501 fairseq
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32).type_as(attn_weights)
        attn_probs = F.dropout(attn_weights_float, self.dropout, self.training)
        attn = torch.bmm(attn_probs, v).transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = MultiheadAttention(cfg.embed_dim, cfg.attention_heads, cfg.dropout)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.embed_dim)
        self.fc1 = nn.Linear(cfg.embed_dim, cfg.ffn_embed_dim)
        self.fc2 = nn.Linear(cfg.ffn_embed_dim, cfg.embed_dim)
        self.final_layer_norm = nn.LayerNorm(cfg.embed_dim)
        self.dropout = cfg.dropout

    def residual_connection(self, x, residual, layer_norm):
        return layer_norm(residual + F.dropout(x, self.dropout, self.training))

    def forward(self, x, encoder_padding_mask):
        x = self.residual_connection(self.self_attn(x, x, x, key_padding_mask=encoder_padding_mask), x, self.self_attn_layer_norm)
        return self.residual_connection(self.fc2(F.relu(self.fc1(x))), x, self.final_layer_norm)


class TransformerDecoderLayer(TransformerEncoderLayer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.encoder_attn = MultiheadAttention(cfg.embed_dim, cfg.attention_heads, cfg.dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(cfg.embed_dim)

    def forward(self, x, encoder_out, encoder_padding_mask, self_attn_mask, self_attn_padding_mask):
        y = self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask)
        x = self.residual_connection(y, x, self.self_attn_layer_norm)
        y = self.encoder_attn(x, encoder_out, encoder_out, key_padding_mask=encoder_padding_mask)
        x = self.residual_connection(y, x, self.encoder_attn_layer_norm)
        return self.residual_connection(self.fc2(F.relu(self.fc1(x))), x, self.final_layer_norm)


class TransformerEncoder(nn.Module):
    def __init__(self, cfg, embed_tokens):
        super().__init__()
        self.padding_idx = cfg.pad
        self.embed_tokens = embed_tokens
        self.embed_scale = cfg.embed_dim**0.5
        self.embed_positions = LearnedPositionalEmbedding(cfg.max_positions, cfg.embed_dim, cfg.pad)
        self.layers = nn.ModuleList([TransformerEncoderLayer(cfg) for _ in range(cfg.encoder_layers)])

    def forward(self, src_tokens):
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        x = (self.embed_scale * self.embed_tokens(src_tokens) + self.embed_positions(src_tokens)).transpose(0, 1)
        for layer in self.layers:
            x = layer(x, encoder_padding_mask)
        return {"encoder_out": [x], "encoder_padding_mask": [encoder_padding_mask]}

    def reorder_encoder_out(self, encoder_out, new_order):
        (x,), (mask,) = encoder_out["encoder_out"], encoder_out["encoder_padding_mask"]
        return {"encoder_out": [x.index_select(1, new_order)], "encoder_padding_mask": [mask.index_select(0, new_order)]}


class TransformerDecoder(TransformerEncoder):
    def __init__(self, cfg, embed_tokens):
        super().__init__(cfg, embed_tokens)
        self.layers = LayerDropModuleList(cfg.decoder_layerdrop, [TransformerDecoderLayer(cfg) for _ in range(cfg.decoder_layers)])
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def forward(self, prev_output_tokens, encoder_out):
        x = (self.embed_scale * self.embed_tokens(prev_output_tokens) + self.embed_positions(prev_output_tokens)).transpose(0, 1)
        self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
        if not self_attn_padding_mask.any():
            self_attn_padding_mask = None
        enc, enc_pad = encoder_out["encoder_out"][0], encoder_out["encoder_padding_mask"][0]
        for layer in self.layers:
            x = layer(x, enc, enc_pad, self.buffered_future_mask(x), self_attn_padding_mask)
        return F.linear(x.transpose(0, 1), self.embed_tokens.weight)


class TransformerModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim, cfg.pad)
        nn.init.normal_(embed.weight, mean=0, std=cfg.embed_dim**-0.5)
        self.encoder = TransformerEncoder(cfg, embed)
        self.decoder = TransformerDecoder(cfg, embed)

    def forward(self, src_tokens, prev_output_tokens):
        return self.decoder(prev_output_tokens, self.encoder(src_tokens))


class SequenceGenerator:
    def __init__(self, model, beam_size=4, max_len_b=12, len_penalty=1.0):
        self.model, self.beam_size, self.max_len_b, self.len_penalty = model, beam_size, max_len_b, len_penalty
        self.eos, self.pad = model.cfg.eos, model.cfg.pad

    @torch.no_grad()
    def generate(self, src_tokens):
        bsz, beam = src_tokens.size(0), self.beam_size
        encoder_out = self.model.encoder(src_tokens)
        encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, torch.arange(bsz).repeat_interleave(beam))
        tokens, scores = torch.full((bsz * beam, 1), self.eos, dtype=torch.long), torch.zeros(bsz * beam)
        finalized = [[] for _ in range(bsz)]
        max_len = src_tokens.ne(self.pad).sum(1).max().item() + self.max_len_b
        for step in range(max_len):
            lprobs = self.model.decoder(tokens, encoder_out)[:, -1, :].float().log_softmax(-1)
            lprobs[:, self.pad] = float("-inf")
            cand = (scores[:, None] + lprobs).view(bsz, beam, -1)
            top_scores, top_idx = (cand[:, 0] if step == 0 else cand.view(bsz, -1)).topk(2 * beam, dim=1)
            beam_idx, tok = top_idx // lprobs.size(1), top_idx % lprobs.size(1)
            kept = []
            for b in range(bsz):
                live = []
                for s, bi, t in zip(top_scores[b].tolist(), beam_idx[b].tolist(), tok[b].tolist()):
                    if t == self.eos and len(finalized[b]) < beam:
                        finalized[b].append((s / (step + 1) ** self.len_penalty, tokens[b * beam + bi, 1:].tolist()))
                    elif t != self.eos and len(live) < beam:
                        live.append((b * beam + bi, t, s))
                kept += live
            if all(len(f) >= beam for f in finalized):
                break
            tokens = torch.cat([tokens[[r for r, _, _ in kept]], torch.tensor([[t] for _, t, _ in kept])], dim=1)
            scores = torch.tensor([s for _, _, s in kept])
        return [max(f, key=lambda h: h[0])[1] if f else [] for f in finalized]


def make_batch(cfg, n, rng):
    perm = random.Random(0).sample(range(3, cfg.vocab_size), cfg.vocab_size - 3)
    srcs = [[rng.randrange(3, cfg.vocab_size) for _ in range(rng.randint(3, 9))] for _ in range(n)]
    tgts = [[perm[t - 3] for t in reversed(s)] for s in srcs]
    src = torch.full((n, 9), cfg.pad, dtype=torch.long)
    prev, target = torch.full((n, 10), cfg.pad, dtype=torch.long), torch.full((n, 10), cfg.pad, dtype=torch.long)
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        src[i, 9 - len(s):] = torch.tensor(s)  # fairseq pads the source on the left
        prev[i, : len(t) + 1] = torch.tensor([cfg.eos, *t])
        target[i, : len(t) + 1] = torch.tensor([*t, cfg.eos])
    return src, prev, target, tgts


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = TransformerConfig()
    model = TransformerModel(cfg)
    optim = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(300):
        src, prev, target, _ = make_batch(cfg, 32, rng)
        loss = F.cross_entropy(model(src, prev).flatten(0, 1), target.flatten(), ignore_index=cfg.pad, label_smoothing=0.1)
        optim.zero_grad()
        loss.backward()
        optim.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    src, _, _, refs = make_batch(cfg, 8, random.Random(1))
    hyps32 = SequenceGenerator(model).generate(src)
    print("float32 exact match", sum(h == r for h, r in zip(hyps32, refs)), "/ 8")
    model.half()
    try:
        hyps16 = SequenceGenerator(model).generate(src)
        print("float16 agrees with float32 on", sum(a == b for a, b in zip(hyps16, hyps32)), "/ 8")
    except RuntimeError as err:
        print("float16 generation failed:", err)
