"""Held-out 8: a small language model built on torch's nn.TransformerDecoder and fed by a Hugging
Face tokenizer (a collate function, a model class, a training step).

Source: openillumi.com/?p=87900 ("Resolving Hugging Face Attention Mask Mismatches with PyTorch
Transformer": the tokenizer's attention_mask, 1 = real token, first passed as `tgt_mask`, then as
the padding mask; PyTorch's `tgt_key_padding_mask` wants True = padding, so the mask must be
inverted, `(hf_attention_mask == 0).bool()`; passed as is, every real token is hidden and only the
padding is attended).
Surroundings: the mask taken from the tokenizer's output dict in a collate function, passed by
keyword through the model's forward, `.bool()` at the call.
"""

import math

import torch
import torch.nn as nn
from transformers import AutoTokenizer


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 2048):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class TinyLM(nn.Module):
    def __init__(self, vocab_size: int, d_model: int = 256, nhead: int = 4, num_layers: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = PositionalEncoding(d_model)
        layer = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=4 * d_model, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.pos(self.embed(input_ids))
        seq_len = input_ids.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(seq_len, device=input_ids.device)
        h = self.decoder(
            tgt=x,
            memory=x,
            tgt_mask=causal,
            tgt_is_causal=True,
            tgt_key_padding_mask=attention_mask.bool(),  # expect: MC502|MC511 keyword
        )
        return self.lm_head(h)


def make_collate(tokenizer, max_length: int = 1024):
    def collate(texts: list[str]) -> dict:
        enc = tokenizer(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    return collate


def train_step(model: TinyLM, batch: dict, optimizer) -> float:
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids[:, :-1], attention_mask=attention_mask[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), input_ids[:, 1:].reshape(-1),
                                       ignore_index=0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


if __name__ == "__main__":
    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    tokenizer.pad_token = tokenizer.eos_token
    model = TinyLM(len(tokenizer))
    batch = make_collate(tokenizer, 32)(["hello world", "a longer sentence about masks"])
    print(train_step(model, batch, torch.optim.AdamW(model.parameters(), lr=3e-4)))
