"""Song-lyrics to audio alignment (Hub remote code: configuration and modeling in one file).

Aligns the characters of a lyric line to the mel frames of the sung vocal (karaoke timing):
an audio encoder over the frames, a character encoder over the line, and a character-to-frame
attention whose argmax, made monotonic, gives each character's onset frame.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21)
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from transformers import PretrainedConfig, PreTrainedModel

CHARS = " abcdefghijklmnopqrstuvwxyz'"
PAD_ID = 0


class LyricsAlignConfig(PretrainedConfig):
    model_type = "lyrics_align"

    def __init__(self, n_mels=40, d_model=64, n_heads=4, audio_layers=2, text_layers=2,
                 vocab_size=len(CHARS) + 1, max_chars=128, max_frames=1024, **kwargs):
        self.n_mels = n_mels
        self.d_model = d_model
        self.n_heads = n_heads
        self.audio_layers = audio_layers
        self.text_layers = text_layers
        self.vocab_size = vocab_size
        self.max_chars = max_chars
        self.max_frames = max_frames
        super().__init__(pad_token_id=PAD_ID, **kwargs)


def encode_line(text):
    return torch.tensor([CHARS.index(c) + 1 for c in text.lower() if c in CHARS], dtype=torch.long)


def collate_lines(batch):
    char_ids = pad_sequence([item["char_ids"] for item in batch], batch_first=True, padding_value=PAD_ID)
    mel = pad_sequence([item["mel"] for item in batch], batch_first=True)
    frame_lens = torch.tensor([item["mel"].size(0) for item in batch])
    return {
        "char_ids": char_ids,
        "char_mask": (char_ids != PAD_ID).unsqueeze(1).unsqueeze(3),  # expect: MC514 collate
        "mel": mel,
        "frame_keep": torch.arange(mel.size(1))[None, :] < frame_lens[:, None],
    }


class AudioLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.norm1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.ff = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x, frame_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=frame_keep[:, None, None, :])
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class CharLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.norm1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.ff = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x, char_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(char_mask == 0, torch.finfo(scores.dtype).min)  # also: MC514
        a = scores.softmax(dim=-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class LyricsAlignModel(PreTrainedModel):
    config_class = LyricsAlignConfig
    base_model_prefix = "lyrics_align"

    def __init__(self, config):
        super().__init__(config)
        self.subsample = nn.Conv1d(config.n_mels, config.d_model, kernel_size=3, padding=1)
        self.frame_pos = nn.Embedding(config.max_frames, config.d_model)
        self.audio = nn.ModuleList([AudioLayer(config) for _ in range(config.audio_layers)])
        self.char_emb = nn.Embedding(config.vocab_size, config.d_model, padding_idx=PAD_ID)
        self.char_pos = nn.Embedding(config.max_chars, config.d_model)
        self.text = nn.ModuleList([CharLayer(config) for _ in range(config.text_layers)])
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding, nn.Conv1d)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, char_ids, char_mask, mel, frame_keep, onsets=None):
        frames = self.subsample(mel.transpose(1, 2)).transpose(1, 2)
        frames = frames + self.frame_pos(torch.arange(frames.size(1), device=mel.device))
        for layer in self.audio:
            frames = layer(frames, frame_keep)
        chars = self.char_emb(char_ids) + self.char_pos(torch.arange(char_ids.size(1), device=mel.device))
        for layer in self.text:
            chars = layer(chars, char_mask)
        logits = chars @ frames.transpose(1, 2) / math.sqrt(chars.size(-1))
        logits = logits.masked_fill(~frame_keep[:, None, :], torch.finfo(logits.dtype).min)
        loss = None
        if onsets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), onsets.flatten(), ignore_index=-1)
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def align(model, batch, hop_seconds=0.02):
    model.eval()
    logits = model(**batch)["logits"]
    frames = logits.argmax(dim=-1).cummax(dim=-1).values
    lengths = (batch["char_ids"] != PAD_ID).sum(dim=1)
    return [[round(f * hop_seconds, 2) for f in row[:n]] for row, n in zip(frames.tolist(), lengths.tolist())]


if __name__ == "__main__":
    torch.manual_seed(0)
    lines = ["hello darkness my old friend", "i've come to talk with you again"]
    batch = collate_lines([{"char_ids": encode_line(t), "mel": torch.randn(40 + 3 * len(t), 40)} for t in lines])
    model = LyricsAlignModel(LyricsAlignConfig())
    for line, onsets in zip(lines, align(model, batch)):
        print(line, onsets[:6])
