"""English-to-Spanish sequence-to-sequence Transformer, ported from the Keras example to PyTorch.

The Keras layers (`PositionalEmbedding` with `compute_mask`, `TransformerEncoder`,
`TransformerDecoder` whose self-attention runs with `use_causal_mask=True` on top of the
target padding mask) keep their names; Keras' implicit mask propagation became explicit
(embedding layers return `(x, mask)`), and `layers.MultiHeadAttention` became a small
`MultiHeadAttention` module over `F.scaled_dot_product_attention`.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, keras-team/keras#23038.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD = 0


def get_causal_attention_mask(q_len, k_len):
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return j <= i


class PositionalEmbedding(nn.Module):
    def __init__(self, sequence_length, vocab_size, embed_dim):
        super().__init__()
        self.token_embeddings = nn.Embedding(vocab_size, embed_dim)
        self.position_embeddings = nn.Embedding(sequence_length, embed_dim)

    def forward(self, inputs):
        positions = torch.arange(inputs.shape[-1])
        x = self.token_embeddings(inputs) + self.position_embeddings(positions)
        return x, self.compute_mask(inputs)

    def compute_mask(self, inputs):
        return inputs != PAD


class MultiHeadAttention(nn.Module):
    def __init__(self, num_heads, key_dim):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(key_dim, key_dim)
        self.kv = nn.Linear(key_dim, 2 * key_dim)
        self.o = nn.Linear(key_dim, key_dim)

    def forward(self, query, value, attention_mask=None, use_causal_mask=False):
        b, t, d = query.shape
        q = self.q(query).view(b, t, self.num_heads, -1).transpose(1, 2)
        k, v = self.kv(value).view(b, value.shape[1], 2, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if use_causal_mask:
            causal = get_causal_attention_mask(t, value.shape[1])
            attention_mask = causal if attention_mask is None else attention_mask & causal
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, is_causal=True)  # expect: MC506 kerascausal
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o(out.transpose(1, 2).reshape(b, t, d))


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim, dense_dim, num_heads):
        super().__init__()
        self.attention = MultiHeadAttention(num_heads, embed_dim)
        self.dense_proj = nn.Sequential(nn.Linear(embed_dim, dense_dim), nn.ReLU(), nn.Linear(dense_dim, embed_dim))
        self.layernorm_1 = nn.LayerNorm(embed_dim)
        self.layernorm_2 = nn.LayerNorm(embed_dim)

    def forward(self, inputs, mask):
        padding_mask = mask[:, None, None, :]
        attention_output = self.attention(inputs, inputs, attention_mask=padding_mask)
        proj_input = self.layernorm_1(inputs + attention_output)
        return self.layernorm_2(proj_input + self.dense_proj(proj_input))


class TransformerDecoder(nn.Module):
    def __init__(self, embed_dim, latent_dim, num_heads):
        super().__init__()
        self.attention_1 = MultiHeadAttention(num_heads, embed_dim)
        self.attention_2 = MultiHeadAttention(num_heads, embed_dim)
        self.dense_proj = nn.Sequential(nn.Linear(embed_dim, latent_dim), nn.ReLU(), nn.Linear(latent_dim, embed_dim))
        self.layernorm_1 = nn.LayerNorm(embed_dim)
        self.layernorm_2 = nn.LayerNorm(embed_dim)
        self.layernorm_3 = nn.LayerNorm(embed_dim)

    def forward(self, inputs, encoder_outputs, mask, encoder_mask):
        target_mask = mask[:, None, None, :]
        attention_output_1 = self.attention_1(inputs, inputs, attention_mask=target_mask, use_causal_mask=True)
        out_1 = self.layernorm_1(inputs + attention_output_1)
        attention_output_2 = self.attention_2(out_1, encoder_outputs, attention_mask=encoder_mask[:, None, None, :])
        out_2 = self.layernorm_2(out_1 + attention_output_2)
        return self.layernorm_3(out_2 + self.dense_proj(out_2))


class Transformer(nn.Module):
    def __init__(self, vocab_size=30, sequence_length=8, embed_dim=16, latent_dim=32, num_heads=2):
        super().__init__()
        self.enc_embed = PositionalEmbedding(sequence_length, vocab_size, embed_dim)
        self.encoder = TransformerEncoder(embed_dim, latent_dim, num_heads)
        self.dec_embed = PositionalEmbedding(sequence_length, vocab_size, embed_dim)
        self.decoder = TransformerDecoder(embed_dim, latent_dim, num_heads)
        self.dense = nn.Linear(embed_dim, vocab_size)

    def forward(self, encoder_inputs, decoder_inputs):
        x, enc_mask = self.enc_embed(encoder_inputs)
        encoder_outputs = self.encoder(x, enc_mask)
        y, dec_mask = self.dec_embed(decoder_inputs)
        return self.dense(self.decoder(y, encoder_outputs, dec_mask, enc_mask))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Transformer().eval()
    src = torch.tensor([[4, 9, 12, 3, 0, 0], [7, 2, 5, 8, 11, 6]])
    tgt = torch.tensor([[1, 14, 6, 0, 0], [1, 3, 22, 17, 9]])
    with torch.no_grad():
        logits = model(src, tgt)
        future = tgt.clone()
        future[:, -1] = 25
        leak = (model(src, future)[1, :-1] - logits[1, :-1]).abs().max().item()
        print("default kernel: logits", tuple(logits.shape), "future leak:", leak)
        try:
            with sdpa_kernel(SDPBackend.MATH):
                reference = model(src, tgt)
            print("math kernel vs default:", (reference - logits).abs().max().item())
        except RuntimeError as err:
            print("math kernel raised:", err)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 30), tgt[:, 1:].reshape(-1), ignore_index=PAD)
    print("masked loss:", round(loss.item(), 4))
