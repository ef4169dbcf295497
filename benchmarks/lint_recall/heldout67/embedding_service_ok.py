"""Text embeddings from a decoder-only LLM (E5-Mistral / GTE-Qwen recipe).

Queries get an instruction prefix, documents do not.  The tokenizer pads on
the left so the last position of every row is the final real token, whose
normalised hidden state is the embedding.  A small in-memory index answers
cosine top-k queries.

Source: conventions.md section 1 (direction cheat-sheet; SDPA and Hugging Face attention_mask rows), sections 4.1 and 5 (item 1).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tokenizer:
    pad_token_id, eos_token_id = 0, 1
    padding_side = "left"

    def __call__(self, texts, padding=True, return_tensors="pt", max_length=64):
        rows = [[2 + (b % 254) for b in t.encode()][: max_length - 1] + [self.eos_token_id] for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r):] = torch.tensor(r)
            attention_mask[i, width - len(r):] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

    def forward(self, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos(), emb.sin()


class DecoderLayer(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.o = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim)
        self.gate_up = nn.Linear(dim, 6 * dim, bias=False)
        self.down = nn.Linear(3 * dim, dim, bias=False)

    def forward(self, h, attn_mask, cos, sin):
        b, n, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, n, 3, self.n_heads, -1).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        h = h + self.o(y.transpose(1, 2).reshape(b, n, d))
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up)


class EmbeddingModel(nn.Module):
    def __init__(self, vocab=256, dim=64, n_heads=4, n_layers=2, max_len=128):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, n_heads) for _ in range(n_layers))
        self.norm = nn.RMSNorm(dim)
        self.rotary = RotaryEmbedding(dim // n_heads)
        self.register_buffer("causal", torch.ones(max_len, max_len, dtype=torch.bool).tril(), persistent=False)

    def forward(self, input_ids, attention_mask):
        n = input_ids.size(1)
        pad = attention_mask == 0
        position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(pad, 0)
        cos, sin = self.rotary(position_ids)
        allowed = self.causal[:n, :n] & ~pad[:, None, None, :]
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, allowed, cos, sin)
        return self.norm(h)


def last_token_pool(hidden, attention_mask):
    if bool(attention_mask[:, -1].all()):
        return hidden[:, -1]
    lengths = attention_mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.size(0)), lengths]


class EmbeddingService:
    query_template = "Instruct: {task}\nQuery: {text}"

    def __init__(self, model, tokenizer, task="Given a question, retrieve passages that answer it"):
        self.model, self.tokenizer, self.task = model.eval(), tokenizer, task
        self.doc_vectors, self.docs = None, []

    @torch.no_grad()
    def embed(self, texts, batch_size=8):
        out = []
        for i in range(0, len(texts), batch_size):
            enc = self.tokenizer(texts[i:i + batch_size], padding=True, return_tensors="pt")
            hidden = self.model(**enc)
            out.append(F.normalize(last_token_pool(hidden, enc["attention_mask"]), dim=-1))
        return torch.cat(out)

    def add(self, docs):
        vecs = self.embed(docs)
        self.doc_vectors = vecs if self.doc_vectors is None else torch.cat([self.doc_vectors, vecs])
        self.docs.extend(docs)

    def search(self, query, k=2):
        q = self.embed([self.query_template.format(task=self.task, text=query)])
        scores = q @ self.doc_vectors.T
        top = scores[0].topk(min(k, len(self.docs)))
        return [(self.docs[i], round(s, 4)) for s, i in zip(top.values.tolist(), top.indices.tolist())]


if __name__ == "__main__":
    torch.manual_seed(0)
    service = EmbeddingService(EmbeddingModel(), Tokenizer())
    service.add([
        "Paged attention stores the KV cache in fixed-size blocks.",
        "Speculative decoding drafts tokens with a small model.",
        "Left padding keeps the last token of every row aligned.",
        "Bananas are rich in potassium.",
    ])
    print(service.search("How is the KV cache stored?"))
    print(service.doc_vectors.shape, bool(torch.isfinite(service.doc_vectors).all()))
