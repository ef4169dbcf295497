"""Serving many LoRA adapters on one base model (Punica / S-LoRA style).

Requests name the adapter they want; the router maps names to adapter slots,
batches requests for different adapters together and applies each row's
low-rank update with a gathered batched matmul, so one forward pass serves
every adapter in the batch.  Slot 0 is the base model (zero update).

Source: pytorch/pytorch#103963; huggingface/transformers#32195; conventions.md sections 2.9 and 5 (item 7).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tokenizer:
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    padding_side = "left"

    def encode(self, text):
        return [self.bos_token_id] + [3 + b % 253 for b in text.encode()]

    def __call__(self, texts, padding=True, return_tensors="pt"):
        rows = [self.encode(t) for t in texts]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.pad_token_id)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r)
            attention_mask[i, width - len(r):] = 1
        return {"input_ids": ids, "attention_mask": attention_mask}


class LoRALinear(nn.Module):
    def __init__(self, d_in, d_out, n_slots, rank=4, alpha=8.0):
        super().__init__()
        self.base = nn.Linear(d_in, d_out, bias=False)
        self.lora_A = nn.Parameter(torch.zeros(n_slots, rank, d_in))
        self.lora_B = nn.Parameter(torch.zeros(n_slots, d_out, rank))
        self.scaling = alpha / rank

    def forward(self, x, slots):
        a = self.lora_A[slots]
        b = self.lora_B[slots]
        delta = torch.bmm(torch.bmm(x, a.transpose(1, 2)), b.transpose(1, 2))
        return self.base(x) + self.scaling * delta


def attention_bias(attention_mask, q_len, dtype):
    kv_len = attention_mask.size(1)
    visible = torch.ones(q_len, kv_len, dtype=torch.bool, device=attention_mask.device).tril(kv_len - q_len)
    bias = torch.zeros(q_len, kv_len, dtype=dtype, device=attention_mask.device).masked_fill(~visible, float("-inf"))
    return bias[None, None] + (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class Layer(nn.Module):
    def __init__(self, dim, n_heads, n_slots):
        super().__init__()
        self.n_heads, self.scale = n_heads, (dim // n_heads) ** -0.5
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q_proj = LoRALinear(dim, dim, n_slots)
        self.v_proj = LoRALinear(dim, dim, n_slots)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, slots, bias, cache):
        b, t, d = x.shape
        h = self.ln1(x)
        split = lambda z: z.view(b, t, self.n_heads, -1).transpose(1, 2)
        q, k, v = split(self.q_proj(h, slots)), split(self.k_proj(h)), split(self.v_proj(h, slots))
        if cache:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        cache.update(k=k, v=v)
        scores = (q @ k.transpose(-2, -1)) * self.scale + bias
        y = scores.softmax(-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class MultiLoRAModel(nn.Module):
    def __init__(self, vocab=256, dim=64, n_heads=4, n_layers=2, n_slots=4, max_pos=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.layers = nn.ModuleList(Layer(dim, n_heads, n_slots) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, slots, caches):
        x = self.embed(input_ids) + self.pos(position_ids)
        bias = attention_bias(attention_mask, input_ids.size(1), x.dtype)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, slots, bias, cache)
        return self.lm_head(self.norm(x))


class AdapterRouter:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.slots = {"base": 0}

    def load_adapter(self, name, seed):
        slot = len(self.slots)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for m in self.model.modules():
                if isinstance(m, LoRALinear):
                    m.lora_A[slot] = torch.randn(m.lora_A.shape[1:], generator=g) * 0.1
                    m.lora_B[slot] = torch.randn(m.lora_B.shape[1:], generator=g) * 0.1
        self.slots[name] = slot

    @torch.no_grad()
    def generate(self, requests, max_new_tokens=8):
        enc = self.tokenizer([r["prompt"] for r in requests], padding=True, return_tensors="pt")
        input_ids, attention_mask = enc["input_ids"], enc["attention_mask"]
        slots = torch.tensor([self.slots[r.get("adapter", "base")] for r in requests])
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        caches = [{} for _ in self.model.layers]
        logits = self.model(input_ids, attention_mask, position_ids, slots, caches)
        out = []
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1)
            out.append(nxt)
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
            position_ids = position_ids[:, -1:] + 1
            logits = self.model(nxt[:, None], attention_mask, position_ids, slots, caches)
        return torch.stack(out, 1), logits


if __name__ == "__main__":
    torch.manual_seed(0)
    router = AdapterRouter(MultiLoRAModel(), Tokenizer())
    router.load_adapter("sql", seed=1)
    router.load_adapter("summarise", seed=2)
    reqs = [
        {"prompt": "SELECT name FROM", "adapter": "sql"},
        {"prompt": "tl;dr: the meeting moved to Friday because", "adapter": "summarise"},
        {"prompt": "hello"},
    ]
    tokens, last = router.generate(reqs)
    for r, row in zip(reqs, tokens.tolist()):
        print(r.get("adapter", "base"), row)
    print("last logits", last.shape, bool(torch.isfinite(last).all()))
