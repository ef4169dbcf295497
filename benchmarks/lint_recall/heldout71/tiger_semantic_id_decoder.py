"""TIGER-style generative retrieval: the next item is decoded as a tuple of semantic ids.

Each item is mapped to ``code_levels`` codewords (an RQ-VAE's residual codes; here a fixed
random codebook assignment), the user's history is flattened into codeword tokens and
encoded bidirectionally, and a small decoder generates the next item's codewords one level at a
time with a key/value cache, restricted to prefixes that exist in the catalogue.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and section 5 item 8;
pytorch/pytorch PR #111007.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CODE_LEVELS = 3
CODEBOOK = 8
PAD, BOS = 0, 1
OFFSET = 2
VOCAB = OFFSET + CODE_LEVELS * CODEBOOK


def token_of(level, code):
    return OFFSET + level * CODEBOOK + code


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.o = nn.Linear(dim, dim)

    def split(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, context=None, context_keep=None, cache=None):
        q = self.split(self.q(x))
        if context is not None:
            k, v = map(self.split, self.kv(context).chunk(2, dim=-1))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=context_keep[:, None, None, :])
        else:
            k, v = map(self.split, self.kv(x).chunk(2, dim=-1))
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        b, h, n, dh = out.shape
        return self.o(out.transpose(1, 2).reshape(b, n, h * dh))


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn, self.ln1 = Attention(dim, heads), nn.LayerNorm(dim)
        self.ff, self.ln2 = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)), nn.LayerNorm(dim)

    def forward(self, x, keep):
        h = self.ln1(x)
        x = x + self.attn(h, context=h, context_keep=keep)
        return x + self.ff(self.ln2(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.self_attn, self.ln1 = Attention(dim, heads), nn.LayerNorm(dim)
        self.cross_attn, self.ln2 = Attention(dim, heads), nn.LayerNorm(dim)
        self.ff, self.ln3 = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)), nn.LayerNorm(dim)

    def forward(self, y, memory, memory_keep, cache=None):
        y = y + self.self_attn(self.ln1(y), cache=cache)
        y = y + self.cross_attn(self.ln2(y), context=memory, context_keep=memory_keep)
        return y + self.ff(self.ln3(y))


class TIGER(nn.Module):
    def __init__(self, dim=16, heads=2, layers=2, max_tokens=32):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_tokens, dim)
        self.encoder = nn.ModuleList([EncoderBlock(dim, heads) for _ in range(layers)])
        self.decoder = nn.ModuleList([DecoderBlock(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, VOCAB)

    def encode(self, hist_tokens):
        keep = hist_tokens != PAD
        x = self.tok(hist_tokens) + self.pos(torch.arange(hist_tokens.size(1)))
        for blk in self.encoder:
            x = blk(x, keep)
        return x, keep

    def decode(self, dec_tokens, memory, keep, caches=None, start=0):
        y = self.tok(dec_tokens) + self.pos(torch.arange(start, start + dec_tokens.size(1)))
        for i, blk in enumerate(self.decoder):
            y = blk(y, memory, keep, None if caches is None else caches[i])
        return self.head(y)

    def forward(self, hist_tokens, target_codes):
        memory, keep = self.encode(hist_tokens)
        target_tokens = torch.stack([token_of(l, target_codes[:, l]) for l in range(CODE_LEVELS)], dim=1)
        dec_in = torch.cat([torch.full_like(target_tokens[:, :1], BOS), target_tokens[:, :-1]], dim=1)
        return self.decode(dec_in, memory, keep), target_tokens

    @torch.no_grad()
    def generate(self, hist_tokens, valid_prefixes):
        memory, keep = self.encode(hist_tokens)
        caches = [dict() for _ in self.decoder]
        step_in = torch.full((hist_tokens.size(0), 1), BOS)
        codes = []
        for level in range(CODE_LEVELS):
            logits = self.decode(step_in, memory, keep, caches, start=level)[:, -1]
            allowed = torch.zeros(hist_tokens.size(0), VOCAB, dtype=torch.bool)
            for b in range(hist_tokens.size(0)):
                prefix = tuple(c[b].item() for c in codes)
                for code in valid_prefixes.get(prefix, ()):
                    allowed[b, token_of(level, code)] = True
            logits = logits.masked_fill(~allowed, float("-inf"))
            nxt = logits.argmax(dim=-1)
            codes.append(nxt - OFFSET - level * CODEBOOK)
            step_in = nxt[:, None]
        return torch.stack(codes, dim=1)


def build_catalogue(n_items, generator=None):
    codes = torch.randint(0, CODEBOOK, (n_items, CODE_LEVELS), generator=generator)
    prefixes = {}
    for row in codes.tolist():
        for l in range(CODE_LEVELS):
            prefixes.setdefault(tuple(row[:l]), set()).add(row[l])
    return codes, {k: sorted(v) for k, v in prefixes.items()}


def history_tokens(item_codes, histories):
    rows = []
    for hist in histories:
        toks = [token_of(l, item_codes[i, l].item()) for i in hist for l in range(CODE_LEVELS)]
        rows.append(toks)
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


if __name__ == "__main__":
    torch.manual_seed(4)
    item_codes, prefixes = build_catalogue(30)
    histories = [[3, 7, 1], [5], [2, 9, 11, 4], [8, 8]]
    targets = torch.tensor([12, 6, 0, 21])
    hist = history_tokens(item_codes, histories)
    model = TIGER()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(6):
        logits, target_tokens = model(hist, item_codes[targets])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), target_tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    generated = model.generate(hist, prefixes)
    print("loss %.4f generated %s" % (loss.item(), generated.tolist()))
