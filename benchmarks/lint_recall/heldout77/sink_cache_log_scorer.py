"""Streaming log-line anomaly scoring with attention sinks (StreamingLLM).

A small Llama-style byte LM reads an unbounded stream of server log lines chunk
by chunk; a StartRecentKVCache keeps the first start_size positions (the sinks)
and a window of recent ones, keys are cached before rotation and re-rotated by
their position inside the cache, and each line is scored by its mean NLL.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class StartRecentKVCache:
    def __init__(self, start_size=4, recent_size=28, k_seq_dim=2, v_seq_dim=2):
        self.start_size, self.recent_size = start_size, recent_size
        self.cache_size = start_size + recent_size
        self.k_seq_dim, self.v_seq_dim = k_seq_dim, v_seq_dim

    def evict_for_space(self, past_key_values, num_coming):
        if past_key_values is None:
            return None
        seq_len = past_key_values[0][0].size(self.k_seq_dim)
        if seq_len + num_coming <= self.cache_size:
            return past_key_values
        keep_from = seq_len - self.recent_size + num_coming
        return [
            (torch.cat([k[:, :, : self.start_size], k[:, :, keep_from:]], dim=self.k_seq_dim),
             torch.cat([v[:, :, : self.start_size], v[:, :, keep_from:]], dim=self.v_seq_dim))
            for k, v in past_key_values
        ]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    def __init__(self, dim, n_heads, max_pos=512, base=10000.0):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        inv_freq = 1.0 / base ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        freqs = torch.outer(torch.arange(max_pos).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, past_key_value=None):
        b, L, _ = x.shape
        shape = (b, L, self.n_heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)
            v = torch.cat([past_key_value[1], v], dim=2)
        present = (k, v)
        S = k.size(2)
        q = apply_rotary_pos_emb(q, self.cos_cached[S - L:S], self.sin_cached[S - L:S])
        k = apply_rotary_pos_emb(k, self.cos_cached[:S], self.sin_cached[:S])
        out = F.scaled_dot_product_attention(q, k, v, is_causal=L > 1)  # expect: MC510 sinks
        return self.o_proj(out.transpose(1, 2).reshape(b, L, -1)), present


class DecoderLayer(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(dim)
        self.self_attn = LlamaAttention(dim, n_heads)
        self.post_attention_layernorm = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim, bias=False), nn.SiLU(), nn.Linear(2 * dim, dim, bias=False))

    def forward(self, x, past_key_value=None):
        h, present = self.self_attn(self.input_layernorm(x), past_key_value)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), present


class ByteLM(nn.Module):
    def __init__(self, dim=32, n_heads=4, n_layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(256, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, n_heads) for _ in range(n_layers)])
        self.norm = nn.RMSNorm(dim)
        self.lm_head = nn.Linear(dim, 256, bias=False)

    def forward(self, input_ids, past_key_values=None):
        x = self.embed_tokens(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.lm_head(self.norm(x)), presents


def encode_lines(lines):
    ids, line_ids = [], []
    for n, line in enumerate(lines):
        data = list((line + "\n").encode("utf-8"))
        ids += data
        line_ids += [n] * len(data)
    return torch.tensor(ids), torch.tensor(line_ids)


@torch.no_grad()
def score_stream(model, lines, chunk_size=16, start_size=4, recent_size=28):
    ids, line_ids = encode_lines(lines)
    kv_cache = StartRecentKVCache(start_size, recent_size)
    past_key_values, nll, prev_logits = None, [], None
    for start in range(0, ids.numel(), chunk_size):
        chunk = ids[start:start + chunk_size][None]
        past_key_values = kv_cache.evict_for_space(past_key_values, chunk.size(1))
        logits, past_key_values = model(chunk, past_key_values)
        if prev_logits is not None:
            logits = torch.cat([prev_logits, logits], dim=1)
            chunk = torch.cat([ids[start - 1:start][None], chunk], dim=1)
        nll.append(F.cross_entropy(logits[0, :-1], chunk[0, 1:], reduction="none"))
        prev_logits = logits[:, -1:]
    nll = torch.cat([torch.zeros(1), torch.cat(nll)])
    in_line = line_ids[None, :] == torch.arange(len(lines))[:, None]
    in_line[:, 0] = False
    return (nll[None] * in_line).sum(-1) / in_line.sum(-1).clamp(min=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ByteLM().eval()
    lines = ["GET /index.html 200 12ms", "GET /api/v1/items 200 31ms", "POST /login 401 5ms",
             "GET /index.html 200 11ms", "DELETE /api/v1/items/7 500 2034ms"]
    scores = score_stream(model, lines)
    for line, s in zip(lines, scores.tolist()):
        print(f"{s:7.4f}  {line}")
