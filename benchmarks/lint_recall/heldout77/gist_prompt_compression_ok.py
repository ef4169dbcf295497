"""Gist tokens for prompt compression in a decoder-only LM.

Instruction, then k gist tokens, then input and output: tokens after the last
gist may not attend to anything before the first gist, so the instruction is
squeezed into the gists' activations, after jayelm/gisting (make_gist_mask,
reverse_cumsum). The smoke test trains a few steps on three instruction
examples and prints what the post-gist rows of the mask can see.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, GIST_ID, VOCAB = 0, 1, 96


def reverse_cumsum(x):
    return x + torch.sum(x, dim=-1, keepdim=True) - torch.cumsum(x, dim=-1)


def make_mask_pre_first_gist(inputs, gist_token, pad_token=None, dtype=torch.int64):
    mask = (inputs == gist_token).cumsum(-1) >= 1
    if pad_token is not None:
        mask = mask & (inputs != pad_token)
    return mask.type(dtype)


def make_mask_post_last_gist(inputs, gist_token, pad_token=None, dtype=torch.int64):
    mask = reverse_cumsum(inputs == gist_token) >= 1
    if pad_token is not None:
        mask = mask & (inputs != pad_token)
    return mask.type(dtype)


def make_gist_mask(inputs, gist_token, pad_token=None, dtype=torch.int64):
    pre_gist_mask = make_mask_post_last_gist(inputs, gist_token, dtype=torch.bool)[:, None, None]
    post_gist_mask = make_mask_pre_first_gist(inputs, gist_token, dtype=torch.bool)[:, None, None]
    pre_gist_time_mask = pre_gist_mask.permute((0, 1, 3, 2))
    mask = torch.where(pre_gist_time_mask, pre_gist_mask, post_gist_mask)
    has_gist = (inputs == gist_token).any(-1)[:, None, None, None]
    mask = torch.where(has_gist, mask, True)
    if pad_token is not None:
        mask = mask & (inputs != pad_token)[:, None, None]
    return mask.type(dtype)


class GistAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attention_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask & torch.ones(n, n, dtype=torch.bool, device=x.device).tril())
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class GistLM(nn.Module):
    def __init__(self, vocab=VOCAB, dim=32, n_heads=4, n_layers=2, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, dim)
        self.attn = nn.ModuleList([GistAttention(dim, n_heads) for _ in range(n_layers)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                                  for _ in range(n_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(n_layers)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, labels=None):
        attention_mask = make_gist_mask(input_ids, GIST_ID, pad_token=PAD_ID, dtype=torch.bool)
        h = self.tok(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        for attn, mlp, norm in zip(self.attn, self.mlp, self.norms):
            h = h + attn(norm(h), attention_mask)
            h = h + mlp(h)
        logits = self.head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
        return logits, loss


def encode(text):
    return [2 + (ord(c) - 32) % (VOCAB - 2) for c in text]


def collate(examples, num_gist_tokens=2):
    rows, label_rows = [], []
    for instruction, inp, out in examples:
        prompt = encode(instruction) + [GIST_ID] * num_gist_tokens + encode(inp)
        target = encode(out)
        rows.append(prompt + target)
        label_rows.append([-100] * len(prompt) + target)
    n = max(map(len, rows))
    input_ids = torch.full((len(rows), n), PAD_ID, dtype=torch.long)
    labels = torch.full((len(rows), n), -100, dtype=torch.long)
    for i, (row, lab) in enumerate(zip(rows, label_rows)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(lab)] = torch.tensor(lab)
    return {"input_ids": input_ids, "labels": labels}


if __name__ == "__main__":
    torch.manual_seed(0)
    examples = [("translate to french", "cat", "chat"), ("reverse the word", "stressed", "desserts"),
                ("uppercase this", "gist", "GIST")]
    batch = collate(examples)
    model = GistLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        _, loss = model(**batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    mask = make_gist_mask(batch["input_ids"], GIST_ID, pad_token=PAD_ID, dtype=torch.bool)
    gist_at = (batch["input_ids"] == GIST_ID).int().argmax(-1)
    for i, g in enumerate(gist_at.tolist()):
        print(f"example {i}: post-gist rows see instruction: {bool(mask[i, 0, g + 2:, :g].any())}")
    model.eval()
    with torch.no_grad():
        logits, _ = model(batch["input_ids"])
    print("greedy:", logits.argmax(-1)[0, -4:].tolist())
