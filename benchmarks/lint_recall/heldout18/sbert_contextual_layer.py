"""sentence-transformers-style pipeline: WordEmbeddings -> ContextLayer -> Pooling, with `features` dicts.

The tokenizer returns an int64 `attention_mask` (1 = real token), as a Hugging Face tokenizer does;
`Pooling` does the library's masked mean over real tokens. The `ContextLayer` module (a small
nn.TransformerEncoder between the embeddings and the pooling) inverts the int64 mask with `~`
to make the key padding mask.

Source: conventions.md §1 (HF `attention_mask` is int64, 1 = keep; nn.MultiheadAttention's
key_padding_mask is True = drop and rejects integer masks, §2.4 "key_padding_mask int64 ...
only bool and floating types"), seed self_attention_mask_guide.txt Q5 (bool / float mask conversion).
"""
from typing import Dict, List

import torch
from torch import Tensor, nn


class WhitespaceTokenizer:
    def __init__(self, vocab: List[str]):
        self.vocab = {w: i + 1 for i, w in enumerate(vocab)}  # 0 = [PAD]

    def __call__(self, texts: List[str]) -> Dict[str, Tensor]:
        ids = [[self.vocab.get(w, len(self.vocab) + 1) for w in t.lower().split()] for t in texts]
        max_len = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (max_len - len(x)) for x in ids], dtype=torch.long)
        attention_mask = torch.tensor([[1] * len(x) + [0] * (max_len - len(x)) for x in ids], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class WordEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.emb_layer = nn.Embedding(vocab_size, dim, padding_idx=0)

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        features.update({"token_embeddings": self.emb_layer(features["input_ids"])})
        return features


class ContextLayer(nn.Module):
    """Self-attention over the word embeddings, so the pooled vector sees word order."""

    def __init__(self, dim: int, num_heads: int = 4, num_layers: int = 1):
        super().__init__()
        self.config_keys = ["dim", "num_heads", "num_layers"]
        self.position = nn.Embedding(128, dim)
        layer = nn.TransformerEncoderLayer(dim, num_heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        token_embeddings = features["token_embeddings"]
        positions = torch.arange(token_embeddings.size(1), device=token_embeddings.device)
        src_key_padding_mask = ~features["attention_mask"]  # expect: MC518 sbert
        token_embeddings = self.encoder(token_embeddings + self.position(positions), src_key_padding_mask=src_key_padding_mask)  # also: MC518
        features.update({"token_embeddings": token_embeddings})
        return features


class Pooling(nn.Module):
    def __init__(self, word_embedding_dimension: int, pooling_mode_mean_tokens: bool = True):
        super().__init__()
        self.word_embedding_dimension = word_embedding_dimension
        self.pooling_mode_mean_tokens = pooling_mode_mean_tokens

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        token_embeddings = features["token_embeddings"]
        attention_mask = features["attention_mask"]
        if not self.pooling_mode_mean_tokens:
            features.update({"sentence_embedding": token_embeddings[:, 0]})
            return features
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(token_embeddings.dtype)
        sum_embeddings = torch.sum(token_embeddings * input_mask_expanded, 1)
        sum_mask = torch.clamp(input_mask_expanded.sum(1), min=1e-9)
        features.update({"sentence_embedding": sum_embeddings / sum_mask})
        return features


class SentenceTransformer(nn.Sequential):
    def __init__(self, tokenizer: WhitespaceTokenizer, modules: List[nn.Module]):
        super().__init__(*modules)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def encode(self, sentences: List[str]) -> Tensor:
        self.eval()
        features = self.tokenizer(sentences)
        return self.forward(features)["sentence_embedding"]


if __name__ == "__main__":
    torch.manual_seed(0)
    words = "a the cat dog sat on mat ran in park".split()
    model = SentenceTransformer(WhitespaceTokenizer(words), [WordEmbeddings(len(words) + 2, 32), ContextLayer(32), Pooling(32)])
    batch = model.encode(["the cat sat on the mat", "a dog ran"])
    alone = model.encode(["a dog ran"])
    print("embeddings:", tuple(batch.shape))
    print("padded vs alone:", (batch[1] - alone[0]).abs().max().item())
