"""Mistral-style sliding-window attention, eager path, for left-padded batched prompts.

Every token attends to itself and the `sliding_window - 1` tokens before it. Prompts are
left-padded to a common length; position ids come from the cumulative sum of the
`attention_mask`, and the padding is hidden with a finite bias. Written as free functions over a
weights dict and a config dataclass.

Source: seed self_attention_mask_guide.txt §3 and §6; conventions.md §2.3 and §2.9
"""
from dataclasses import dataclass

import torch


@dataclass
class MistralConfig:
    vocab_size: int = 48
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    sliding_window: int = 3
    max_positions: int = 32


def init_weights(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g) * 0.2
    layers = [{"wqkv": rnd(cfg.hidden, 3 * cfg.hidden), "wo": rnd(cfg.hidden, cfg.hidden),
               "w1": rnd(cfg.hidden, 2 * cfg.hidden), "w2": rnd(2 * cfg.hidden, cfg.hidden)}
              for _ in range(cfg.layers)]
    return {"tok": rnd(cfg.vocab_size, cfg.hidden), "pos": rnd(cfg.max_positions, cfg.hidden),
            "layers": layers}


def sliding_window_bias(n, window, dtype=torch.float32):
    future = torch.triu(torch.full((n, n), float("-inf"), dtype=dtype))  # expect: MC503 mistral
    too_far = torch.tril(torch.full((n, n), float("-inf"), dtype=dtype), diagonal=-window)
    return future + too_far


def padding_bias(attention_mask, dtype=torch.float32):
    pad = attention_mask[:, None, None, :] == 0
    return torch.zeros(pad.shape, dtype=dtype).masked_fill(pad, torch.finfo(dtype).min)


def attention(x, layer, bias, heads):
    b, t, d = x.shape
    q, k, v = (x @ layer["wqkv"]).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / (d // heads) ** 0.5 + bias
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v).transpose(1, 2).reshape(b, t, d) @ layer["wo"]


def forward(weights, cfg, input_ids, attention_mask):
    t = input_ids.shape[1]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    bias = sliding_window_bias(t, cfg.sliding_window) + padding_bias(attention_mask)
    x = weights["tok"][input_ids] + weights["pos"][position_ids]
    for layer in weights["layers"]:
        x = x + attention(x, layer, bias, cfg.heads)
        x = x + torch.relu(x @ layer["w1"]) @ layer["w2"]
    return x @ weights["tok"].T


def left_pad(prompts, pad_id=0):
    t = max(map(len, prompts))
    ids = torch.tensor([[pad_id] * (t - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (t - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def greedy_generate(weights, cfg, prompts, max_new_tokens=4):
    input_ids, attention_mask = left_pad(prompts)
    for _ in range(max_new_tokens):
        logits = forward(weights, cfg, input_ids, attention_mask)
        next_ids = logits[:, -1].argmax(-1, keepdim=True)
        input_ids = torch.cat([input_ids, next_ids], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(next_ids)], dim=1)
    return input_ids, attention_mask


if __name__ == "__main__":
    cfg = MistralConfig()
    weights = init_weights(cfg)
    prompts = [[5, 6, 7, 8, 9], [11, 12], [20, 21, 22]]
    ids, mask = greedy_generate(weights, cfg, prompts)
    logits = forward(weights, cfg, ids, mask)
    print("generated", ids[:, -4:].tolist())
    print("nan in logits", torch.isnan(logits).any().item())
