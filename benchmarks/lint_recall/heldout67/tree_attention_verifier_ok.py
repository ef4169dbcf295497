"""Medusa-style decoding: extra heads guess the next few tokens, the guesses
are arranged in a token tree, and the base model verifies the whole tree in
one forward pass with tree attention (every node sees the prefix and its own
ancestors).  The longest path that matches the base model's greedy choice is
accepted, its key/value entries are kept and the rest of the tree is dropped.

Source: rasbt/LLMs-from-scratch#1061; pytorch/pytorch#29546; conventions.md sections 1 (direction cheat-sheet) and 5 (item 1).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MEDUSA_CHOICES = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0)]


def prefix_mask(n, device):
    return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))


def build_tree(choices):
    paths = sorted(choices, key=lambda p: (len(p), p))
    index = {(): 0}
    parents, depths = [-1], [0]
    for i, path in enumerate(paths, start=1):
        index[path] = i
        parents.append(index[path[:-1]])
        depths.append(len(path))
    keep = torch.eye(len(parents), dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            keep[i] |= keep[p]
    leaves = [p for p in paths if not any(q[: len(p)] == p and len(q) > len(p) for q in paths)]
    retrieve = [[0] + [index[leaf[:j]] for j in range(1, len(leaf) + 1)] for leaf in leaves]
    return {"paths": paths, "keep": keep, "depths": torch.tensor(depths), "retrieve": retrieve}


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_mask, kv):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if kv:
            k, v = torch.cat([kv["k"], k], 2), torch.cat([kv["v"], v], 2)
        kv["k"], kv["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class MedusaLM(nn.Module):
    def __init__(self, vocab=128, dim=64, heads=4, layers=2, medusa_heads=3, max_pos=256):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_pos, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.medusa = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, vocab, bias=False)) for _ in range(medusa_heads)
        )

    def forward(self, ids, positions, attn_mask, cache):
        x = self.wte(ids) + self.wpe(positions)
        for block, kv in zip(self.blocks, cache):
            x = block(x, attn_mask, kv)
        h = self.ln_f(x)
        return self.lm_head(h), h

    def new_cache(self):
        return [{} for _ in self.blocks]


def keep_cache(cache, past_len, nodes):
    idx = torch.cat([torch.arange(past_len), past_len + torch.tensor(nodes)])
    for kv in cache:
        kv["k"], kv["v"] = kv["k"][:, :, idx], kv["v"][:, :, idx]


@torch.no_grad()
def medusa_generate(model, prompt, max_new_tokens=16, choices=MEDUSA_CHOICES, topk=3):
    tree = build_tree(choices)
    cache = model.new_cache()
    n = prompt.size(1)
    logits, h = model(prompt, torch.arange(n), prefix_mask(n, prompt.device)[None, None], cache)
    root = logits[0, -1].argmax()
    guesses = [head(h[0, -1]).topk(topk).indices for head in model.medusa]
    out, steps = [], 0
    while len(out) < max_new_tokens:
        past = cache[0]["k"].size(2)
        nodes = [root] + [guesses[len(p) - 1][p[-1]] for p in tree["paths"]]
        tokens = torch.stack(nodes)[None]
        m = tokens.size(1)
        mask = torch.cat([torch.ones(m, past, dtype=torch.bool), tree["keep"]], dim=1)
        logits, h = model(tokens, past + tree["depths"], mask[None, None], cache)
        greedy = logits[0].argmax(-1)
        best = [0]
        for path in tree["retrieve"]:
            run = [0]
            for parent, child in zip(path, path[1:]):
                if tokens[0, child] != greedy[parent]:
                    break
                run.append(child)
            if len(run) > len(best):
                best = run
        out.extend(tokens[0, best].tolist())
        keep_cache(cache, past, best)
        root = greedy[best[-1]]
        guesses = [head(h[0, best[-1]]).topk(topk).indices for head in model.medusa]
        steps += 1
    return out[:max_new_tokens], steps


@torch.no_grad()
def greedy_generate(model, prompt, max_new_tokens=16):
    cache = model.new_cache()
    n = prompt.size(1)
    logits, _ = model(prompt, torch.arange(n), prefix_mask(n, prompt.device)[None, None], cache)
    out = []
    for _ in range(max_new_tokens):
        tok = logits[0, -1].argmax()
        out.append(int(tok))
        logits, _ = model(tok.view(1, 1), torch.tensor([n + len(out) - 1]), None, cache)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    model = MedusaLM().eval()
    prompt = torch.randint(0, 128, (1, 10))
    tokens, steps = medusa_generate(model, prompt)
    print("medusa", tokens, "forward passes:", steps)
    print("greedy", greedy_generate(model, prompt))
