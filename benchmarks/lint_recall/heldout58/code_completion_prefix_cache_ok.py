"""Code-completion server with a repository-context prefix cache.

Every completion request carries the same repository context (the open file's imports and
the signatures of its neighbours) followed by the text before the cursor. The server prefills
the context once, keeps its key/value cache keyed by a hash of the context, and for each
request copies the cached keys and values, runs the cursor prefix through the model on top of
them, then decodes a few tokens greedily until a newline.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""

import argparse
import hashlib
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

NEWLINE = 10


class LayerCache:
    def __init__(self, k=None, v=None):
        self.k = k
        self.v = v

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def clone(self):
        return LayerCache(self.k.clone(), self.v.clone())

    def __len__(self):
        return 0 if self.k is None else self.k.size(2)


class CompletionAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cache):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        k, v = cache.append(k, v)
        l, s = q.size(2), k.size(2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(l, s, dtype=torch.bool, device=q.device).tril(s - l))
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class CompletionBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.attn = CompletionAttention(dim, heads)
        self.n2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, cache):
        x = x + self.attn(self.n1(x), cache)
        return x + self.mlp(self.n2(x))


class CodeLM(nn.Module):
    def __init__(self, vocab=256, dim=96, heads=4, layers=3, max_len=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(CompletionBlock(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def new_cache(self):
        return [LayerCache() for _ in self.blocks]

    def forward(self, ids, caches):
        start = len(caches[0])
        pos = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache)
        return self.lm_head(self.ln_f(x))


def encode(text):
    return torch.tensor([list(text.encode("utf-8", errors="replace"))], dtype=torch.long)


class CompletionServer:
    def __init__(self, model, max_prefixes=32, max_new_tokens=48):
        self.model = model.eval()
        self.prefixes = OrderedDict()
        self.max_prefixes = max_prefixes
        self.max_new_tokens = max_new_tokens

    def _context_cache(self, context):
        key = hashlib.sha1(context.encode()).hexdigest()
        if key not in self.prefixes:
            caches = self.model.new_cache()
            self.model(encode(context), caches)
            self.prefixes[key] = caches
            if len(self.prefixes) > self.max_prefixes:
                self.prefixes.popitem(last=False)
        self.prefixes.move_to_end(key)
        return [c.clone() for c in self.prefixes[key]]

    @torch.inference_mode()
    def complete(self, context, before_cursor):
        caches = self._context_cache(context)
        logits = self.model(encode(before_cursor), caches)[:, -1]
        out = []
        for _ in range(self.max_new_tokens):
            nxt = int(logits.argmax(-1))
            if nxt == NEWLINE:
                break
            out.append(nxt)
            logits = self.model(torch.tensor([[nxt]]), caches)[:, -1]
        return bytes(out).decode("utf-8", errors="replace")


def train_on_corpus(model, text, steps=300, seq=128, batch=16, lr=3e-3):
    data = encode(text)[0]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, data.numel() - seq - 1, (batch,))
        chunk = torch.stack([data[i:i + seq + 1] for i in idx.tolist()])
        logits = model(chunk[:, :-1], model.new_cache())
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), chunk[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    model = CodeLM()
    print("train loss", train_on_corpus(model, text, steps=args.steps))
    server = CompletionServer(model)
    context = "import torch\nimport torch.nn as nn\n\n"
    for prefix in ["class Net(nn.Module):\n    def __init__(self", "def forward(self, x):\n        return self."]:
        print(repr(prefix), "->", repr(server.complete(context, prefix)))


if __name__ == "__main__":
    main()
