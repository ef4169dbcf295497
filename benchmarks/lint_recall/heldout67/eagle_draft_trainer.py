"""EAGLE-style draft head for speculative decoding.

The draft is one decoder layer that reads the target model's last hidden
state at step t together with the embedding of token t+1 and predicts the
hidden state at step t+1; the frozen target LM head turns that feature into
draft logits.  Training regresses the target features (smooth L1) and matches
the target's next-token distribution.  `evaluate` measures how many of the
draft's greedy proposals the target would accept.

Source: seed masked_fill_inplace.txt (梯度计算风险); conventions.md section 2.3.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def attention_bias(attention_mask, dtype=torch.float32):
    n = attention_mask.size(1)
    causal = torch.ones(n, n, dtype=torch.bool, device=attention_mask.device).tril()
    allowed = causal[None, None] & attention_mask[:, None, None, :].bool()
    zero = torch.zeros((), dtype=dtype, device=attention_mask.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


class DecoderLayer(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.input_layernorm = RMSNorm(dim)
        self.q_proj, self.k_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.v_proj, self.o_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 3 * dim, bias=False), nn.SiLU(), nn.Linear(3 * dim, dim, bias=False))

    def forward(self, x, attn_bias, query_keep):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + attn_bias
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs.masked_fill_(~query_keep[:, None, :, None], 0.0)  # expect: MC505 probs
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o_proj(out)
        return x + self.mlp(self.post_attention_layernorm(x))


class TargetLM(nn.Module):
    def __init__(self, vocab=128, dim=64, n_heads=4, n_layers=3, max_len=128):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.embed_positions = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, n_heads) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.embed_tokens(input_ids) + self.embed_positions(pos)
        bias, keep = attention_bias(attention_mask, x.dtype), attention_mask.bool()
        for layer in self.layers:
            x = layer(x, bias, keep)
        x = self.norm(x)
        return self.lm_head(x), x


class EagleDraft(nn.Module):
    def __init__(self, target, n_heads=4):
        super().__init__()
        dim = target.norm.weight.numel()
        self.target = [target]
        self.fc = nn.Linear(2 * dim, dim)
        self.layer = DecoderLayer(dim, n_heads)

    def forward(self, features, next_tokens, attention_mask):
        emb = self.target[0].embed_tokens(next_tokens).detach()
        x = self.fc(torch.cat([emb, features], dim=-1))
        return self.layer(x, attention_bias(attention_mask, x.dtype), attention_mask.bool())

    def logits(self, feats):
        return self.target[0].lm_head(self.target[0].norm(feats))


def make_batch(n=8, min_len=6, max_len=14, vocab=128, generator=None):
    lens = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    ids = torch.randint(3, vocab, (n, int(lens.max())), generator=generator)
    attention_mask = (torch.arange(ids.size(1))[None] < lens[:, None]).long()
    return {"input_ids": ids.masked_fill(attention_mask == 0, PAD), "attention_mask": attention_mask}


def train_step(target, draft, batch, optimizer, w_cls=0.1):
    ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        target_logits, feats = target(ids, attention_mask)
    keep = attention_mask[:, 1:].bool()
    pred = draft(feats[:, :-1], ids[:, 1:], attention_mask[:, 1:])
    reg = F.smooth_l1_loss(pred[keep], feats[:, 1:][keep])
    soft = F.softmax(target_logits[:, 1:][keep], dim=-1)
    cls = -(soft * F.log_softmax(draft.logits(pred)[keep], dim=-1)).sum(-1).mean()
    loss = reg + w_cls * cls
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(target, draft, prompt, depth=4):
    ids, ones = prompt[None], torch.ones(1, prompt.numel(), dtype=torch.long)
    logits, feats = target(ids, ones)
    tokens, proposals = torch.cat([ids, logits[:, -1:].argmax(-1)], 1), []
    for _ in range(depth):
        n = tokens.size(1) - 1
        pred = draft(feats[:, -n:], tokens[:, 1:], torch.ones(1, n, dtype=torch.long))
        nxt = draft.logits(pred[:, -1:]).argmax(-1)
        proposals.append(int(nxt))
        feats, tokens = torch.cat([feats, pred[:, -1:]], 1), torch.cat([tokens, nxt], 1)
    verify, _ = target(tokens[:, :-1], torch.ones(1, tokens.size(1) - 1, dtype=torch.long))
    greedy = verify[0, prompt.numel():].argmax(-1).tolist()
    accepted = 0
    for p, g in zip(proposals, greedy):
        if p != g:
            break
        accepted += 1
    return accepted, proposals


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-steps", type=int, default=0)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    target = TargetLM().eval().requires_grad_(False)
    draft = EagleDraft(target)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=3e-4)
    for step in range(args.train_steps):
        print("step", step, "loss", round(train_step(target, draft, make_batch(generator=gen), optimizer), 4))
    prompt = make_batch(n=1, min_len=10, max_len=10, generator=gen)["input_ids"][0]
    print("accepted / proposals", evaluate(target, draft.eval(), prompt))
