"""A GPT-2 forward pass ported line by line from a NumPy reference implementation to torch.

The NumPy original is a handful of pure functions over a nested `params` dict (`wte`, `wpe`,
`blocks[i]["attn"]["c_attn"]`, ...), with `x @ w + b` linear layers and its own softmax and
layer norm; the port keeps the function names, the argument order and the dict layout, and adds
a batched scorer for right-padded continuations. Random weights stand in for the checkpoint.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask, diagonal=1),
conventions.md §2.3 (fully-masked row) and §5 item 2, tools.md §0 P4.
"""
import math

import torch

PAD = 0


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    exp_x = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return exp_x / exp_x.sum(dim=-1, keepdim=True)


def layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    variance = x.var(dim=-1, keepdim=True, unbiased=False)
    return g * (x - mean) / torch.sqrt(variance + eps) + b


def linear(x, w, b):
    return x @ w + b


def ffn(x, c_fc, c_proj):
    return linear(gelu(linear(x, **c_fc)), **c_proj)


def attention(q, k, v, mask):
    return softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)
    q, k, v = x.chunk(3, dim=-1)
    q, k, v = (t.reshape(*t.shape[:-1], n_head, -1).transpose(-3, -2) for t in (q, k, v))
    n = x.shape[-2]
    causal_mask = torch.triu(torch.full((n, n), float("-inf"), dtype=x.dtype))  # expect: MC503 numpyref
    out_heads = attention(q, k, v, causal_mask)
    x = out_heads.transpose(-3, -2).reshape(*x.shape[:-1], -1)
    return linear(x, **c_proj)


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    return x + ffn(layer_norm(x, **ln_2), **mlp)


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head):
    x = wte[inputs] + wpe[torch.arange(inputs.shape[-1])]
    for block in blocks:
        x = transformer_block(x, **block, n_head=n_head)
    return layer_norm(x, **ln_f) @ wte.T


def score_continuations(prompt, continuations, params, n_head):
    """Sum of log-probabilities of each continuation after the prompt (right padding)."""
    seqs = [prompt + c for c in continuations]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    logits = gpt2(ids, **params, n_head=n_head)
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    targets = ids[:, 1:]
    position = torch.arange(width - 1)[None, :]
    lengths = torch.tensor([len(s) for s in seqs])[:, None]
    scored = (position >= len(prompt) - 1) & (position < lengths - 1)
    token_logp = logp.gather(-1, targets[..., None]).squeeze(-1)
    return torch.where(scored, token_logp, torch.zeros_like(token_logp)).sum(dim=-1)


def random_params(n_vocab=50, n_ctx=16, n_embd=16, n_layer=2, seed=0):
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    def ln():
        return {"g": torch.ones(n_embd), "b": torch.zeros(n_embd)}

    blocks = [
        {
            "mlp": {"c_fc": {"w": w(n_embd, 4 * n_embd), "b": w(4 * n_embd)},
                    "c_proj": {"w": w(4 * n_embd, n_embd), "b": w(n_embd)}},
            "attn": {"c_attn": {"w": w(n_embd, 3 * n_embd), "b": w(3 * n_embd)},
                     "c_proj": {"w": w(n_embd, n_embd), "b": w(n_embd)}},
            "ln_1": ln(),
            "ln_2": ln(),
        }
        for _ in range(n_layer)
    ]
    return {"wte": w(n_vocab, n_embd), "wpe": w(n_ctx, n_embd), "blocks": blocks, "ln_f": ln()}


if __name__ == "__main__":
    params = random_params()
    inputs = torch.tensor([5, 9, 13, 2, 31, 7])
    logits = gpt2(inputs, **params, n_head=2)
    print("logits NaN:", bool(torch.isnan(logits).any()))
    changed = inputs.clone()
    changed[-1] = 44
    moved = (gpt2(changed, **params, n_head=2)[:-1] - logits[:-1]).abs().max().item()
    print("earlier logits moved by changing the last token:", moved)
    scores = score_continuations([5, 9, 13], [[2, 31], [7], [40, 41, 42]], params, n_head=2)
    print("continuation scores:", [round(s, 4) for s in scores.tolist()])
    alone = torch.cat([score_continuations([5, 9, 13], [c], params, n_head=2)
                       for c in [[2, 31], [7], [40, 41, 42]]])
    print("max |batched - alone|:", (scores - alone).abs().max().item())
