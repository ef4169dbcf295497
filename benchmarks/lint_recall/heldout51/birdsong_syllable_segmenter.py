"""Bird song syllable segmentation (Hub remote code: configuration and modeling in one file).

Frame-level syllable labelling of canary and zebra finch song from spectrograms, in the manner
of TweetyNet but with a transformer instead of the LSTM: a convolutional front end, encoder
layers over the frames, per-frame syllable classes, then runs of frames merged into syllables.
`segment_song(..., fp16=True)` is the path used on field recorders.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19)
"""

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

MASK_VALUE = torch.finfo(torch.float32).min  # expect: MC517 constant


class BirdsongConfig(PretrainedConfig):
    model_type = "birdsong_segmenter"

    def __init__(self, n_freq_bins=64, hidden_size=64, num_heads=4, num_layers=3, num_syllables=12,
                 conv_channels=32, max_frames=2048, **kwargs):
        self.n_freq_bins = n_freq_bins
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.num_syllables = num_syllables
        self.conv_channels = conv_channels
        self.max_frames = max_frames
        super().__init__(**kwargs)


class SpectrogramFrontEnd(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.conv1 = nn.Conv2d(1, config.conv_channels, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(config.conv_channels, config.conv_channels, kernel_size=5, padding=2)
        self.pool = nn.MaxPool2d(kernel_size=(8, 1))
        self.proj = nn.Linear(config.conv_channels * (config.n_freq_bins // 64), config.hidden_size)

    def forward(self, spec):
        x = F.relu(self.conv1(spec.unsqueeze(1)))
        x = self.pool(F.relu(self.conv2(self.pool(x))))
        return self.proj(x.flatten(1, 2).transpose(1, 2))


class FrameAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.in_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, frame_keep):
        b, t, d = x.shape
        q, k, v = self.in_proj(x).reshape(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~frame_keep[:, None, None, :], MASK_VALUE)  # also: MC517
        weights = scores.softmax(dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class FrameLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.attn = FrameAttention(config)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 2 * config.hidden_size), nn.GELU(),
                                 nn.Linear(2 * config.hidden_size, config.hidden_size))

    def forward(self, x, frame_keep):
        x = x + self.attn(self.norm1(x), frame_keep)
        return x + self.mlp(self.norm2(x))


class BirdsongSegmenter(PreTrainedModel):
    config_class = BirdsongConfig
    base_model_prefix = "birdsong"

    def __init__(self, config):
        super().__init__(config)
        self.front_end = SpectrogramFrontEnd(config)
        self.positions = nn.Embedding(config.max_frames, config.hidden_size)
        self.layers = nn.ModuleList([FrameLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_syllables + 1)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, spectrograms, frame_keep, labels=None):
        x = self.front_end(spectrograms)
        x = x + self.positions(torch.arange(x.size(1), device=x.device))
        for layer in self.layers:
            x = layer(x, frame_keep)
        logits = self.classifier(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[frame_keep], labels[frame_keep])
        return {"loss": loss, "logits": logits}


def pad_spectrograms(specs):
    width = max(s.size(1) for s in specs)
    batch = torch.zeros(len(specs), specs[0].size(0), width)
    frame_keep = torch.zeros(len(specs), width, dtype=torch.bool)
    for i, s in enumerate(specs):
        batch[i, :, : s.size(1)] = s
        frame_keep[i, : s.size(1)] = True
    return batch, frame_keep


@torch.no_grad()
def segment_song(model, specs, fp16=False, frame_ms=2.7):
    model.eval()
    spectrograms, frame_keep = pad_spectrograms(specs)
    if fp16:
        model, spectrograms = model.half(), spectrograms.half()
    labels = model(spectrograms, frame_keep)["logits"].argmax(dim=-1)
    songs = []
    for row, n in zip(labels.tolist(), frame_keep.sum(dim=1).tolist()):
        syllables, start = [], 0
        for i in range(1, n + 1):
            if i == n or row[i] != row[start]:
                if row[start] != 0:
                    syllables.append((row[start], round(start * frame_ms), round(i * frame_ms)))
                start = i
        songs.append(syllables)
    return songs


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BirdsongSegmenter(BirdsongConfig())
    specs = [torch.rand(64, 300), torch.rand(64, 220)]
    print([len(s) for s in segment_song(model, specs, fp16="--fp16" in sys.argv)])
