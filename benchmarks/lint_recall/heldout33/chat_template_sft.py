"""Chat fine-tuning with a ChatML template and a loss only on the assistant turns.

Mirrors what ``tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True)`` and
TRL's assistant-only loss do: ``ChatMLTemplate.render`` writes
``<|im_start|>role\\n...<|im_end|>\\n`` blocks and marks the tokens produced inside assistant turns
(content and closing ``<|im_end|>``), ``DataCollatorForChatML`` right-pads and turns everything
outside those spans into -100 labels, and the model builds an extended attention mask the way
BERT-era ``get_extended_attention_mask`` does before its eager attention layers.

Source: conventions.md §1 (HF 2-D attention_mask row, HF 4.x AttentionMaskConverter row) and §2.9, seed self_attention_mask_guide.txt §7 Q5
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ChatConfig:
    vocab_size: int = 260
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_position_embeddings: int = 160


class ByteTokenizer:
    special_tokens = {"<|pad|>": 256, "<|im_start|>": 257, "<|im_end|>": 258, "<|endoftext|>": 259}

    @property
    def pad_token_id(self) -> int:
        return self.special_tokens["<|pad|>"]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class ChatMLTemplate:
    def __init__(self, tokenizer: ByteTokenizer):
        self.tok = tokenizer

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
        start, end = self.tok.special_tokens["<|im_start|>"], self.tok.special_tokens["<|im_end|>"]
        ids, assistant_masks = [], []
        for message in messages:
            header = [start] + self.tok.encode(message["role"] + "\n")
            body = self.tok.encode(message["content"]) + [end]
            generated = 1 if message["role"] == "assistant" else 0
            ids += header + body + self.tok.encode("\n")
            assistant_masks += [0] * len(header) + [generated] * len(body) + [0]
        if add_generation_prompt:
            prompt = [start] + self.tok.encode("assistant\n")
            ids += prompt
            assistant_masks += [0] * len(prompt)
        return ids, assistant_masks


class DataCollatorForChatML:
    def __init__(self, template: ChatMLTemplate, max_length: int = 160):
        self.template, self.max_length = template, max_length

    def __call__(self, conversations: list[list[dict]]) -> dict:
        rendered = [self.template.render(c) for c in conversations]
        width = min(self.max_length, max(len(ids) for ids, _ in rendered))
        pad = self.template.tok.pad_token_id
        input_ids = torch.full((len(rendered), width), pad)
        assistant_masks = torch.zeros(len(rendered), width, dtype=torch.bool)
        for i, (ids, am) in enumerate(rendered):
            n = min(width, len(ids))
            input_ids[i, :n] = torch.tensor(ids[:n])
            assistant_masks[i, :n] = torch.tensor(am[:n], dtype=torch.bool)
        attention_mask = input_ids != pad
        labels = input_ids.masked_fill(~assistant_masks, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def get_extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    extended_attention_mask = attention_mask[:, None, None, :]
    return (1.0 - extended_attention_mask) * torch.finfo(dtype).min  # expect: MC512 chattemplate


class SelfAttention(nn.Module):
    def __init__(self, cfg: ChatConfig):
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        future = torch.ones(cfg.max_position_embeddings, cfg.max_position_embeddings, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def forward(self, hidden_states: torch.Tensor, extended_attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = hidden_states.shape
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in self.qkv(hidden_states).split(C, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + extended_attention_mask
        scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))


class Layer(nn.Module):
    def __init__(self, cfg: ChatConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        self.attn = SelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, x, extended_attention_mask):
        x = x + self.attn(self.ln1(x), extended_attention_mask)
        return x + self.mlp(self.ln2(x))


class ChatLM(nn.Module):
    def __init__(self, cfg: ChatConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, labels=None):
        T = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(torch.arange(T, device=input_ids.device))
        extended = get_extended_attention_mask(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, extended)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}

    @torch.no_grad()
    def chat(self, template: ChatMLTemplate, messages: list[dict], max_new_tokens: int = 12) -> str:
        ids, _ = template.render(messages, add_generation_prompt=True)
        end = template.tok.special_tokens["<|im_end|>"]
        out = []
        for _ in range(max_new_tokens):
            x = torch.tensor([ids + out])
            nxt = int(self(x, torch.ones_like(x, dtype=torch.bool))["logits"][0, -1].argmax())
            if nxt == end:
                break
            out.append(nxt)
        return template.tok.decode(out)


def make_conversation(rng: torch.Generator) -> list[dict]:
    words = ["apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "glass"]
    picks = [words[int(i)] for i in torch.randint(0, len(words), (int(torch.randint(1, 4, (1,), generator=rng)),), generator=rng)]
    conv = [{"role": "system", "content": "echo upper"}]
    for w in picks:
        conv += [{"role": "user", "content": w}, {"role": "assistant", "content": w.upper()}]
    return conv


def main() -> None:
    torch.manual_seed(0)
    rng = torch.Generator().manual_seed(0)
    tok = ByteTokenizer()
    template = ChatMLTemplate(tok)
    collator = DataCollatorForChatML(template)
    model = ChatLM(ChatConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    try:
        for step in range(80):
            batch = collator([make_conversation(rng) for _ in range(8)])
            loss = model(**batch)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0 or step == 79:
                trained = int((batch["labels"] != -100).sum())
                print(f"step {step:3d} loss {loss.item():.4f} ({trained} assistant tokens of {int(batch['attention_mask'].sum())})")
        model.eval()
        reply = model.chat(template, [{"role": "system", "content": "echo upper"}, {"role": "user", "content": "tiger"}])
        print(f"reply to 'tiger': {reply!r}")
        short, long = make_conversation(rng)[:3], make_conversation(rng) + make_conversation(rng)[1:]
        batch = collator([short, long])
        alone = collator([short])
        with torch.no_grad():
            n = alone["input_ids"].shape[1]
            diff = (model(**batch)["logits"][0, :n] - model(**alone)["logits"][0]).abs().max()
        print(f"short conversation batched vs alone: {diff.item():.3g}")
    except RuntimeError as err:
        print(f"RuntimeError: {err}")


if __name__ == "__main__":
    main()
