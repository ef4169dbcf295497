"""Recipe generator: ingredients in, numbered cooking steps out, as one decoder-only LM.

A training example is ``<ingr> flour , eggs , milk <steps> 1. whisk ... <eos>``; the loss is taken
on the step tokens only. Batches are right-padded by ``collate_recipes``. The training script is an
Accelerate loop (gradient accumulation, ``accelerator.autocast()``, ``accelerator.clip_grad_norm_``)
and the model uses ``F.scaled_dot_product_attention``.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7, section 5 item 8; pytorch/pytorch PR #111007
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from accelerate import Accelerator
except ImportError:
    class Accelerator:
        def __init__(self, gradient_accumulation_steps: int = 1, mixed_precision: str = "no"):
            self.gradient_accumulation_steps = gradient_accumulation_steps
            self.device = torch.device("cpu")
            self.sync_gradients = True

        def prepare(self, *objects):
            return objects if len(objects) > 1 else objects[0]

        def accumulate(self, model):
            return contextlib.nullcontext()

        def autocast(self):
            return contextlib.nullcontext()

        def backward(self, loss):
            (loss / self.gradient_accumulation_steps).backward()

        def clip_grad_norm_(self, params, max_norm):
            return torch.nn.utils.clip_grad_norm_(params, max_norm)


SPECIAL = {"<pad>": 0, "<ingr>": 1, "<steps>": 2, "<eos>": 3}
CFG = SimpleNamespace(vocab_size=200, d_model=64, n_heads=4, n_layers=2, max_len=96, dropout=0.1,
                      attn_dropout=0.0, lr=5e-4, grad_accum=2, max_grad_norm=1.0)


def word_id(word: str) -> int:
    return SPECIAL.get(word, len(SPECIAL) + sum(map(ord, word)) % (CFG.vocab_size - len(SPECIAL)))


def collate_recipes(examples: list[dict]) -> dict[str, torch.Tensor]:
    seqs, step_starts = [], []
    for ex in examples:
        ids = [SPECIAL["<ingr>"]] + [word_id(w) for w in " , ".join(ex["ingredients"]).split()]
        step_starts.append(len(ids))
        ids += [SPECIAL["<steps>"]] + [word_id(w) for w in ex["steps"].split()] + [SPECIAL["<eos>"]]
        seqs.append(ids[: CFG.max_len])
    width = max(map(len, seqs))
    input_ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attention_mask = torch.zeros(len(seqs), width, dtype=torch.long)
    loss_mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for i, (ids, s) in enumerate(zip(seqs, step_starts)):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        loss_mask[i, s + 1 : len(ids)] = True
    return {"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask}


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    bias = bias.masked_fill(attention_mask == 0, torch.finfo(dtype).min)
    return bias[:, None, None, :]


class DecoderLayer(nn.Module):
    def __init__(self, d, h, p, attn_p=0.0):
        super().__init__()
        self.h, self.p = h, attn_p
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(p), nn.Linear(4 * d, d))

    def attend(self, x, key_bias):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        p = self.p if self.training else 0.0
        if key_bias is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_bias.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), torch.finfo(key_bias.dtype).min), dropout_p=p)
        return self.o(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, key_bias=None):
        x = x + self.attend(self.ln1(x), key_bias)
        return x + self.ff(self.ln2(x))


class RecipeLM(nn.Module):
    def __init__(self, cfg=CFG):
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(1, cfg.max_len, cfg.d_model))
        self.layers = nn.ModuleList([DecoderLayer(cfg.d_model, cfg.n_heads, cfg.dropout, cfg.attn_dropout) for _ in range(cfg.n_layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, input_ids, attention_mask=None):
        x = self.emb(input_ids) + self.pos[:, : input_ids.size(1)]
        key_bias = None
        if attention_mask is not None and not bool(attention_mask.all()):
            key_bias = padding_bias(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, key_bias)
        return self.lm_head(self.norm(x))

    @torch.no_grad()
    def greedy(self, ingredients: list[str], max_steps: int = 12) -> list[int]:
        ids = [SPECIAL["<ingr>"]] + [word_id(w) for w in " , ".join(ingredients).split()] + [SPECIAL["<steps>"]]
        x = torch.tensor([ids])
        for _ in range(max_steps):
            nxt = self(x)[0, -1].argmax().item()
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
            if nxt == SPECIAL["<eos>"]:
                break
        return x[0, len(ids):].tolist()


def step_loss(logits, batch):
    tgt = batch["input_ids"][:, 1:].masked_fill(~batch["loss_mask"][:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tgt.flatten(), ignore_index=-100)


def main(data, epochs=2):
    accelerator = Accelerator(gradient_accumulation_steps=CFG.grad_accum)
    model = RecipeLM()
    opt = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=False, collate_fn=collate_recipes)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = step_loss(model(batch["input_ids"], batch["attention_mask"]), batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), CFG.max_grad_norm)
                opt.step()
                opt.zero_grad()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    return model, loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    data = [
        {"ingredients": ["flour", "eggs", "milk"], "steps": "1. whisk eggs and milk 2. fold in flour 3. fry"},
        {"ingredients": ["rice", "water"], "steps": "1. rinse rice 2. simmer"},
        {"ingredients": ["tomato", "basil", "olive oil", "garlic"], "steps": "1. chop 2. toss"},
        {"ingredients": ["oats", "milk"], "steps": "1. boil milk 2. stir in oats 3. rest five minutes"},
    ]
    model, last = main(data)
    model.eval()
    print("greedy:", model.greedy(["eggs", "butter"]))
    assert last == last
