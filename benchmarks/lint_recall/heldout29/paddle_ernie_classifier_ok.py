"""ERNIE-style sentence classifier ported from PaddleNLP to PyTorch.

The Paddle model takes `input_ids`, `token_type_ids` and an optional `attention_mask` from the
tokenizer; without one it derives the mask from the pad id, as PaddleNLP's `ErnieModel` does,
and a 2-D one is lifted to [batch, 1, 1, seq]. `paddle.unsqueeze(x, axis=[1, 2])`
became `x[:, None, None, :]`, `astype` became `to`, and `nn.MultiHeadAttention(attn_mask=...)`
became `F.scaled_dot_product_attention`. `pooler`, `ErnieEmbeddings` keep their Paddle names.

Source: pytorch/pytorch#103963, tools.md §0 P1, conventions.md §1 (HF 2-D attention_mask row) and §5 item 7.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


def tokenize(batch_ids, max_len=None):
    max_len = max_len or max(len(x) for x in batch_ids)
    input_ids = torch.full((len(batch_ids), max_len), PAD_ID, dtype=torch.long)
    token_type_ids = torch.zeros_like(input_ids)
    for i, ids in enumerate(batch_ids):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        sep = ids.index(3) + 1
        token_type_ids[i, sep : len(ids)] = 1
    attention_mask = (input_ids != PAD_ID).long()
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


class ErnieEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position, type_vocab_size=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(max_position, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size)

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.shape[1])[None, :]
        emb = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.layer_norm(emb + self.token_type_embeddings(token_type_ids))


class ErnieLayer(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size)
        self.ffn = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.GELU(), nn.Linear(2 * hidden_size, hidden_size))
        self.norm2 = nn.LayerNorm(hidden_size)

    def forward(self, src, src_mask):
        b, t, d = src.shape
        q, k, v = self.qkv(src).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=src_mask)
        src = self.norm1(src + self.out_proj(attn.transpose(1, 2).reshape(b, t, d)))
        return self.norm2(src + self.ffn(src))


class ErnieForSequenceClassification(nn.Module):
    def __init__(self, vocab_size=50, hidden_size=16, num_heads=2, num_layers=2, max_position=32, num_classes=2):
        super().__init__()
        self.embeddings = ErnieEmbeddings(vocab_size, hidden_size, max_position)
        self.encoder = nn.ModuleList([ErnieLayer(hidden_size, num_heads) for _ in range(num_layers)])
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        dtype = self.pooler[0].weight.dtype
        big_neg = torch.finfo(dtype).min
        if attention_mask is None:
            attention_mask = (input_ids == PAD_ID).to(dtype)[:, None, None, :] * big_neg
        elif attention_mask.ndim == 2:
            attention_mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * big_neg
        hidden = self.embeddings(input_ids, token_type_ids)
        for layer in self.encoder:
            hidden = layer(hidden, attention_mask)
        return self.classifier(self.pooler(hidden[:, 0]))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ErnieForSequenceClassification().eval()
    pairs = [[1, 12, 17, 3, 25, 9, 3], [1, 30, 3, 8, 3], [1, 5, 3, 44, 41, 3]]
    batch = tokenize(pairs)
    with torch.no_grad():
        with_mask = model(**batch)
        from_ids = model(batch["input_ids"], batch["token_type_ids"])
        alone = torch.cat([model(**tokenize([p])) for p in pairs])
    print("logits with tokenizer mask:", [[round(v, 4) for v in row] for row in with_mask.tolist()])
    print("max |tokenizer mask - mask from pad ids|:", (with_mask - from_ids).abs().max().item())
    print("max |batched - alone|:", (with_mask - alone).abs().max().item())
