"""Blog post snippet: "Attention pooling in 30 lines" (sentence embeddings from token vectors).

The post's example: token vectors of a padded batch (random here, standing in for an encoder's
output), the padding mask typed in as a `torch.tensor([[...]])` literal of 1.0 / 0.0 (1 = real
token), a learned query that scores every token, the masked softmax over tokens, and the pooled
vector. Small helpers are lambdas, as in the post. The last lines are a reader's check from the
comments: the pooled vector must not change when the padding vectors do.

Source: seed self_attention_mask_guide.txt §3 (常见误区: PyTorch masks are additive, not
multiplicative) and §7 Q3 (additive -inf versus multiplying by 0), conventions.md §1 direction
cheat-sheet (additive masks: 0 keep, large negative drop).
"""
import torch
from torch import nn

torch.manual_seed(0)

D = 8
tokens = torch.randn(3, 5, D)
m = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0],
                  [1.0, 1.0, 1.0, 0.0, 0.0],
                  [1.0, 1.0, 0.0, 0.0, 0.0]])

score = nn.Linear(D, 1, bias=False)
norm = lambda v: v / v.norm(dim=-1, keepdim=True)  # noqa: E731
real = lambda t, mask: t[mask.bool()]  # noqa: E731


def attention_pool(h, mask):
    logits = score(h).squeeze(-1)  # (batch, tokens)
    w = torch.softmax(logits * mask, dim=-1)  # expect: MC520 literal
    return (w.unsqueeze(-1) * h).sum(1), w


with torch.no_grad():
    pooled, w = attention_pool(tokens, m)
    noisy = torch.where(m.bool()[..., None], tokens, torch.randn_like(tokens) * 10)
    pooled_noisy, _ = attention_pool(noisy, m)

print("weights on real tokens per row:", (w * m).sum(-1).round(decimals=3).tolist())
print("weights of row 2's real tokens:", real(w[2], m[2]).round(decimals=3).tolist())
print("pooled change when only padding changes:", (norm(pooled) - norm(pooled_noisy)).abs().max().item())
