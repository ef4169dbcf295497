"""LongT5 with transient-global attention answering NarrativeQA questions over whole stories.

Encoder: local attention over blocks of block_len with the neighbouring blocks,
plus side keys made from per-block aggregates of the input (transient global
tokens), with a learned relative bias, after the Hugging Face LongT5 layout
(_split_into_blocks, _concatenate_3_blocks, _make_global_fixed_block_ids).
Decoder: causal self-attention and cross-attention to the encoded story.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (cheat-sheet); seed self_attention_mask_guide.txt §2
"""
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


def _split_into_blocks(x, block_len, dim):
    if x.shape[dim] % block_len:
        pad = [0] * (2 * x.ndim)
        pad[2 * (x.ndim - dim - 1) + 1] = block_len - x.shape[dim] % block_len
        x = F.pad(x, pad)
    return x.reshape(x.shape[:dim] + (x.shape[dim] // block_len, block_len) + x.shape[dim + 1:])


def _concatenate_3_blocks(x, block_dim, seq_dim):
    pad = [0] * (2 * x.ndim)
    pad[2 * (x.ndim - block_dim - 1)] = pad[2 * (x.ndim - block_dim - 1) + 1] = 1
    x = F.pad(x, pad)
    nb = x.shape[block_dim] - 2
    blocks = [x.narrow(block_dim, i, nb) for i in range(3)]
    return torch.cat(blocks, dim=seq_dim)


def _get_local_attention_mask(attention_mask, block_len):
    blocked = _split_into_blocks(attention_mask, block_len, dim=1)
    three_blocked = _concatenate_3_blocks(blocked, block_dim=1, seq_dim=2)
    local = torch.logical_and(blocked[..., None].bool(), three_blocked[..., None, :].bool())
    pos = torch.arange(3 * block_len)
    rel = pos[None, :] - (pos[block_len:2 * block_len])[:, None]
    return (local & (rel.abs() < block_len))[:, :, None]


def _make_global_fixed_block_ids(attention_mask, global_block_size):
    block_ids = torch.div(torch.arange(attention_mask.shape[1]), global_block_size, rounding_mode="floor")
    block_ids = block_ids[None].expand_as(attention_mask).masked_fill(attention_mask == 0, -1)
    num_globals = -(-attention_mask.shape[1] // global_block_size)
    global_segment_ids = (torch.arange(num_globals)[None] <= block_ids.max(-1, keepdim=True).values).long()
    return block_ids, global_segment_ids


class TransientGlobalAttention(nn.Module):
    def __init__(self, d_model, n_heads, block_len, global_block_size):
        super().__init__()
        self.n_heads, self.d_kv = n_heads, d_model // n_heads
        self.block_len, self.global_block_size = block_len, global_block_size
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.global_input_layer_norm = nn.LayerNorm(d_model)
        self.relative_attention_bias = nn.Embedding(4 * block_len, n_heads)

    def forward(self, hidden, attention_mask):
        b, n, d = hidden.shape
        block_ids, global_segment_ids = _make_global_fixed_block_ids(attention_mask, self.global_block_size)
        one_hot = F.one_hot(block_ids.clamp(min=0), global_segment_ids.shape[1]).to(hidden.dtype)
        one_hot = one_hot * (block_ids >= 0)[..., None]
        global_inputs = self.global_input_layer_norm(torch.einsum("bnd,bng->bgd", hidden, one_hot))

        heads = lambda t: t.view(t.shape[0], t.shape[1], self.n_heads, self.d_kv)
        q = _split_into_blocks(heads(self.q(hidden)), self.block_len, dim=1)
        k = _concatenate_3_blocks(_split_into_blocks(heads(self.k(hidden)), self.block_len, dim=1), 1, 2)
        v = _concatenate_3_blocks(_split_into_blocks(heads(self.v(hidden)), self.block_len, dim=1), 1, 2)
        nb = q.shape[1]
        side_k = heads(self.k(global_inputs))[:, None].expand(-1, nb, -1, -1, -1)
        side_v = heads(self.v(global_inputs))[:, None].expand(-1, nb, -1, -1, -1)
        k, v = torch.cat([k, side_k], dim=2), torch.cat([v, side_v], dim=2)
        scores = torch.einsum("bnqhd,bnkhd->bnhqk", q, k)

        pos = torch.arange(3 * self.block_len)
        rel = pos[None, :] - pos[self.block_len:2 * self.block_len, None] + 2 * self.block_len - 1
        local_bias = self.relative_attention_bias(rel).permute(2, 0, 1)[None, None]
        local_mask = _get_local_attention_mask(attention_mask, self.block_len)
        local_bias = local_bias + torch.where(local_mask, 0.0, -1e10)
        side_mask = torch.eq(attention_mask[..., None], global_segment_ids[:, None, :])
        side_bias = torch.where(_split_into_blocks(side_mask, self.block_len, dim=1)[:, :, None], 0.0, -1e10)
        scores = scores + torch.cat([local_bias, side_bias.expand(-1, -1, self.n_heads, -1, -1)], dim=-1)
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        out = torch.einsum("bnhqk,bnkhd->bnqhd", weights, v).reshape(b, -1, d)[:, :n]
        return self.o(out)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.self_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.cross_q = nn.Linear(d_model, d_model, bias=False)
        self.cross_kv = nn.Linear(d_model, 2 * d_model, bias=False)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))

    def _heads(self, t):
        return t.view(t.shape[0], t.shape[1], self.n_heads, -1).transpose(1, 2)

    def forward(self, x, encoder_hidden_states, encoder_attention_mask):
        b, t, d = x.shape
        q, k, v = map(self._heads, self.self_qkv(self.norms[0](x)).chunk(3, dim=-1))
        x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        q = self._heads(self.cross_q(self.norms[1](x)))
        k, v = map(self._heads, self.cross_kv(encoder_hidden_states).chunk(2, dim=-1))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=(encoder_attention_mask == 0)[:, None, None, :])  # expect: MC511 cross
        x = x + ctx.transpose(1, 2).reshape(b, t, d)
        return x + self.ff(self.norms[2](x))


class LongT5ForNarrativeQA(nn.Module):
    def __init__(self, vocab_size=512, d_model=32, n_heads=4, block_len=4, global_block_size=4):
        super().__init__()
        self.shared = nn.Embedding(vocab_size, d_model)
        self.encoder = TransientGlobalAttention(d_model, n_heads, block_len, global_block_size)
        self.enc_norm = nn.LayerNorm(d_model)
        self.decoder = DecoderLayer(d_model, n_heads)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels=None):
        h = self.shared(input_ids)
        encoder_hidden_states = self.enc_norm(h + self.encoder(h, attention_mask))
        logits = self.lm_head(self.decoder(self.shared(decoder_input_ids), encoder_hidden_states, attention_mask))
        loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100) if labels is not None else None
        return loss, logits


class StoryTokenizer:
    pad_token_id, eos_token_id = 0, 1

    def __call__(self, texts, return_tensors="pt", padding=True):
        rows = [[2 + zlib.crc32(w.encode()) % 510 for w in t.lower().split()] + [self.eos_token_id] for t in texts]
        ids = torch.full((len(rows), max(map(len, rows))), self.pad_token_id, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return {"input_ids": ids, "attention_mask": (ids != self.pad_token_id).long()}


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = StoryTokenizer()
    stories = ["question: who finds the map? context: the old sailor hid a map in the lighthouse and years later "
               "his granddaughter mara found it behind a loose brick while the storm raged over the bay",
               "question: where does the story end? context: the travellers reach the city at dawn"]
    enc = tok(stories)
    answers = tok(["mara", "the city"])
    decoder_input_ids = F.pad(answers["input_ids"][:, :-1], (1, 0), value=tok.pad_token_id)
    labels = answers["input_ids"].masked_fill(answers["attention_mask"] == 0, -100)
    model = LongT5ForNarrativeQA()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        loss, _ = model(**enc, decoder_input_ids=decoder_input_ids, labels=labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
