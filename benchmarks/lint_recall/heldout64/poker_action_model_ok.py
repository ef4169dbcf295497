"""Next-action model for no-limit hold'em hand histories, trained with Hugging Face Accelerate.

A hand is a sequence of events (street marker, seat, action, bet-size bucket). A causal encoder
predicts the next action at every event. ``attn_implementation`` picks fused SDPA for training or
an eager path that also returns the attention maps, used by ``explain_hand`` in the review tool.

Source: conventions.md section 1 (HF 4.x AttentionMaskConverter row: `1 - mask` inversion; Keras row: `(1-mask) * -1e9`), section 3 item 25 (huggingface/transformers#32195)
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
except ImportError:
    def set_seed(seed):
        torch.manual_seed(seed)

    class Accelerator:
        device = torch.device("cpu")

        def prepare(self, *objs):
            return objs

        def autocast(self):
            return contextlib.nullcontext()

        def backward(self, loss):
            loss.backward()

        def unwrap_model(self, model):
            return model


ACTIONS = ["pad", "fold", "check", "call", "bet", "raise", "allin", "street"]
PAD = 0


@dataclass
class PokerConfig:
    n_actions: int = len(ACTIONS)
    n_seats: int = 9
    n_buckets: int = 10
    d_model: int = 48
    n_heads: int = 4
    n_layers: int = 2
    max_events: int = 64
    attn_implementation: str = "sdpa"


def eager_attention(q, k, v, keep, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    bias = (~keep[:, None, None, :]).to(scores.dtype) * torch.finfo(scores.dtype).min
    scores = scores + bias
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = scores.softmax(dim=-1)
    return probs @ v, probs


def sdpa_attention(q, k, v, keep, causal):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, None, None, :]), None


ATTENTION_FUNCTIONS = {"eager": eager_attention, "sdpa": sdpa_attention}


class PokerLayer(nn.Module):
    def __init__(self, cfg: PokerConfig):
        super().__init__()
        self.h = cfg.n_heads
        self.attn_fn = ATTENTION_FUNCTIONS[cfg.attn_implementation]
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.o = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(), nn.Linear(2 * cfg.d_model, cfg.d_model))

    def forward(self, x, keep, causal):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        out, probs = self.attn_fn(q, k, v, keep, causal)
        x = x + self.o(out.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), probs


class PokerActionModel(nn.Module):
    def __init__(self, cfg: PokerConfig):
        super().__init__()
        self.action = nn.Embedding(cfg.n_actions, cfg.d_model, padding_idx=PAD)
        self.seat = nn.Embedding(cfg.n_seats, cfg.d_model)
        self.bucket = nn.Embedding(cfg.n_buckets, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_events, cfg.d_model)
        self.layers = nn.ModuleList(PokerLayer(cfg) for _ in range(cfg.n_layers))
        self.action_head = nn.Linear(cfg.d_model, cfg.n_actions)
        self.bucket_head = nn.Linear(cfg.d_model, cfg.n_buckets)

    def forward(self, actions, seats, buckets, return_attn=False):
        t = actions.size(1)
        keep = actions.ne(PAD)
        causal = torch.ones(t, t, dtype=torch.bool, device=actions.device).tril()
        x = self.action(actions) + self.seat(seats) + self.bucket(buckets)
        x = x + self.pos(torch.arange(t, device=actions.device))
        maps = []
        for layer in self.layers:
            x, probs = layer(x, keep, causal)
            maps.append(probs)
        out = {"action_logits": self.action_head(x), "bucket_logits": self.bucket_head(x)}
        if return_attn:
            out["attentions"] = maps
        return out


def hand_loss(out, batch):
    tgt_a = batch["actions"][:, 1:].masked_fill(batch["actions"][:, 1:] == PAD, -100)
    tgt_b = batch["buckets"][:, 1:].masked_fill(batch["actions"][:, 1:] == PAD, -100)
    la = F.cross_entropy(out["action_logits"][:, :-1].flatten(0, 1), tgt_a.flatten(), ignore_index=-100)
    lb = F.cross_entropy(out["bucket_logits"][:, :-1].flatten(0, 1), tgt_b.flatten(), ignore_index=-100)
    return la + 0.5 * lb


def random_hands(cfg: PokerConfig, lengths=(9, 5, 12), seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    valid = torch.arange(t)[None] < torch.tensor(lengths)[:, None]
    actions = torch.randint(1, cfg.n_actions, (b, t), generator=g) * valid
    seats = torch.randint(0, cfg.n_seats, (b, t), generator=g) * valid
    buckets = torch.randint(0, cfg.n_buckets, (b, t), generator=g) * valid
    return {"actions": actions, "seats": seats, "buckets": buckets}


@torch.no_grad()
def explain_hand(model_cfg: PokerConfig, state_dict, hand):
    cfg = PokerConfig(**{**model_cfg.__dict__, "attn_implementation": "eager"})
    model = PokerActionModel(cfg)
    model.load_state_dict(state_dict)
    model.eval()
    out = model(hand["actions"], hand["seats"], hand["buckets"], return_attn=True)
    return out["action_logits"].softmax(-1), out["attentions"]


if __name__ == "__main__":
    set_seed(0)
    cfg = PokerConfig()
    accelerator = Accelerator()
    model = PokerActionModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(4):
        batch = random_hands(cfg, seed=step)
        with accelerator.autocast():
            loss = hand_loss(model(**batch), batch)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print(f"loss {loss.item():.4f}")
    assert torch.isfinite(loss)
