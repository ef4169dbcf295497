"""GPT-2 style incremental decoding with legacy `past_key_values` (a tuple of (key, value) per
layer), batched generation from left-padded prompts, `position_ids` from the attention mask, and
the attention mask grown by one column per generated token.

Source: seed self_attention_mask_guide.txt §2, conventions.md §1 (direction cheat-sheet)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS, LAYERS, PAD = 40, 32, 4, 2, 0


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)

    def forward(self, x, layer_past, attention_mask):
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        if layer_past is not None:
            k = torch.cat([layer_past[0], k], dim=-2)
            v = torch.cat([layer_past[1], v], dim=-2)
        s = k.shape[-2]
        scores = q @ k.transpose(-1, -2) / (DIM // HEADS) ** 0.5
        future = torch.ones(t, s, dtype=torch.bool).triu(diagonal=s - t + 1)
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(future, neg)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, neg)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM)
        return self.c_proj(out), (k, v)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(64, DIM)
        self.ln = nn.ModuleList(nn.LayerNorm(DIM) for _ in range(LAYERS))
        self.attn = nn.ModuleList(Attention() for _ in range(LAYERS))
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None):
        if past_key_values is None:
            past_key_values = (None,) * LAYERS
        x = self.wte(input_ids) + self.wpe(position_ids)
        presents = ()
        for ln, attn, past in zip(self.ln, self.attn, past_key_values):
            h, present = attn(ln(x), past, attention_mask)
            x = x + h
            presents = presents + (present,)
        return self.lm_head(x), presents


@torch.no_grad()
def generate(model, input_ids, attention_mask, steps):
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits, past = model(input_ids, None, attention_mask, position_ids)
    out = input_ids
    for _ in range(steps):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        logits, past = model(nxt, past, attention_mask, position_ids)
    return out


def left_pad(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    return ids, (ids != PAD).long()


if __name__ == "__main__":
    model = GPT().eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    batched = generate(model, *left_pad(prompts), steps=6)
    for p, row in zip(prompts, batched):
        alone = generate(model, *left_pad([p]), steps=6)[0]
        print("batched", row[-6:].tolist(), "alone", alone[-6:].tolist())
    ids, mask = left_pad(prompts)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits, _ = model(ids, None, mask, pos)
        other, _ = model(ids.masked_fill(mask == 0, 33), None, mask, pos)
    print(f"pad ids 0 vs 33, next-token logits move by {(logits[:, -1] - other[:, -1]).abs().max().item():.3g}")
