"""Fusion-in-Decoder reader: every passage is encoded with the question, the decoder reads them all.

Laid out after facebookresearch/FiD: ``encode_passages`` over ``question: ... context: ...``
strings padded to ``text_maxlength``, an ``EncoderWrapper`` that folds ``(B, n_passages, L)``
into ``(B * n_passages, L)`` and unfolds the outputs into one ``(B, n_passages * L)`` memory, a
small T5-like encoder / decoder on ``F.scaled_dot_product_attention``, ``FiDT5.generate``
(greedy) and exact match.

Source: pytorch/pytorch#103963 and huggingface/transformers#32195 (conventions.md §3 items 6
and 25), conventions.md §1 (SDPA row).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

RELATIONS = ["capital", "port", "airport", "museum", "university"]


@dataclass
class FiDConfig:
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    n_passages: int = 4
    text_maxlength: int = 24
    answer_maxlength: int = 3


class WordTokenizer:
    pad_token_id = 0

    def __init__(self, words: list[str]):
        self.vocab = {w: i for i, w in enumerate(["<pad>", "</s>", *sorted(set(words))])}
        self.inv = {i: w for w, i in self.vocab.items()}

    def batch_encode_plus(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        ids = [[self.vocab[w] for w in t.split()][: max_length - 1] + [1] for t in texts]
        input_ids = torch.tensor([x + [self.pad_token_id] * (max_length - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.inv[i] for i in ids if i > 1)


def encode_passages(batch_text_passages: list[list[str]], tokenizer: WordTokenizer, max_length):
    passage_ids, passage_masks = [], []
    for text_passages in batch_text_passages:
        p = tokenizer.batch_encode_plus(text_passages, max_length=max_length)
        passage_ids.append(p["input_ids"][None])
        passage_masks.append(p["attention_mask"][None])
    return torch.cat(passage_ids, dim=0), torch.cat(passage_masks, dim=0).bool()


class Attention(nn.Module):
    def __init__(self, cfg: FiDConfig):
        super().__init__()
        self.n_heads = cfg.num_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, hidden_states, key_value_states=None, mask=None):
        B, T, D = hidden_states.shape
        kv = hidden_states if key_value_states is None else key_value_states

        def shape(x: torch.Tensor) -> torch.Tensor:
            return x.view(B, -1, self.n_heads, D // self.n_heads).transpose(1, 2)

        q, k, v = shape(self.q(hidden_states)), shape(self.k(kv)), shape(self.v(kv))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(B, T, D))


class T5Block(nn.Module):
    def __init__(self, cfg: FiDConfig, is_decoder: bool):
        super().__init__()
        self.is_decoder = is_decoder
        self.self_attn, self.norm1 = Attention(cfg), nn.LayerNorm(cfg.d_model)
        self.cross_attn = Attention(cfg) if is_decoder else None
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.norm3 = nn.LayerNorm(cfg.d_model)
        self.wi, self.wo = (
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(self, hidden_states, attention_mask=None, encoder_states=None, encoder_mask=None):
        x = self.norm1(hidden_states)
        hidden_states = hidden_states + self.self_attn(x, mask=attention_mask)
        if self.cross_attn is not None:
            x = self.norm2(hidden_states)
            hidden_states = hidden_states + self.cross_attn(x, encoder_states, mask=encoder_mask)
        return hidden_states + self.wo(F.relu(self.wi(self.norm3(hidden_states))))


class T5Stack(nn.Module):
    def __init__(self, cfg: FiDConfig, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.embed_positions = nn.Embedding(64, cfg.d_model)
        self.block = nn.ModuleList(T5Block(cfg, is_decoder) for _ in range(cfg.num_layers))
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(
        self, input_ids, attention_mask=None, encoder_states=None, encoder_attention_mask=None
    ):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions(positions)
        if self.is_decoder:
            T = input_ids.shape[1]
            extended_attention_mask = torch.ones(
                T, T, dtype=torch.bool, device=input_ids.device
            ).tril()
        else:
            extended_attention_mask = attention_mask[:, None, None, :]
        encoder_extended_attention_mask = None
        if encoder_attention_mask is not None:
            encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :].to(hidden_states.dtype)  # expect: MC508 fid
        for layer_module in self.block:
            hidden_states = layer_module(
                hidden_states,
                extended_attention_mask,
                encoder_states,
                encoder_extended_attention_mask,
            )
        return self.final_layer_norm(hidden_states)


class EncoderWrapper(nn.Module):
    def __init__(self, encoder: T5Stack, n_passages: int):
        super().__init__()
        self.encoder, self.n_passages = encoder, n_passages

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        bsz, total_length = input_ids.shape
        passage_length = total_length // self.n_passages
        input_ids = input_ids.view(bsz * self.n_passages, passage_length)
        attention_mask = attention_mask.view(bsz * self.n_passages, passage_length)
        outputs = self.encoder(input_ids, attention_mask)
        return outputs.view(bsz, self.n_passages * passage_length, -1)


class FiDT5(nn.Module):
    def __init__(self, cfg: FiDConfig, vocab_size: int):
        super().__init__()
        self.shared = nn.Embedding(vocab_size, cfg.d_model)
        self.encoder = EncoderWrapper(T5Stack(cfg, self.shared, is_decoder=False), cfg.n_passages)
        self.decoder = T5Stack(cfg, self.shared, is_decoder=True)
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels=None):
        input_ids = input_ids.view(input_ids.size(0), -1)
        attention_mask = attention_mask.view(attention_mask.size(0), -1)
        encoder_outputs = self.encoder(input_ids, attention_mask)
        hidden = self.decoder(
            decoder_input_ids, encoder_states=encoder_outputs, encoder_attention_mask=attention_mask
        )
        logits = self.lm_head(hidden)
        if labels is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_length: int) -> torch.Tensor:
        out = torch.zeros(input_ids.shape[0], 1, dtype=torch.long)
        for _ in range(max_length):
            logits = self(input_ids, attention_mask, out)
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out[:, 1:]


def make_example(rng: random.Random, cfg: FiDConfig):
    country, relations = rng.randrange(20), rng.sample(RELATIONS, cfg.n_passages)
    cities = rng.sample(range(30), cfg.n_passages)
    filler = ["it", "is", "a", "large", "old", "city", "near", "the", "sea"]
    passages = [f"the {r} of country{country} is city{c}" for r, c in zip(relations, cities)]
    passages = [p + " " + " ".join(rng.choices(filler, k=rng.randint(0, 8))) for p in passages]
    gold = rng.randrange(cfg.n_passages)
    question = f"question: what is the {relations[gold]} of country{country}"
    return [f"{question} context: {p}" for p in passages], f"city{cities[gold]}"


def collate(examples, tokenizer: WordTokenizer, cfg: FiDConfig):
    passage_ids, passage_masks = encode_passages(
        [p for p, _ in examples], tokenizer, cfg.text_maxlength
    )
    answers = tokenizer.batch_encode_plus([a for _, a in examples], max_length=cfg.answer_maxlength)
    labels = answers["input_ids"]
    decoder_input_ids = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], dim=1)
    return passage_ids, passage_masks, decoder_input_ids, labels.masked_fill(labels == 0, -100)


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), FiDConfig()
    words = [f"country{i}" for i in range(20)] + [f"city{i}" for i in range(30)]
    words += RELATIONS + "question: context: what is the of it a large old city near sea".split()
    tokenizer = WordTokenizer(words)
    model = FiDT5(cfg, len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        loss = model(*collate([make_example(rng, cfg) for _ in range(32)], tokenizer, cfg))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test = [make_example(rng, cfg) for _ in range(200)]
    passage_ids, passage_masks, _, _ = collate(test, tokenizer, cfg)
    pred = model.generate(passage_ids, passage_masks, max_length=1)
    em = sum(tokenizer.decode(p.tolist()) == a for p, (_, a) in zip(pred, test)) / len(test)
    print(f"exact match {em:.3f}")
    wide = FiDConfig(text_maxlength=cfg.text_maxlength + 8)
    with torch.no_grad():
        logits = model(*collate(test[:8], tokenizer, cfg)[:3])
        padded = model(*collate(test[:8], tokenizer, wide)[:3])
    gap = (logits - padded).abs().max().item()
    print(
        f"answer logits, {cfg.text_maxlength} vs {wide.text_maxlength} tokens a passage: {gap:.2e}"
    )


if __name__ == "__main__":
    main()
