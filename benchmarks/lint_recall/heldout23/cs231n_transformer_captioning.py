"""CS231n assignment 3, "Image Captioning with Transformers": transformer_layers.py, filled in.

A student's copy of the skeleton with the "YOUR CODE HERE" blocks completed: MultiHeadAttention,
PositionalEncoding, a decoder layer and CaptioningTransformer. The skeleton's docstrings and
shape comments are kept. The decoder's self-attention mask is the skeleton's lower-triangular
mask, where mask[i, j] == 0 means token i may not look at token j.

Source: seed self_attention_mask_guide.txt, section 3 (常见误区: PyTorch 中 mask 是"加法"而非"乘法")
and section 7 Q3 ("乘法 mask"(乘 0) versus "加法 mask"(加 -inf)).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.1):
        super().__init__()
        assert embed_dim % num_heads == 0
        self.key = nn.Linear(embed_dim, embed_dim)
        self.query = nn.Linear(embed_dim, embed_dim)
        self.value = nn.Linear(embed_dim, embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.attn_drop = nn.Dropout(dropout)
        self.n_head = num_heads
        self.emd_dim = embed_dim
        self.head_dim = self.emd_dim // self.n_head

    def forward(self, query, key, value, attn_mask=None):
        """
        Inputs:
        - query: Input data to be used as the query, of shape (N, S, E)
        - key: Input data to be used as the key, of shape (N, T, E)
        - value: Input data to be used as the value, of shape (N, T, E)
        - attn_mask: Array of shape (S, T) where mask[i,j] == 0 indicates token
          i in the source should not influence token j in the target.

        Returns:
        - output: Tensor of shape (N, S, E) giving the weighted combination of
          data in value according to the attention weights calculated using key
          and query.
        """
        N, S, E = query.shape
        N, T, E = value.shape
        ############################################################################
        # TODO: Implement multiheaded attention using the equations given in       #
        # Transformer_Captioning.ipynb.                                            #
        ############################################################################
        # *****START OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
        H, D = self.n_head, self.head_dim
        q = self.query(query).view(N, S, H, D).transpose(1, 2)  # (N, H, S, D)
        k = self.key(key).view(N, T, H, D).transpose(1, 2)  # (N, H, T, D)
        v = self.value(value).view(N, T, H, D).transpose(1, 2)  # (N, H, T, D)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)  # (N, H, S, T)
        if attn_mask is not None:
            scores = scores * attn_mask  # expect: MC520 skeleton
        attn = self.attn_drop(F.softmax(scores, dim=-1))
        output = torch.matmul(attn, v)  # (N, H, S, D)
        output = self.proj(output.transpose(1, 2).reshape(N, S, E))
        # *****END OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
        return output


class PositionalEncoding(nn.Module):
    def __init__(self, embed_dim, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(1, max_len, embed_dim)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(10000.0) / embed_dim))
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        N, S, D = x.shape
        return self.dropout(x + self.pe[:, :S, :D])


class TransformerDecoderLayer(nn.Module):
    def __init__(self, input_dim, num_heads, dim_feedforward=256, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(input_dim, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(input_dim, num_heads, dropout)
        self.ffn = nn.Sequential(nn.Linear(input_dim, dim_feedforward), nn.ReLU(),
                                 nn.Dropout(dropout), nn.Linear(dim_feedforward, input_dim))
        self.norm_self = nn.LayerNorm(input_dim)
        self.norm_cross = nn.LayerNorm(input_dim)
        self.norm_ffn = nn.LayerNorm(input_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None):
        tgt = self.norm_self(tgt + self.dropout(self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask)))
        tgt = self.norm_cross(tgt + self.dropout(self.cross_attn(tgt, memory, memory)))
        return self.norm_ffn(tgt + self.dropout(self.ffn(tgt)))


class CaptioningTransformer(nn.Module):
    def __init__(self, vocab_size, input_dim, wordvec_dim, num_heads=4, num_layers=2, max_length=50):
        super().__init__()
        self.visual_projection = nn.Linear(input_dim, wordvec_dim)
        self.embedding = nn.Embedding(vocab_size, wordvec_dim)
        self.positional_encoding = PositionalEncoding(wordvec_dim, max_len=max_length)
        self.layers = nn.ModuleList([TransformerDecoderLayer(wordvec_dim, num_heads) for _ in range(num_layers)])
        self.output = nn.Linear(wordvec_dim, vocab_size)

    def forward(self, features, captions):
        """
        - features: image features, of shape (N, D)
        - captions: ground truth captions, of shape (N, T)
        Returns scores of shape (N, T, V).
        """
        N, T = captions.shape
        # *****START OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
        caption_embeddings = self.positional_encoding(self.embedding(captions))  # (N, T, W)
        projected_features = self.visual_projection(features).unsqueeze(1)  # (N, 1, W)
        tgt_mask = torch.tril(torch.ones(T, T, device=captions.device, dtype=torch.bool))  # (T, T)
        x = caption_embeddings
        for layer in self.layers:
            x = layer(x, projected_features, tgt_mask=tgt_mask)
        scores = self.output(x)
        # *****END OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
        return scores


if __name__ == "__main__":
    torch.manual_seed(231)
    model = CaptioningTransformer(vocab_size=30, input_dim=40, wordvec_dim=32, max_length=16).eval()
    features = torch.randn(2, 40)
    captions = torch.randint(0, 30, (2, 8))
    later = captions.clone()
    later[:, 5] = (later[:, 5] + 1) % 30  # change only the word at t = 5
    with torch.no_grad():
        a, b = model(features, captions), model(features, later)
    print("scores shape:", tuple(a.shape))
    print("change at t<5 when word 5 changes (expect 0):", (a[:, :5] - b[:, :5]).abs().max().item())
