"""Morse (CW) decoder for amateur radio (Hub remote code: configuration and modeling in one file).

The keying detector of a receiver turns the audio of a CW signal into mark and space durations
quantised to dot units (`M1 M3 S1 S3 S7`, with jitter as `M2` / `S2` / `S5`); this model reads
those tokens and writes the text with a CTC head, so hand-sent code with uneven timing still
decodes. The tokenizer pads a batch of transmissions to the longest.

Source: seed self_attention_mask_guide.txt; conventions.md §1
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

TIMING_TOKENS = ["<pad>", "<unk>"] + [f"M{i}" for i in range(1, 7)] + [f"S{i}" for i in range(1, 10)]
ALPHABET = "_ ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/?."


class CWConfig(PretrainedConfig):
    model_type = "cw_decoder"

    def __init__(self, vocab_size=len(TIMING_TOKENS), num_chars=len(ALPHABET), hidden_size=64,
                 num_heads=4, num_layers=3, max_tokens=512, pad_token_id=0, **kwargs):
        self.vocab_size = vocab_size
        self.num_chars = num_chars
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.max_tokens = max_tokens
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class TimingTokenizer:
    def __init__(self):
        self.vocab = {tok: i for i, tok in enumerate(TIMING_TOKENS)}

    def __call__(self, streams):
        rows = [[self.vocab.get(t, 1) for t in s.split()] for s in streams]
        width = max(map(len, rows))
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class CWSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, attn_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class CWLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.attn = CWSelfAttention(config)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size=5, padding=2,
                              groups=config.hidden_size)
        self.ff = nn.Sequential(nn.Linear(config.hidden_size, 2 * config.hidden_size), nn.SiLU(),
                                nn.Linear(2 * config.hidden_size, config.hidden_size))

    def forward(self, x, attn_mask, token_keep):
        x = x + self.attn(self.norm1(x), attn_mask)
        h = self.norm2(x).masked_fill(~token_keep[..., None], 0.0)
        x = x + self.conv(h.transpose(1, 2)).transpose(1, 2)
        return x + self.ff(x)


class CWEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.pos = nn.Embedding(config.max_tokens, config.hidden_size)
        self.layers = nn.ModuleList([CWLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        token_keep = attention_mask.bool()
        key_mask = attention_mask.bool()
        for layer in self.layers:
            x = layer(x, key_mask[:, None, None, :], token_keep)
        return self.norm(x)


class CWDecoderModel(PreTrainedModel):
    config_class = CWConfig
    base_model_prefix = "cw"

    def __init__(self, config):
        super().__init__(config)
        self.encoder = CWEncoder(config)
        self.ctc_head = nn.Linear(config.hidden_size, config.num_chars)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, attention_mask, targets=None, target_lengths=None):
        log_probs = self.ctc_head(self.encoder(input_ids, attention_mask)).log_softmax(dim=-1)
        loss = None
        if targets is not None:
            loss = F.ctc_loss(log_probs.transpose(0, 1), targets, attention_mask.sum(dim=1), target_lengths,
                              blank=0, zero_infinity=True)
        return {"loss": loss, "log_probs": log_probs}


@torch.no_grad()
def decode_streams(model, tokenizer, streams):
    model.eval()
    enc = tokenizer(streams)
    best = model(**enc)["log_probs"].argmax(dim=-1)
    texts = []
    for row, n in zip(best.tolist(), enc["attention_mask"].sum(dim=1).tolist()):
        chars, prev = [], 0
        for c in row[:n]:
            if c != prev and c != 0:
                chars.append(ALPHABET[c])
            prev = c
        texts.append("".join(chars))
    return texts


if __name__ == "__main__":
    torch.manual_seed(0)
    streams = ["M3 S1 M1 S1 M3 S1 M1 S3 M3 S1 M3 S1 M1 S1 M3 S7 M1 S1 M1 S1 M1", "M1 S1 M1 S1 M1 S3 M3"]
    print(decode_streams(CWDecoderModel(CWConfig()), TimingTokenizer(), streams))
