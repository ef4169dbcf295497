"""Conditional protein generation with a ProGen2-style causal language model.

Sequences are written N-to-C between the terminus tokens ``1`` and ``2`` and
prefixed with a control tag for the protein family (``<|pf00959|>`` ...). The
model is GPT-J shaped (rotary embeddings, parallel attention and MLP). Sampling
uses nucleus sampling with a per-layer key/value cache; prompts of different
lengths are left-padded and carry an attention mask. ``log_likelihood`` scores
sequences in both directions, as in ProGen2's fitness benchmarks.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
CONTROL_TAGS = ["<|pf00959|>", "<|pf01832|>", "<|pf05717|>"]


class ProGenTokenizer:
    def __init__(self):
        tokens = ["<|pad|>", "<|bos|>", "<|eos|>", "1", "2"] + CONTROL_TAGS + list(AMINO_ACIDS)
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.inv = {i: t for t, i in self.vocab.items()}
        self.pad_token_id = self.vocab["<|pad|>"]

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            if text[i] == "<":
                j = text.index(">", i) + 1
                ids.append(self.vocab[text[i:j]])
                i = j
            else:
                ids.append(self.vocab[text[i]])
                i += 1
        return ids

    def __call__(self, texts):
        ids = [self.encode(t) for t in texts]
        width = max(map(len, ids))
        input_ids = torch.full((len(ids), width), self.pad_token_id)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for row, seq in enumerate(ids):
            input_ids[row, width - len(seq):] = torch.tensor(seq)
            attention_mask[row, width - len(seq):] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def decode(self, ids):
        return "".join(self.inv[i] for i in ids if i != self.pad_token_id)


class KVCache:
    def __init__(self, n_layers):
        self.keys, self.values = [None] * n_layers, [None] * n_layers

    def update(self, layer_idx, k, v):
        if self.keys[layer_idx] is not None:
            k = torch.cat([self.keys[layer_idx], k], dim=-2)
            v = torch.cat([self.values[layer_idx], v], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v

    def get_seq_length(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(x, position_ids, base=10000):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).float() / dim))
    sinusoid = position_ids[:, None, :, None].float() * inv_freq
    sin, cos = sinusoid.sin().repeat_interleave(2, -1), sinusoid.cos().repeat_interleave(2, -1)
    return x * cos + rotate_every_two(x) * sin


class ProGenBlock(nn.Module):
    def __init__(self, d_model, n_head, layer_idx):
        super().__init__()
        self.n_head, self.layer_idx = n_head, layer_idx
        self.ln_1 = nn.LayerNorm(d_model)
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, position_ids, attention_mask=None, cache=None):
        b, t, d = x.shape
        h = self.ln_1(x)
        q, k, v = self.qkv_proj(h).view(b, t, 3, self.n_head, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary_pos_emb(q, position_ids), apply_rotary_pos_emb(k, position_ids)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        if attention_mask is None:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(t, k.shape[-2], dtype=torch.bool, device=x.device).tril(k.shape[-2] - t))
        else:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        attn = self.out_proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + attn + self.mlp(h)


class ProGenForCausalLM(nn.Module):
    def __init__(self, vocab_size, d_model=48, n_layer=2, n_head=4):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.h = nn.ModuleList([ProGenBlock(d_model, n_head, i) for i in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids, attention_mask=None, cache=None):
        t = input_ids.shape[1]
        past = cache.get_seq_length() if cache is not None else 0
        mask_4d = None
        if attention_mask is not None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, -t:]
            S = attention_mask.shape[1]
            causal = torch.ones(t, S, dtype=torch.bool, device=input_ids.device).tril(S - t)
            mask_4d = causal[None, None] & attention_mask.bool()[:, None, None, :]
        else:
            position_ids = torch.arange(past, past + t, device=input_ids.device).expand(input_ids.shape[0], t)
        x = self.wte(input_ids)
        for block in self.h:
            x = block(x, position_ids, attention_mask=mask_4d, cache=cache)
        return self.lm_head(self.ln_f(x))


@torch.no_grad()
def sample(model, tokenizer, prompts, max_new_tokens=8, top_p=0.95, temperature=0.8):
    enc = tokenizer(prompts)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    if bool(mask.all()):
        mask = None
    cache = KVCache(len(model.h))
    logits = model(ids, attention_mask=mask, cache=cache)[:, -1]
    out = ids
    for _ in range(max_new_tokens):
        probs = F.softmax(logits / temperature, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        sorted_probs[(sorted_probs.cumsum(-1) - sorted_probs) > top_p] = 0.0
        next_tok = order.gather(-1, torch.multinomial(sorted_probs, 1))
        out = torch.cat([out, next_tok], dim=1)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(next_tok)], dim=1)
        logits = model(next_tok, attention_mask=mask, cache=cache)[:, -1]
    return [tokenizer.decode(row.tolist()) for row in out]


@torch.no_grad()
def log_likelihood(model, tokenizer, tag, sequence):
    scores = []
    for text in (f"{tag}1{sequence}2", f"{tag}2{sequence[::-1]}1"):
        ids = torch.tensor([tokenizer.encode(text)])
        logp = model(ids).log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None])
        scores.append(logp[:, 1:].mean().item())
    return sum(scores) / 2


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = ProGenTokenizer()
    model = ProGenForCausalLM(len(tok.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = [f"{CONTROL_TAGS[i % 3]}1" + "".join(AMINO_ACIDS[j] for j in torch.randint(0, 20, (12,))) + "2"
             for i in range(6)]
    for step in range(3):
        ids = torch.tensor([tok.encode(t) for t in train])
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    print(sample(model, tok, [f"{CONTROL_TAGS[0]}1M", f"{CONTROL_TAGS[1]}1M"]))
    print(sample(model, tok, [f"{CONTROL_TAGS[2]}1MKT", f"{CONTROL_TAGS[2]}1M"]))
    print("ll", round(log_likelihood(model, tok, CONTROL_TAGS[0], "MKTAYIAKQR"), 4))
