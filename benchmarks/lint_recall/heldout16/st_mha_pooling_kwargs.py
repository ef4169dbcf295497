"""Held-out 16: sentence-transformers-style modules run in sequence over a `features` dict: a
word-level tokenizer that pads a batch and returns `input_ids` / `attention_mask` (int64, 1 = real
token, as a Hugging Face tokenizer does), a small `Transformer` module that writes
`token_embeddings`, a `MultiheadAttentionPooling` module with learned queries that writes
`sentence_embedding`, and `Normalize`. The pooling module forwards its attention options to an
inner helper with `**attn_kwargs`, which hands them to nn.MultiheadAttention.

Source: seed guide §2 (nn.MultiheadAttention's key_padding_mask: True marks the padding, which is
masked out) and Q1 (a mask with no effect: True given where False was needed), conventions.md §1
direction cheat-sheet (Hugging Face attention_mask 1 = keep, key_padding_mask True = drop). The
pooling module turns the tokenizer's keep-mask into bool and forwards it as `key_padding_mask`.
"""

from typing import Dict, List

import torch
from torch import Tensor, nn


class WordTokenizer:
    def __init__(self, vocab: Dict[str, int], pad_token_id: int = 0, unk_token_id: int = 1):
        self.vocab, self.pad_token_id, self.unk_token_id = vocab, pad_token_id, unk_token_id

    def __call__(self, texts: List[str]) -> Dict[str, Tensor]:
        ids = [[self.vocab.get(w, self.unk_token_id) for w in t.lower().split()] for t in texts]
        max_len = max(len(i) for i in ids)
        input_ids = torch.full((len(ids), max_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), max_len), dtype=torch.long)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = torch.tensor(seq)
            attention_mask[row, : len(seq)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Transformer(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 64, num_layers: int = 2, num_heads: int = 4, max_len: int = 128):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, num_heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        input_ids, attention_mask = features["input_ids"], features["attention_mask"]
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden = self.embeddings(input_ids) + self.position_embeddings(positions)
        features["token_embeddings"] = self.encoder(hidden, src_key_padding_mask=attention_mask == 0)
        return features


class MultiheadAttentionPooling(nn.Module):
    config_keys = ["word_embedding_dimension", "num_heads", "num_queries"]

    def __init__(self, word_embedding_dimension: int, num_heads: int = 4, num_queries: int = 1):
        super().__init__()
        self.word_embedding_dimension, self.num_heads, self.num_queries = word_embedding_dimension, num_heads, num_queries
        self.queries = nn.Parameter(torch.randn(1, num_queries, word_embedding_dimension) * 0.02)
        self.mha = nn.MultiheadAttention(word_embedding_dimension, num_heads, batch_first=True)
        self.norm = nn.LayerNorm(word_embedding_dimension)

    def get_sentence_embedding_dimension(self) -> int:
        return self.word_embedding_dimension * self.num_queries

    def get_config_dict(self) -> Dict[str, int]:
        return {key: getattr(self, key) for key in self.config_keys}

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        token_embeddings = features["token_embeddings"]
        queries = self.queries.expand(token_embeddings.size(0), -1, -1)
        pooled = self._attend(queries, token_embeddings, key_padding_mask=features["attention_mask"].bool(), need_weights=False)  # expect: MC511|MC502 kwargs
        features["sentence_embedding"] = pooled.flatten(1)
        return features

    def _attend(self, queries: Tensor, tokens: Tensor, **attn_kwargs) -> Tensor:
        out, _ = self.mha(queries, tokens, tokens, **attn_kwargs)  # also: MC511
        return self.norm(out + queries)


class Normalize(nn.Module):
    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        features["sentence_embedding"] = nn.functional.normalize(features["sentence_embedding"], p=2, dim=1)
        return features


class SentenceEncoder(nn.Sequential):
    def __init__(self, tokenizer: WordTokenizer, *modules: nn.Module):
        super().__init__(*modules)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def encode(self, sentences: List[str]) -> Tensor:
        self.eval()
        return self(self.tokenizer(sentences))["sentence_embedding"]


if __name__ == "__main__":
    torch.manual_seed(0)
    words = "the a cat dog sat on mat rug quickly slowly ran".split()
    tokenizer = WordTokenizer({w: i + 2 for i, w in enumerate(words)})
    model = SentenceEncoder(tokenizer, Transformer(len(words) + 2), MultiheadAttentionPooling(64), Normalize())
    batch = model.encode(["the cat sat on the mat quickly", "a dog ran"])
    alone = model.encode(["a dog ran"])
    print("embeddings finite:", bool(torch.isfinite(batch).all()))
    print("short sentence padded vs alone:", float((batch[1] - alone[0]).abs().max()))
    two = model.encode(["the cat sat", "a dog ran"])
    print("two unpadded sentences, embedding difference:", float((two[0] - two[1]).abs().max()))
