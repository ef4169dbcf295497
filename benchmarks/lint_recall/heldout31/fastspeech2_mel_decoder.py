"""FastSpeech 2 acoustic model in the style of ming024/FastSpeech2 (model/fastspeech2.py,
model/modules.py, transformer/Layers.py, utils/tools.py): ``get_mask_from_lengths`` with
True at padding, FFT blocks over phonemes, a duration predictor and length regulator, and a
decoder picked from a registry by name (the original FFT stack or an SDPA one), with a
masked L1 mel loss.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), conventions.md §1 (direction cheat-sheet) and §3 item 27
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DECODERS = {}


def register_decoder(name):
    def wrap(cls):
        DECODERS[name] = cls
        return cls
    return wrap


@dataclass
class ModelConfig:
    n_vocab: int = 30
    d_model: int = 32
    n_head: int = 2
    n_layers: int = 2
    n_mels: int = 10
    decoder: str = "sdpa"


def get_mask_from_lengths(lengths, max_len=None):
    max_len = int(torch.max(lengths).item()) if max_len is None else max_len
    ids = torch.arange(0, max_len, device=lengths.device).unsqueeze(0).expand(lengths.shape[0], -1)
    return ids >= lengths.unsqueeze(1).expand(-1, max_len)


class FFTBlock(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.temperature = n_head, np.power(d_model // n_head, 0.5)
        self.w_qkv, self.fc = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.ffn = nn.Sequential(nn.Conv1d(d_model, 2 * d_model, 9, padding=4), nn.ReLU(), nn.Conv1d(2 * d_model, d_model, 1))
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask, slf_attn_mask):
        b, t, _ = x.shape
        q, k, v = self.w_qkv(x).view(b, t, 3, self.n_head, -1).permute(2, 3, 0, 1, 4).flatten(1, 2)
        attn = torch.bmm(q, k.transpose(1, 2)) / self.temperature
        attn = torch.softmax(attn.masked_fill(slf_attn_mask.repeat(self.n_head, 1, 1), -np.inf), dim=2)
        out = torch.bmm(attn, v).view(self.n_head, b, t, -1).permute(1, 2, 0, 3).reshape(b, t, -1)
        x = self.ln1(x + self.fc(out)).masked_fill(mask.unsqueeze(-1), 0)
        x = self.ln2(x + self.ffn(x.transpose(1, 2)).transpose(1, 2))
        return x.masked_fill(mask.unsqueeze(-1), 0)


@register_decoder("fft")
class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer_stack = nn.ModuleList(FFTBlock(cfg.d_model, cfg.n_head) for _ in range(cfg.n_layers))

    def forward(self, x, mask):
        slf_attn_mask = mask.unsqueeze(1).expand(-1, mask.shape[1], -1)
        for layer in self.layer_stack:
            x = layer(x, mask, slf_attn_mask)
        return x, mask


@register_decoder("sdpa")
class SDPADecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleDict({"qkv": nn.Linear(cfg.d_model, 3 * cfg.d_model),
                                                   "out": nn.Linear(cfg.d_model, cfg.d_model),
                                                   "ff": nn.Linear(cfg.d_model, cfg.d_model),
                                                   "ln1": nn.LayerNorm(cfg.d_model), "ln2": nn.LayerNorm(cfg.d_model)})
                                    for _ in range(cfg.n_layers))
        self.n_head = cfg.n_head

    def forward(self, x, mel_masks):
        b, t, d = x.shape
        mel_keep = (~mel_masks).float()
        bias = (1.0 - mel_keep[:, None, None, :]) * float("-inf")  # expect: MC522 fastspeech
        for layer in self.layers:
            q, k, v = layer["qkv"](x).view(b, t, 3, self.n_head, -1).permute(2, 0, 3, 1, 4)
            h = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(b, t, d)
            x = layer["ln1"](x + layer["out"](h))
            x = layer["ln2"](x + F.relu(layer["ff"](x))) * mel_keep.unsqueeze(-1)
        return x, mel_masks


class FastSpeech2(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.src_word_emb = nn.Embedding(cfg.n_vocab, cfg.d_model, padding_idx=0)
        self.position_enc = nn.Parameter(torch.randn(200, cfg.d_model) * 0.1, requires_grad=False)
        self.encoder = Decoder(cfg)
        self.duration_predictor = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.ReLU(), nn.Linear(cfg.d_model, 1))
        self.decoder = DECODERS[cfg.decoder](cfg)
        self.mel_linear = nn.Linear(cfg.d_model, cfg.n_mels)

    def forward(self, texts, src_lens, d_targets):
        src_masks = get_mask_from_lengths(src_lens, texts.shape[1])
        x = self.src_word_emb(texts) + self.position_enc[: texts.shape[1]]
        x, _ = self.encoder(x, src_masks)
        log_d_pred = self.duration_predictor(x).squeeze(-1).masked_fill(src_masks, 0.0)
        expanded = [h.repeat_interleave(d, dim=0) for h, d in zip(x, d_targets)]
        mel_lens = torch.tensor([e.shape[0] for e in expanded])
        x = nn.utils.rnn.pad_sequence(expanded, batch_first=True) + self.position_enc[: int(mel_lens.max())]
        mel_masks = get_mask_from_lengths(mel_lens)
        x, mel_masks = self.decoder(x, mel_masks)
        return self.mel_linear(x), log_d_pred, src_masks, mel_masks


if __name__ == "__main__":
    torch.manual_seed(0)
    model = FastSpeech2(ModelConfig()).eval()
    texts, src_lens = torch.tensor([[5, 9, 2, 14, 7], [3, 11, 8, 0, 0]]), torch.tensor([5, 3])
    durations = torch.tensor([[2, 1, 3, 2, 1], [1, 2, 2, 0, 0]])
    with torch.no_grad():
        mel, log_d, src_masks, mel_masks = model(texts, src_lens, durations)
        mel_keep = (~mel_masks).float().unsqueeze(-1)
        target = torch.randn_like(mel)
        mel_loss = (F.l1_loss(mel, target, reduction="none") * mel_keep).sum() / (mel_keep.sum() * mel.shape[-1])
        print("mel NaN:", torch.isnan(mel).any().item(), "masked L1:", mel_loss.item())
        alone = model(texts[1:, :3], src_lens[1:], durations[1:, :3])[0]
        print("padded item batched vs alone:", (mel[1, :5] - alone[0]).abs().max().item())
