"""LLMs-from-scratch (Raschka), chapter 4 bonus "KV cache", with the attention moved onto SDPA (correct twin).

The book's `MultiHeadAttention` with `cache_k` / `cache_v` and `reset_cache`, `TransformerBlock`,
`GPTModel` with `current_pos` and `reset_kv_cache`, and `generate_text_simple_cached`. A reader
replaced the book's sliced `mask_bool` and `masked_fill_` with SDPA's `is_causal=True`: right for
the prompt (empty cache), wrong for cached steps, where the top-left triangle lets the new query
see only the first cached key; cached generation drifts from uncached generation.

Twin: an explicit bool mask `tril(diagonal=num_tokens_K - num_tokens_Q)` (bottom-right aligned), no `is_causal`.

Source: pytorch/pytorch PR #111007 (is_causal upper-left vs lower-right alignment); conventions.md
§1 (SDPA `is_causal` row) and §2.7.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads = d_out, num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = dropout
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)

    def forward(self, x, use_cache=False):
        b, num_tokens, d_in = x.shape  # queries: the new tokens only; keys/values: cache + new
        keys_new = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values_new = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
        num_tokens_Q, num_tokens_K = queries.shape[-2], keys.shape[-2]
        mask_bool = torch.ones(num_tokens_Q, num_tokens_K, dtype=torch.bool, device=x.device).tril(diagonal=num_tokens_K - num_tokens_Q)
        context_vec = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask_bool, dropout_p=self.dropout if self.training else 0.0)
        context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(cfg["emb_dim"], cfg["emb_dim"], cfg["drop_rate"], cfg["n_heads"], cfg["qkv_bias"])
        self.ff = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), nn.GELU(),
                                nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))
        self.norm1, self.norm2 = nn.LayerNorm(cfg["emb_dim"]), nn.LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x, use_cache=False):
        x = x + self.drop_shortcut(self.att(self.norm1(x), use_cache=use_cache))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.current_pos = 0
        self.final_norm = nn.LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx, use_cache=False):
        batch_size, seq_len = in_idx.shape
        if use_cache:
            pos_ids = torch.arange(self.current_pos, self.current_pos + seq_len, device=in_idx.device)
            self.current_pos += seq_len
        else:
            pos_ids = torch.arange(0, seq_len, device=in_idx.device)
        x = self.drop_emb(self.tok_emb(in_idx) + self.pos_emb(pos_ids).unsqueeze(0))
        for blk in self.trf_blocks:
            x = blk(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))

    def reset_kv_cache(self):
        for blk in self.trf_blocks:
            blk.att.reset_cache()
        self.current_pos = 0  # position of the next token when the KV cache is used


def generate_text_simple_cached(model, idx, max_new_tokens, context_size=None, use_cache=True):
    model.eval()
    ctx_len = context_size or model.pos_emb.num_embeddings
    with torch.no_grad():
        if use_cache:
            model.reset_kv_cache()
            logits = model(idx[:, -ctx_len:], use_cache=True)
            for _ in range(max_new_tokens):
                next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
                idx = torch.cat([idx, next_idx], dim=1)
                logits = model(next_idx, use_cache=True)  # one new token per step
        else:
            for _ in range(max_new_tokens):
                logits = model(idx[:, -ctx_len:], use_cache=False)
                next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
                idx = torch.cat([idx, next_idx], dim=1)
    return idx


if __name__ == "__main__":
    GPT_CONFIG_TINY = {"vocab_size": 50, "context_length": 32, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "drop_rate": 0.0, "qkv_bias": False}
    torch.manual_seed(123)
    model = GPTModel(GPT_CONFIG_TINY)
    prompt = torch.tensor([[6, 1, 17, 42, 8]])
    cached = generate_text_simple_cached(model, prompt, max_new_tokens=10, use_cache=True)
    plain = generate_text_simple_cached(model, prompt, max_new_tokens=10, use_cache=False)
    print("cached:  ", cached.tolist(), "\nuncached:", plain.tolist())
    model.reset_kv_cache()
    model(prompt[:, :4], use_cache=True)
    last = model(prompt[:, 4:], use_cache=True)[:, -1]  # one new token on a 4-token cache
    print("last-step logits cached vs full:", (last - model(prompt)[:, -1]).abs().max().item())
