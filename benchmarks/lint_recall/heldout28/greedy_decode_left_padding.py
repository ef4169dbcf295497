"""Greedy decoding for a batch of left-padded prompts without a cache: every step re-runs the
model on the whole sequence, a helper turns the tokenizer's attention mask into an additive
padding bias and position ids, and generation stops per row at the end-of-sequence token.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), conventions.md §1 (direction cheat-sheet) and §2.3, tools.md §0 P4
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS, PAD, EOS = 40, 32, 4, 0, 2


def mask_inputs(attention_mask):
    pad_bias = (1.0 - attention_mask[:, None, None, :].float()) * float("-inf")  # expect: MC522 greedy
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return pad_bias, position_ids


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.pos = nn.Embedding(64, DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o = nn.Linear(DIM, DIM)
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids, attention_mask):
        pad_bias, position_ids = mask_inputs(attention_mask)
        b, t = ids.shape
        x = self.emb(ids) + self.pos(position_ids)
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        future = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        scores = q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5 + future + pad_bias
        weights = scores.softmax(-1)
        x = x + self.o((weights @ v).transpose(1, 2).reshape(b, t, DIM))
        return self.head(x)


@torch.no_grad()
def greedy(model, ids, attention_mask, max_new_tokens=6):
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(ids, attention_mask)[:, -1]
        nxt = logits.argmax(-1).masked_fill(done, PAD)
        ids = torch.cat([ids, nxt[:, None]], 1)
        attention_mask = torch.cat([attention_mask, (~done).long()[:, None]], 1)
        done |= nxt == EOS
    return ids, logits


def left_pad(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    return ids, (ids != PAD).long()


if __name__ == "__main__":
    model = Decoder().eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [13]]
    out, last = greedy(model, *left_pad(prompts))
    print("last-step logits finite:", bool(torch.isfinite(last).all()))
    for p, row in zip(prompts, out):
        alone, _ = greedy(model, *left_pad([p]))
        print("batched", row[-6:].tolist(), "alone", alone[0, -6:].tolist())
