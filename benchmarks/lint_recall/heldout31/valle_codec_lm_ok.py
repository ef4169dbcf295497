"""VALL-E-style autoregressive codec language model, written the way lifeiteng/vall-e writes its
AR stage (valle/models/valle.py, valle/modules/embedding.py): phoneme and first-codebook
audio-token embeddings with their own scaled sinusoidal positions, ``make_pad_mask``,
``pad_y_eos``, an ``xy_attn_mask`` assembled from the text block and the audio block with
``F.pad``, padding masks concatenated along the keys, an ``nn.TransformerEncoder`` decoder, and
greedy continuation of an acoustic prompt.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §1 (direction cheat-sheet) and §2.7
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

NUM_TEXT_TOKENS = 30
NUM_AUDIO_TOKENS = 32


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    max_len = max(max_len, int(lengths.max()))
    seq_range = torch.arange(0, max_len, device=lengths.device)
    return seq_range.unsqueeze(0) >= lengths.unsqueeze(1)


class SinePositionalEmbedding(nn.Module):
    def __init__(self, dim_model: int, scale: bool = True):
        super().__init__()
        self.dim_model = dim_model
        self.x_scale = math.sqrt(dim_model) if scale else 1.0
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = torch.arange(x.size(1), dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.dim_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.dim_model))
        pe = torch.zeros(x.size(1), self.dim_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        return x * self.x_scale + self.alpha * pe.unsqueeze(0)


class VALLE_AR(nn.Module):
    def __init__(self, d_model: int = 32, nhead: int = 4, num_layers: int = 2):
        super().__init__()
        self.ar_text_embedding = nn.Embedding(NUM_TEXT_TOKENS, d_model)
        self.ar_audio_embedding = nn.Embedding(NUM_AUDIO_TOKENS + 1, d_model)
        self.ar_text_position = SinePositionalEmbedding(d_model)
        self.ar_audio_position = SinePositionalEmbedding(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.ar_decoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.ar_predict_layer = nn.Linear(d_model, NUM_AUDIO_TOKENS + 1, bias=False)

    @staticmethod
    def pad_y_eos(y, y_mask_int, eos_id):
        targets = F.pad(y, (0, 1), value=0) + eos_id * F.pad(y_mask_int, (0, 1), value=1)
        return targets[:, :-1], targets[:, 1:]

    @staticmethod
    def build_xy_attn_mask(x_len: int, y_len: int) -> torch.Tensor:
        x_attn_mask = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool), (0, y_len), value=True)
        y_attn_mask = F.pad(torch.triu(torch.ones(y_len, y_len, dtype=torch.bool), diagonal=1), (x_len, 0), value=False)
        return torch.concat([x_attn_mask, y_attn_mask], dim=0)

    def logits(self, x, x_lens, y, y_lens):
        x_mask = make_pad_mask(x_lens, x.shape[1])
        y_mask = make_pad_mask(y_lens, y.shape[1])
        x = self.ar_text_position(self.ar_text_embedding(x))
        y_pos = self.ar_audio_position(self.ar_audio_embedding(y))
        xy_attn_mask = self.build_xy_attn_mask(x.shape[1], y.shape[1])
        xy_padding_mask = torch.concat([x_mask, y_mask], dim=1)
        xy_dec = self.ar_decoder(torch.concat([x, y_pos], dim=1), mask=xy_attn_mask, src_key_padding_mask=xy_padding_mask)
        return self.ar_predict_layer(xy_dec[:, x.shape[1]:])

    def forward(self, x, x_lens, y, y_lens):
        y_mask = make_pad_mask(y_lens, y.shape[1])
        y, targets = self.pad_y_eos(y, y_mask.type(torch.int64), eos_id=NUM_AUDIO_TOKENS)
        logits = self.logits(x, x_lens, y, y_lens)
        targets = targets.masked_fill(y_mask, -100)
        return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100), logits

    @torch.no_grad()
    def inference(self, x, x_lens, prompts, steps=4):
        y = prompts
        for _ in range(steps):
            logits = self.logits(x, x_lens, y, torch.full_like(x_lens, y.shape[1]))
            samples = logits[:, -1].argmax(dim=-1, keepdim=True)
            if (samples == NUM_AUDIO_TOKENS).all():
                break
            y = torch.concat([y, samples], dim=1)
        return y[:, prompts.shape[1]:]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = VALLE_AR().eval()
    x, x_lens = torch.tensor([[3, 9, 14, 2, 7, 11], [5, 18, 4, 22, 0, 0]]), torch.tensor([6, 4])
    y, y_lens = torch.randint(0, NUM_AUDIO_TOKENS, (2, 8)), torch.tensor([8, 5])
    y = y.masked_fill(make_pad_mask(y_lens, y.shape[1]), 0)
    with torch.no_grad():
        loss, logits = model(x, x_lens, y, y_lens)
        print("loss:", round(loss.item(), 4))
        changed = y.clone()
        changed[0, 7] = (changed[0, 7] + 1) % NUM_AUDIO_TOKENS
        print("future leak:", (model(x, x_lens, changed, y_lens)[1] - logits)[0, :7].abs().max().item())
        alone = model(x[1:, :4], x_lens[1:], y[1:, :5], y_lens[1:])[1]
        print("padded item batched vs alone:", (logits[1, :5] - alone[0]).abs().max().item())
        print("continuation:", model.inference(x[:1], x_lens[:1], y[:1, :3]).tolist())
