"""CodonBERT-style mRNA model: codon MLM pretraining and an expression regressor.

Coding sequences are tokenized codon by codon (64 codons plus the BERT special
tokens). The encoder is pretrained with a masked-language-model objective over
codons (15 % of the real codons, 80/10/10 replacement) and fine-tuned to
regress protein expression level from a masked mean of its states.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (direction cheat-sheet; SDPA and HF attention_mask rows), §4.1, §5 item 1
"""
import itertools
import random
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

config = SimpleNamespace(hidden_size=48, num_heads=4, num_layers=2, intermediate_size=96,
                         max_codons=64, dropout=0.1, mlm_probability=0.15)


class CodonTokenizer:
    special = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]

    def __init__(self):
        codons = ["".join(c) for c in itertools.product("ACGU", repeat=3)]
        self.vocab = {t: i for i, t in enumerate(self.special + codons)}
        self.pad_token_id, self.mask_token_id = self.vocab["[PAD]"], self.vocab["[MASK]"]
        self.n_special = len(self.special)

    def __call__(self, sequences, max_length=64, return_tensors="pt"):
        rows = []
        for seq in sequences:
            seq = seq.upper().replace("T", "U")
            codons = [seq[i:i + 3] for i in range(0, len(seq) - len(seq) % 3, 3)][: max_length - 2]
            rows.append([self.vocab["[CLS]"]] + [self.vocab.get(c, self.vocab["[UNK]"]) for c in codons]
                        + [self.vocab["[SEP]"]])
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows])
        attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class CodonBertSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.dropout

    def forward(self, hidden_states, attn_mask=None):
        b, n, d = hidden_states.shape
        def split(x):
            return x.view(b, n, self.num_heads, -1).transpose(1, 2)
        q, k, v = split(self.query(hidden_states)), split(self.key(hidden_states)), split(self.value(hidden_states))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                             dropout_p=self.dropout_p if self.training else 0.0)
        return ctx.transpose(1, 2).reshape(b, n, d)


class CodonBertLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = CodonBertSelfAttention(cfg)
        self.attn_out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln1 = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ln2 = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, h, attn_mask=None):
        h = self.ln1(h + self.dropout(self.attn_out(self.attention(h, attn_mask=attn_mask))))
        return self.ln2(h + self.dropout(self.output(F.gelu(self.intermediate(h)))))


class CodonBertModel(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_codons, cfg.hidden_size)
        self.ln = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.layers = nn.ModuleList([CodonBertLayer(cfg) for _ in range(cfg.num_layers)])
        self.mlm_head = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.GELU(),
                                      nn.LayerNorm(cfg.hidden_size), nn.Linear(cfg.hidden_size, vocab_size))
        self.regressor = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden_size, 1))

    def forward(self, input_ids, attention_mask):
        pad = attention_mask == 0
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.ln(self.word_embeddings(input_ids) + self.position_embeddings(pos)[None])
        for layer in self.layers:
            h = layer(h, attn_mask=~pad[:, None, None, :])
        return h, pad

    def expression(self, input_ids, attention_mask):
        h, pad = self(input_ids, attention_mask)
        h = h.masked_fill(pad[..., None], 0.0)
        pooled = h.sum(1) / (~pad).sum(1, keepdim=True).clamp(min=1)
        return self.regressor(pooled).squeeze(-1)


def mask_codons(input_ids, attention_mask, tokenizer, cfg, generator=None):
    labels = input_ids.clone()
    maskable = (attention_mask == 1) & (input_ids >= tokenizer.n_special)
    probs = torch.full(input_ids.shape, cfg.mlm_probability)
    chosen = torch.bernoulli(probs, generator=generator).bool() & maskable
    labels[~chosen] = -100
    inputs = input_ids.clone()
    replace = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool() & chosen
    inputs[replace] = tokenizer.mask_token_id
    rand = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool() & chosen & ~replace
    inputs[rand] = torch.randint(tokenizer.n_special, len(tokenizer.vocab), input_ids.shape)[rand]
    return inputs, labels


def random_cds(rng, n_codons):
    body = "".join(rng.choice(["GCU", "GCC", "AAA", "AAG", "GAU", "CUG", "UUC", "GGC", "ACC"]) for _ in range(n_codons))
    return "AUG" + body + rng.choice(["UAA", "UAG", "UGA"])


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tok = CodonTokenizer()
    model = CodonBertModel(config, len(tok.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    cds = [random_cds(rng, rng.randint(8, 20)) for _ in range(8)]
    expression = torch.tensor([float(s.count("GCC") - s.count("AAA")) for s in cds])
    batch = tok(cds)
    for step in range(3):
        inputs, labels = mask_codons(batch["input_ids"], batch["attention_mask"], tok, config)
        h, _ = model(inputs, batch["attention_mask"])
        mlm = F.cross_entropy(model.mlm_head(h).flatten(0, 1), labels.flatten(), ignore_index=-100)
        reg = F.mse_loss(model.expression(**batch), expression)
        opt.zero_grad()
        (mlm + reg).backward()
        opt.step()
        print(f"step {step} mlm {mlm.item():.4f} mse {reg.item():.4f}")
    model.eval()
    with torch.no_grad():
        print("predicted", model.expression(**tok(cds[:3])).tolist())
