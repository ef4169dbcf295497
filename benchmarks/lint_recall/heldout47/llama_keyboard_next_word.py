"""On-device keyboard next-word prediction with a tiny Llama and a static key/value cache.

Imitates facebookresearch/llama's `llama/model.py` (the reference Llama 2 implementation):
`ModelArgs` with `max_batch_size` / `max_seq_len`, `RMSNorm`, `precompute_freqs_cis` /
`reshape_for_broadcast` / `apply_rotary_emb`, `repeat_kv` for grouped-query attention,
`Attention` with `wq` / `wk` / `wv` / `wo` and preallocated `cache_k` / `cache_v` written at
`start_pos`, `FeedForward` with `w1` / `w2` / `w3` and `multiple_of`, `TransformerBlock`,
`Transformer.forward(tokens, start_pos)` building the additive mask with `torch.hstack`,
here on `F.scaled_dot_product_attention`. A `KeyboardSession` feeds the words the user
commits (one word, or several at once after a paste, a swipe of a phrase or an accepted
autocorrection) into the cache and offers three suggestions for the next word.
Synthetic data: short chat messages from a template grammar over a word-level vocabulary.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8; pytorch/pytorch PR #111007 (cited in conventions.md §1).
"""

import math
import random
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

SUBJECTS = ["i", "we", "you", "mom", "the team"]
VERBS = ["will be", "can meet", "should call", "am going", "want to eat"]
PLACES = ["at home", "at the gym", "at the office", "near the station", "in the park"]
TIMES = ["at 7", "tonight", "tomorrow morning", "after lunch", "on friday"]
ENDINGS = ["ok", "see you", "thanks", "love you", "talk later"]


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: Optional[int] = 2
    vocab_size: int = -1
    multiple_of: int = 32
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5
    max_batch_size: int = 4
    max_seq_len: int = 64


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_local_heads = args.n_heads
        self.n_local_kv_heads = self.n_kv_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.cache_k = torch.zeros((args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim))
        self.cache_v = torch.zeros((args.max_batch_size, args.max_seq_len, self.n_local_kv_heads, self.head_dim))

    def forward(self, x, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        if self.training:
            keys, values = xk, xv
        else:
            self.cache_k = self.cache_k.to(xq)
            self.cache_v = self.cache_v.to(xq)
            self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
            self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
            keys = self.cache_k[:bsz, : start_pos + seqlen]
            values = self.cache_v[:bsz, : start_pos + seqlen]
        keys = repeat_kv(keys, self.n_rep)
        values = repeat_kv(values, self.n_rep)
        xq = xq.transpose(1, 2)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        output = F.scaled_dot_product_attention(xq, keys, values, is_causal=seqlen > 1)  # expect: MC510 cache
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, multiple_of, ffn_dim_multiplier):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of, args.ffn_dim_multiplier)
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList([TransformerBlock(i, params) for i in range(params.n_layers)])
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2)

    def forward(self, tokens, start_pos=0):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = self.norm(h)
        return self.output(h).float()


class WordTokenizer:
    def __init__(self, messages):
        words = sorted({w for m in messages for w in m.split()})
        self.itos = ["<s>"] + words
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.bos_id = 0

    def encode(self, text, bos=False):
        return ([self.bos_id] if bos else []) + [self.stoi[w] for w in text.split()]


def make_message(rng):
    return " ".join([rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES), rng.choice(TIMES),
                     rng.choice(ENDINGS)])


class KeyboardSession:
    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer
        self.start_pos = 0
        self.feed([tokenizer.bos_id])

    @torch.inference_mode()
    def feed(self, token_ids):
        tokens = torch.tensor([token_ids])
        logits = self.model(tokens, self.start_pos)
        self.start_pos += len(token_ids)
        self.last_logits = logits[0, -1]
        return self.suggestions()

    def suggestions(self, k=3):
        return [self.tokenizer.itos[i] for i in self.last_logits.topk(k).indices.tolist()]


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    messages = [make_message(rng) for _ in range(600)]
    tokenizer = WordTokenizer(messages)
    model = Transformer(ModelArgs(vocab_size=len(tokenizer.itos)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = [tokenizer.encode(m, bos=True) for m in messages[:512]]
    for epoch in range(3):
        model.train()
        rng.shuffle(data)
        for start in range(0, len(data), 32):
            batch = data[start:start + 32]
            n = max(len(x) for x in batch)
            x = torch.tensor([t + [0] * (n - len(t)) for t in batch])
            y = torch.tensor([t[1:] + [-1] * (n - len(t) + 1) for t in batch])
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    hits, agree, total = 0, 0, 0
    for message in messages[512:]:
        ids = tokenizer.encode(message)
        session = KeyboardSession(model, tokenizer)
        pos, offered = 0, []
        while pos + 1 + (pos % 3) < len(ids):
            chunk = ids[pos: pos + 1 + (pos % 3)]
            pos += len(chunk)
            offered.append((pos, session.feed(chunk)))
        for pos, suggested in offered:
            with torch.inference_mode():
                full = model(torch.tensor([[tokenizer.bos_id] + ids[:pos]]))[0, -1]
            agree += int(suggested == [tokenizer.itos[i] for i in full.topk(3).indices.tolist()])
            hits += int(tokenizer.itos[ids[pos]] in suggested)
            total += 1
    print(f"top-3 next-word accuracy {hits / total:.3f}, agreement with full-context {agree / total:.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
