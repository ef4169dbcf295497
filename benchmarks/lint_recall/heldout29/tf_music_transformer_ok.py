"""Symbolic-music language model, a TensorFlow transformer-tutorial decoder ported to PyTorch.

The TensorFlow code builds `create_padding_mask(seq)` and `create_look_ahead_mask(size)` as
float masks with 1 where attention is not allowed, merges them with `tf.maximum`, and calls its
own `scaled_dot_product_attention(q, k, v, mask)`; the port keeps those names and that
convention, adds a clipped relative-position bias over note events, replaces
`scaled_attention_logits += mask * -1e9` with a fill, and keeps the masked loss of the original.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §1 (TensorFlow row,
direction cheat-sheet) and §3 items 9 and 14.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


def create_padding_mask(seq):
    seq = (seq == PAD).float()
    return seq[:, None, None, :]


def create_look_ahead_mask(size):
    mask = 1 - torch.tril(torch.ones(size, size))
    return mask


def scaled_dot_product_attention(q, k, v, mask, rel_bias=None):
    matmul_qk = q @ k.transpose(-2, -1)
    scaled_attention_logits = matmul_qk / k.shape[-1] ** 0.5
    if rel_bias is not None:
        scaled_attention_logits = scaled_attention_logits + rel_bias
    if mask is not None:
        big_neg = torch.finfo(scaled_attention_logits.dtype).min
        scaled_attention_logits = scaled_attention_logits.masked_fill(mask == 1, big_neg)
    attention_weights = torch.softmax(scaled_attention_logits, dim=-1)
    return attention_weights @ v, attention_weights


class RelativeBias(nn.Module):
    def __init__(self, num_heads, max_distance):
        super().__init__()
        self.max_distance = max_distance
        self.table = nn.Embedding(2 * max_distance + 1, num_heads)

    def forward(self, length):
        pos = torch.arange(length)
        rel = (pos[None, :] - pos[:, None]).clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.table(rel).permute(2, 0, 1)[None]


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff):
        super().__init__()
        self.num_heads = num_heads
        self.wqkv = nn.Linear(d_model, 3 * d_model)
        self.dense = nn.Linear(d_model, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, dff), nn.ReLU(), nn.Linear(dff, d_model))
        self.layernorm1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layernorm2 = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, x, combined_mask, rel_bias):
        b, t, d = x.shape
        q, k, v = self.wqkv(x).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        attn, weights = scaled_dot_product_attention(q, k, v, combined_mask, rel_bias)
        out1 = self.layernorm1(x + self.dense(attn.transpose(1, 2).reshape(b, t, d)))
        return self.layernorm2(out1 + self.ffn(out1)), weights


class MusicTransformer(nn.Module):
    def __init__(self, vocab_size=64, d_model=16, num_heads=2, dff=32, num_layers=2, max_distance=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.rel_bias = RelativeBias(num_heads, max_distance)
        self.dec_layers = nn.ModuleList([DecoderLayer(d_model, num_heads, dff) for _ in range(num_layers)])
        self.final_layer = nn.Linear(d_model, vocab_size)

    def create_masks(self, tar):
        look_ahead_mask = create_look_ahead_mask(tar.shape[1])
        dec_target_padding_mask = create_padding_mask(tar)
        return torch.maximum(dec_target_padding_mask, look_ahead_mask)

    def forward(self, tar):
        combined_mask = self.create_masks(tar)
        rel_bias = self.rel_bias(tar.shape[1])
        x = self.embedding(tar) * self.embedding.embedding_dim**0.5
        attention_weights = {}
        for i, layer in enumerate(self.dec_layers):
            x, attention_weights[f"decoder_layer{i + 1}"] = layer(x, combined_mask, rel_bias)
        return self.final_layer(x), attention_weights


def loss_function(real, pred):
    mask = real != PAD
    loss_ = F.cross_entropy(pred.transpose(1, 2), real, reduction="none")
    return (loss_ * mask).sum() / mask.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = MusicTransformer().eval()
    events = torch.tensor([[5, 17, 33, 8, 21, 40, 12, 9], [6, 30, 14, 2, 0, 0, 0, 0]])
    tar_inp, tar_real = events[:, :-1], events[:, 1:]
    with torch.no_grad():
        logits, weights = model(tar_inp)
        changed = tar_inp.clone()
        changed[0, -1] = 50
        leak = (model(changed)[0][0, :-1] - logits[0, :-1]).abs().max().item()
        alone, _ = model(tar_inp[1:, :4])
    print("earlier logits moved by changing the last event:", leak)
    print("first query's weight on later events:", [round(w, 4) for w in weights["decoder_layer1"][0, :, 0, 1:].sum(-1).tolist()])
    print("max |batched - alone| on the short piece:", (logits[1, :4] - alone[0]).abs().max().item())
    print("masked loss:", round(loss_function(tar_real, logits).item(), 4))
