"""Speculative decoding: a small draft model proposes k tokens greedily, the target model scores
all k of them in one forward over its KV cache, the longest agreeing prefix is accepted plus the
target's own next token, and the caches are cropped back to the accepted length.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §3 items 9 and 14
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, HEADS = 30, 2


def verify_mask(n_new, n_total):
    """SDPA keep-mask for n_new queries placed at the end of n_total keys."""
    return torch.ones(n_new, n_total, dtype=torch.bool).tril(diagonal=n_total - n_new)


class LM(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.emb = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(64, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, ids, cache):
        past = 0 if cache["k"] is None else cache["k"].shape[2]
        n = ids.shape[1]
        x = self.emb(ids) + self.pos(torch.arange(past, past + n))
        q, k, v = self.qkv(x).view(1, n, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        if cache["k"] is not None:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        cache["k"], cache["v"] = k, v
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=verify_mask(n, k.shape[2]))
        x = x + a.transpose(1, 2).reshape(1, n, self.dim)
        return self.head(x + self.mlp(x))


def crop(cache, length):
    cache["k"], cache["v"] = cache["k"][:, :, :length], cache["v"][:, :, :length]


@torch.no_grad()
def speculative_generate(target, draft, prompt, new_tokens, k=4):
    tc, dc = {"k": None, "v": None}, {"k": None, "v": None}
    out = prompt.tolist()
    t_logits = target(prompt[None], tc)[:, -1]
    draft(prompt[None, :-1], dc)
    accepted_total = 0
    while len(out) - len(prompt) < new_tokens:
        proposal, last = [], torch.tensor([[out[-1]]])
        for _ in range(k):
            nxt = draft(last, dc)[:, -1].argmax(-1, keepdim=True)
            proposal.append(int(nxt))
            last = nxt
        checked = target(torch.tensor([proposal]), tc)[0]
        target_choice = [int(t_logits.argmax())] + checked.argmax(-1).tolist()
        n_ok = 0
        while n_ok < k and proposal[n_ok] == target_choice[n_ok]:
            n_ok += 1
        out += proposal[:n_ok] + [target_choice[n_ok]]
        accepted_total += n_ok
        crop(tc, len(out) - 1)
        crop(dc, len(out) - 1)
        t_logits = target(torch.tensor([[out[-1]]]), tc)[:, -1]
    return out[: len(prompt) + new_tokens], accepted_total


@torch.no_grad()
def greedy(model, prompt, new_tokens):
    cache, out = {"k": None, "v": None}, prompt.tolist()
    logits = model(prompt[None], cache)[:, -1]
    for _ in range(new_tokens):
        out.append(int(logits.argmax()))
        logits = model(torch.tensor([[out[-1]]]), cache)[:, -1]
    return out


if __name__ == "__main__":
    target, draft = LM(48).eval(), LM(48).eval()
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        draft.head.weight.add_(0.05 * torch.randn_like(draft.head.weight))
    prompt = torch.tensor([3, 7, 11, 5, 9])
    spec, accepted = speculative_generate(target, draft, prompt, 12)
    ref = greedy(target, prompt, 12)
    print("speculative:", spec[5:])
    print("target only:", ref[5:])
    print("identical:", spec == ref, "| draft tokens accepted:", accepted)
