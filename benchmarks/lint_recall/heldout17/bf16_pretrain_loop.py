"""bf16 pretraining loop for a small decoder on ragged, left-padded batches: a plain script.

Source: NVIDIA-NeMo/Automodel PR #2658 ("avoid bf16 -inf overflow in additive attention
mask": a causal `finfo(bf16).min` plane plus a padding `finfo(bf16).min` plane) and
huggingface/transformers PR #27114 (the same sum in AttentionMaskConverter); conventions.md
§2.3 and §3 items 15-16. The two planes are built and added inside the training loop.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.bfloat16
VOCAB, PAD, DIM, HEADS, STEPS = 512, 0, 128, 4, 20
torch.manual_seed(0)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(DIM), nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, position_ids, attn_bias):
        b, t = ids.shape
        x = self.emb(ids) + sinusoidal_positions(position_ids)
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1)) + attn_bias
        probs = scores.float().softmax(dim=-1).to(v.dtype)
        x = x + self.proj((probs @ v).transpose(1, 2).reshape(b, t, DIM))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


def sinusoidal_positions(position_ids, dim=DIM):
    """Sinusoidal absolute positions (keeps the example small)."""
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=position_ids.device) / dim))
    ang = position_ids[..., None].float() * inv
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


def ragged_batches(n_batches, batch_size=4, max_len=24):
    """Left-padded batches of random token sequences with their HF-style attention_mask."""
    for _ in range(n_batches):
        lengths = torch.randint(4, max_len + 1, (batch_size,))
        ids = torch.full((batch_size, max_len), PAD)
        attention_mask = torch.zeros(batch_size, max_len, dtype=torch.long)
        for i, n in enumerate(lengths.tolist()):
            ids[i, max_len - n :] = torch.randint(1, VOCAB, (n,))
            attention_mask[i, max_len - n :] = 1
        yield ids, attention_mask


model = Decoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

for step, (ids, attention_mask) in enumerate(ragged_batches(STEPS)):
    ids, attention_mask = ids.to(device), attention_mask.to(device)
    L = ids.size(1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    neg = torch.finfo(dtype).min
    causal_bias = torch.full((L, L), neg, dtype=dtype, device=device).triu(1)
    padding_bias = (1.0 - attention_mask[:, None, None, :].to(dtype)) * neg
    attn_bias = causal_bias + padding_bias  # expect: MC513 loop
    labels = ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    with torch.autocast(device.type, dtype=dtype):
        logits = model(ids, position_ids, attn_bias)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.3f} grad_norm {grad_norm.item():.3f}")

print("-inf cells in the last attn_bias:", torch.isneginf(attn_bias).sum().item())
row = attn_bias[attention_mask[:, 0].argmin(), 0, 0].float()
print("weights of padded query row 0 (zero scores):", row.softmax(-1)[:6].tolist())
