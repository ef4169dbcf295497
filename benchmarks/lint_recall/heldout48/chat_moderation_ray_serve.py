"""Toxicity moderation of in-game chat, served with Ray Serve and dynamic request batching.

Game servers POST single chat lines; `@serve.batch` groups up to 32 of them, a small transformer
on `nn.MultiheadAttention` scores four labels (insult, threat, hate, spam) and lines above the
threshold are hidden. `serve run chat_moderation_ray_serve:app` or `python` this file.

Source: conventions.md section 2.4, section 1 (HF attention_mask row, direction cheat-sheet).
"""

import random
import re
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F
from ray import serve
from starlette.requests import Request

LABELS = ["insult", "threat", "hate", "spam"]
LEXICON = {
    "insult": ["noob", "trash", "idiot", "loser", "clown"],
    "threat": ["kill", "find", "hurt", "ddos", "swat"],
    "hate": ["slur1", "slur2", "vermin", "subhuman"],
    "spam": ["cheap", "gold", "visit", "www", "coins"],
}
NEUTRAL = "gg wp nice shot push mid need heal anyone rez go go go thanks team lag again rotate top defend base".split()


class ChatTokenizer:
    def __init__(self, max_length=32):
        words = sorted(set(NEUTRAL) | {w for ws in LEXICON.values() for w in ws})
        self.vocab = {w: i + 2 for i, w in enumerate(words)}
        self.max_length = max_length

    def __call__(self, texts: List[str]) -> Dict[str, torch.Tensor]:
        ids = [[self.vocab.get(w, 1) for w in re.findall(r"[a-z0-9]+", t.lower())][: self.max_length] or [1] for t in texts]
        width = max(len(x) for x in ids)
        return {
            "input_ids": torch.tensor([x + [0] * (width - len(x)) for x in ids]),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
        }


class ModerationLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.1, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, key_padding_mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class ToxicityModel(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(32, d_model)
        self.layers = nn.ModuleList([ModerationLayer(d_model, n_heads) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, len(LABELS))

    def forward(self, input_ids, key_padding_mask):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        keep = (~key_padding_mask).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1))


def synth_chat(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = rng.sample(NEUTRAL, rng.randint(1, 6))
        target = torch.zeros(len(LABELS))
        for j, label in enumerate(LABELS):
            if rng.random() < 0.15:
                words.insert(rng.randrange(len(words) + 1), rng.choice(LEXICON[label]))
                target[j] = 1.0
        rows.append((" ".join(words), target))
    return rows


def train_model(tokenizer, steps=500, batch_size=32, seed=0):
    torch.manual_seed(seed)
    rows = synth_chat(steps * batch_size // 4, seed)
    model = ToxicityModel(len(tokenizer.vocab) + 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        batch = random.Random(step).sample(rows, batch_size)
        enc = tokenizer([t for t, _ in batch])
        logits = model(enc["input_ids"], enc["attention_mask"] == 0)
        loss = F.binary_cross_entropy_with_logits(logits, torch.stack([y for _, y in batch]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 1})
class ChatModerator:
    def __init__(self, threshold: float = 0.5):
        self.tokenizer = ChatTokenizer()
        self.model = train_model(self.tokenizer)
        self.threshold = threshold

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def moderate(self, messages: List[str]) -> List[Dict]:
        enc = self.tokenizer(messages)
        with torch.inference_mode():
            probs = torch.sigmoid(self.model(enc["input_ids"], key_padding_mask=~enc["attention_mask"]))  # expect: MC518 deployment
        return [{"hide": bool((p > self.threshold).any()), "scores": dict(zip(LABELS, p.tolist()))} for p in probs]

    async def __call__(self, request: Request) -> Dict:
        payload = await request.json()
        return await self.moderate(payload["message"])


app = ChatModerator.bind(threshold=0.5)

if __name__ == "__main__":
    serve.run(app, route_prefix="/moderate")
