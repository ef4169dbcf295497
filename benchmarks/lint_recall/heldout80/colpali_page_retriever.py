"""ColPali-style visual document retrieval over page images.

Page screenshots are cut into patches and run through a small PaliGemma-like backbone
together with a fixed "Describe the image." prompt; every output token is projected to a
128-d (here 32-d) multi-vector and L2-normalised. Queries are tokenized with a "Question: "
prefix, encoded by the same backbone and scored against pages with late interaction
(`score_multi_vector`, MaxSim summed over query tokens). Pages are indexed once; the
serving path encodes each incoming query on its own.

Source: conventions.md §2.6 (an (N,S) padding mask given to SDPA as attn_mask), §5 item 6.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence


@dataclass
class ColPaliConfig:
    image_size: int = 32
    patch_size: int = 8
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    dim: int = 32
    vocab_size: int = 1000
    pad_token_id: int = 0
    image_prompt: str = "Describe the image."


class ColPaliProcessor:
    def __init__(self, config):
        self.config = config

    def _ids(self, text):
        return [3 + sum(ord(c) * (i + 1) for i, c in enumerate(w)) % (self.config.vocab_size - 3)
                for w in text.lower().split()]

    def process_images(self, images):
        pixel_values = torch.stack([F.interpolate(im[None], size=self.config.image_size, mode="bilinear")[0]
                                    for im in images])
        prompt = torch.tensor(self._ids(self.config.image_prompt)).expand(len(images), -1)
        return {"pixel_values": pixel_values, "input_ids": prompt}

    def process_queries(self, queries):
        rows = [[1] + self._ids("Question: " + q) for q in queries]
        input_ids = pad_sequence([torch.tensor(r) for r in rows], batch_first=True,
                                 padding_value=self.config.pad_token_id)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.config.pad_token_id).long()}

    @staticmethod
    def score_multi_vector(qs, ps):
        qs = pad_sequence(qs, batch_first=True)
        ps = pad_sequence(ps, batch_first=True)
        return torch.einsum("bnd,csd->bcns", qs, ps).max(dim=3)[0].sum(dim=2)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))

    def forward(self, x, attention_mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if attention_mask is None:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask.bool())  # expect: MC515 bare
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class ColPali(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embed = nn.Conv2d(3, config.hidden_size, config.patch_size, stride=config.patch_size)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.hidden_size)
        self.custom_text_proj = nn.Linear(config.hidden_size, config.dim)

    def forward(self, input_ids, attention_mask=None, pixel_values=None):
        x = self.embed_tokens(input_ids)
        if pixel_values is not None:
            patches = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
            x = torch.cat([patches, x], dim=1)
        for layer in self.layers:
            x = layer(x, attention_mask)
        proj = F.normalize(self.custom_text_proj(self.norm(x)), dim=-1)
        if attention_mask is not None:
            proj = proj * attention_mask.unsqueeze(-1)
        return proj


class PageIndex:
    def __init__(self, model, processor):
        self.model, self.processor = model, processor
        self.pages, self.embeddings = [], []

    @torch.no_grad()
    def add(self, names, images, batch_size=4):
        self.model.eval()
        for i in range(0, len(images), batch_size):
            batch = self.processor.process_images(images[i:i + batch_size])
            self.embeddings.extend(self.model(**batch).unbind(0))
            self.pages.extend(names[i:i + batch_size])

    @torch.no_grad()
    def search(self, query, k=3):
        self.model.eval()
        batch = self.processor.process_queries([query])
        q = self.model(**batch)
        scores = self.processor.score_multi_vector(list(q.unbind(0)), self.embeddings)[0]
        top = scores.topk(min(k, len(self.pages)))
        return [(self.pages[j], round(s, 3)) for s, j in zip(top.values.tolist(), top.indices.tolist())]

    @torch.no_grad()
    def search_batch(self, queries):
        self.model.eval()
        q = self.model(**self.processor.process_queries(queries))
        return self.processor.score_multi_vector(list(q.unbind(0)), self.embeddings).argmax(-1)


def train_step(model, processor, optimizer, queries, images):
    model.train()
    q = model(**processor.process_queries(queries))
    p = model(**processor.process_images(images))
    scores = torch.einsum("bnd,csd->bcns", q, p).max(dim=3)[0].sum(dim=2)
    pos = scores.diagonal()
    neg = scores.masked_fill(torch.eye(len(queries), dtype=torch.bool), -1e4).max(dim=1)[0]
    loss = F.softplus(neg - pos).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    config = ColPaliConfig()
    processor = ColPaliProcessor(config)
    model = ColPali(config)
    pages = [torch.rand(3, 48, 40) for _ in range(6)]
    index = PageIndex(model, processor)
    index.add([f"report.pdf#page={i + 1}" for i in range(len(pages))], pages)
    for query in ["total revenue in 2021", "organisation chart of the board"]:
        print(query, "->", index.search(query, k=2))
