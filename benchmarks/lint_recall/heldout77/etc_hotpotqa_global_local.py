"""ETC (Extended Transformer Construction) for HotpotQA supporting facts and answer spans.

A long input of word pieces and a global input with one token per sentence;
global-local attention split into long-to-long (local radius with relative
position ids), long-to-global, global-to-global and hard global-to-long (each
sentence token reads its own sentence), after google-research/etc's
make_global_local_transformer_side_inputs. Supporting facts are read from the
global tokens, answer spans from the long tokens.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5); Biohub/esm#299 (conventions.md §3 item 22); conventions.md §2.3
"""
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

LOCAL_RADIUS = 3


def encode_hotpot(examples, max_long=40, max_global=6):
    b = len(examples)
    long_ids = torch.zeros(b, max_long, dtype=torch.long)
    long2global = torch.full((b, max_long), -1, dtype=torch.long)
    global_ids = torch.zeros(b, max_global, dtype=torch.long)
    supporting = torch.zeros(b, max_global)
    for i, (sentences, facts) in enumerate(examples):
        pos = 0
        for s, sent in enumerate(sentences[:max_global]):
            words = [2 + zlib.crc32(w.encode()) % 998 for w in sent.lower().split()][: max_long - pos]
            long_ids[i, pos:pos + len(words)] = torch.tensor(words)
            long2global[i, pos:pos + len(words)] = s
            global_ids[i, s] = 1
            supporting[i, s] = float(s in facts)
            pos += len(words)
    return {"long_token_ids": long_ids, "long2global": long2global, "global_token_ids": global_ids,
            "supporting_facts": supporting}


def make_global_local_side_inputs(long2global, global_token_ids, local_radius=LOCAL_RADIUS):
    long_keep = long2global >= 0
    global_keep = global_token_ids > 0
    n = long2global.shape[1]
    pos = torch.arange(n, device=long2global.device)
    rel = (pos[None, :] - pos[:, None]).clamp(-local_radius - 1, local_radius + 1)
    in_radius = rel.abs() <= local_radius
    l2l_att_mask = in_radius[None] & long_keep[:, :, None] & long_keep[:, None, :]
    l2g_att_mask = long_keep[:, :, None] & global_keep[:, None, :]
    g2g_att_mask = global_keep[:, :, None] & global_keep[:, None, :]
    g_idx = torch.arange(global_keep.shape[1], device=long2global.device)
    g2l_att_mask = (long2global[:, None, :] == g_idx[None, :, None]) & global_keep[:, :, None]
    return {"l2l_att_mask": l2l_att_mask, "l2g_att_mask": l2g_att_mask, "g2g_att_mask": g2g_att_mask,
            "g2l_att_mask": g2l_att_mask, "l2l_relative_att_ids": rel + local_radius + 1}


class GlobalLocalAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, local_radius=LOCAL_RADIUS):
        super().__init__()
        self.h, self.dh = num_heads, hidden_size // num_heads
        self.long_qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.global_qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.long_out = nn.Linear(hidden_size, hidden_size)
        self.global_out = nn.Linear(hidden_size, hidden_size)
        self.relative_bias = nn.Embedding(2 * local_radius + 3, num_heads)

    def _split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.h, self.dh).transpose(1, 2)

    def forward(self, long_x, global_x, side):
        lq, lk, lv = map(self._split, self.long_qkv(long_x).chunk(3, dim=-1))
        gq, gk, gv = map(self._split, self.global_qkv(global_x).chunk(3, dim=-1))
        n_long = lk.shape[-2]
        keys, values = torch.cat([lk, gk], dim=-2), torch.cat([lv, gv], dim=-2)

        l2x_scores = lq @ keys.transpose(-1, -2) / self.dh ** 0.5
        rel_bias = self.relative_bias(side["l2l_relative_att_ids"]).permute(2, 0, 1)
        l2x_scores[..., :n_long] += rel_bias
        l2x_mask = torch.cat([side["l2l_att_mask"], side["l2g_att_mask"]], dim=-1)[:, None]
        l2x_scores = l2x_scores + (1.0 - l2x_mask.float()) * -10000.0
        long_ctx = l2x_scores.softmax(-1) @ values

        g2x_scores = gq @ keys.transpose(-1, -2) / self.dh ** 0.5
        g2x_mask = torch.cat([side["g2l_att_mask"], side["g2g_att_mask"]], dim=-1)[:, None]
        g2x_scores = g2x_scores.masked_fill(~g2x_mask, float("-inf"))  # expect: MC507 global
        global_ctx = g2x_scores.softmax(-1) @ values

        merge = lambda t: t.transpose(1, 2).flatten(2)
        return self.long_out(merge(long_ctx)), self.global_out(merge(global_ctx))


class EtcLayer(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.attn = GlobalLocalAttention(hidden_size, num_heads)
        self.long_norm, self.global_norm = nn.LayerNorm(hidden_size), nn.LayerNorm(hidden_size)
        self.ffn = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.GELU(), nn.Linear(2 * hidden_size, hidden_size))

    def forward(self, long_x, global_x, side):
        dl, dg = self.attn(long_x, global_x, side)
        long_x, global_x = self.long_norm(long_x + dl), self.global_norm(global_x + dg)
        return long_x + self.ffn(long_x), global_x + self.ffn(global_x)


class EtcForHotpotQA(nn.Module):
    def __init__(self, vocab_size=1000, hidden_size=32, num_heads=4, num_layers=2, max_long=40):
        super().__init__()
        self.token_embed = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.global_embed = nn.Embedding(2, hidden_size)
        self.layers = nn.ModuleList([EtcLayer(hidden_size, num_heads) for _ in range(num_layers)])
        self.supporting_head = nn.Linear(hidden_size, 1)
        self.span_head = nn.Linear(hidden_size, 2)

    def forward(self, long_token_ids, long2global, global_token_ids, supporting_facts=None, spans=None):
        side = make_global_local_side_inputs(long2global, global_token_ids)
        long_x, global_x = self.token_embed(long_token_ids), self.global_embed(global_token_ids)
        for layer in self.layers:
            long_x, global_x = layer(long_x, global_x, side)
        sp_logits = self.supporting_head(global_x).squeeze(-1)
        start, end = self.span_head(long_x).unbind(-1)
        long_pad = long2global < 0
        start = start.masked_fill(long_pad, torch.finfo(start.dtype).min)
        end = end.masked_fill(long_pad, torch.finfo(end.dtype).min)
        loss = None
        if supporting_facts is not None:
            global_keep = (global_token_ids > 0).float()
            sp_loss = F.binary_cross_entropy_with_logits(sp_logits, supporting_facts, weight=global_keep, reduction="sum")
            loss = sp_loss / global_keep.sum()
            if spans is not None:
                loss = loss + (F.cross_entropy(start, spans[:, 0]) + F.cross_entropy(end, spans[:, 1])) / 2
        return loss, sp_logits, start, end


if __name__ == "__main__":
    torch.manual_seed(0)
    examples = [
        (["the eiffel tower is in paris", "paris is the capital of france", "it opened in 1889",
          "gustave eiffel's company built it"], {0, 2}),
        (["arthur's magazine was founded in 1844", "first for women started in 1989"], {0, 1}),
    ]
    batch = encode_hotpot(examples)
    spans = torch.tensor([[16, 16], [5, 5]])
    model = EtcForHotpotQA()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        loss, sp_logits, _, _ = model(**batch, spans=spans)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
