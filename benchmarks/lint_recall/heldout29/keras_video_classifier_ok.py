"""Video classification with a transformer over frame features, ported from the Keras example.

The Keras code extracts per-frame CNN features, keeps up to `MAX_SEQ_LENGTH` frames with a
`frame_masks` array (1 for a real frame, as `prepare_all_videos` fills it), adds a learned
`PositionalEmbedding` and runs a `TransformerEncoder` whose attention takes
`attention_mask=mask[:, tf.newaxis, :]`, then pools with `GlobalMaxPooling1D`. The port keeps the
names, turns the keep mask into the additive bias that `keras.layers.Softmax` adds, and uses
`F.scaled_dot_product_attention` with heads on axis 1.

Source: conventions.md §1 (Keras 3 row, direction cheat-sheet) and §2.3, tools.md §0 P4,
seed self_attention_mask_guide.txt §3 (generate_causal_mask).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_SEQ_LENGTH = 10
NUM_FEATURES = 12


def prepare_all_videos(videos):
    frame_features = torch.zeros(len(videos), MAX_SEQ_LENGTH, NUM_FEATURES)
    frame_masks = torch.zeros(len(videos), MAX_SEQ_LENGTH)
    for i, frames in enumerate(videos):
        length = min(MAX_SEQ_LENGTH, frames.shape[0])
        frame_features[i, :length] = frames[:length]
        frame_masks[i, :length] = 1
    return frame_features, frame_masks


class PositionalEmbedding(nn.Module):
    def __init__(self, sequence_length, output_dim):
        super().__init__()
        self.position_embeddings = nn.Embedding(sequence_length, output_dim)

    def forward(self, inputs):
        positions = torch.arange(inputs.shape[1])
        return inputs + self.position_embeddings(positions)


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim, dense_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)
        self.dense_proj = nn.Sequential(nn.Linear(embed_dim, dense_dim), nn.GELU(), nn.Linear(dense_dim, embed_dim))
        self.layernorm_1 = nn.LayerNorm(embed_dim)
        self.layernorm_2 = nn.LayerNorm(embed_dim)

    def forward(self, inputs, mask=None):
        b, t, d = inputs.shape
        q, k, v = self.qkv(inputs).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        bias = None
        if mask is not None:
            bias = torch.zeros_like(mask[:, None, None, :]).masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        attention_output = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        attention_output = self.out(attention_output.transpose(1, 2).reshape(b, t, d))
        proj_input = self.layernorm_1(inputs + attention_output)
        return self.layernorm_2(proj_input + self.dense_proj(proj_input))


class VideoClassifier(nn.Module):
    def __init__(self, num_classes=5, dense_dim=4, num_heads=1):
        super().__init__()
        self.positional = PositionalEmbedding(MAX_SEQ_LENGTH, NUM_FEATURES)
        self.encoder = TransformerEncoder(NUM_FEATURES, dense_dim, num_heads)
        self.dropout = nn.Dropout(0.5)
        self.classifier = nn.Linear(NUM_FEATURES, num_classes)

    def forward(self, frame_features, frame_masks):
        x = self.positional(frame_features)
        x = self.encoder(x, mask=frame_masks)
        keep = frame_masks.bool()[..., None]
        x = x.masked_fill(~keep, torch.finfo(x.dtype).min).amax(dim=1)
        return self.classifier(self.dropout(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    videos = [torch.randn(n, NUM_FEATURES) for n in (14, 6, 9)]
    features, masks = prepare_all_videos(videos)
    model = VideoClassifier().eval()
    with torch.no_grad():
        logits = model(features, masks)
        alone = torch.cat([model(*prepare_all_videos([v])) for v in videos])
        trimmed = torch.cat([model(f[None, : int(m.sum())], m[None, : int(m.sum())]) for f, m in zip(features, masks)])
    print("logits NaN:", bool(torch.isnan(logits).any()))
    print("predictions:", logits.argmax(-1).tolist())
    print("max |batched - alone|:", (logits - alone).abs().max().item())
    print("max |padded - trimmed to the real frames|:", (logits - trimmed).abs().max().item())
