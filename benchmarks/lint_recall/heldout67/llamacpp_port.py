"""A PyTorch port of llama.cpp's decode path for checking a GGUF conversion.

Weights are stored Q8_0-quantised (blocks of 32 int8 values with one scale)
and dequantised on the fly.  As in llama.cpp, several sequences share one
unified KV cache: every cell records its position and sequence id, and a
batch may mix tokens of different sequences (the `parallel` example).  The
graph follows llm_build_kqv: kq = k @ q, kq_mask, soft_max_ext, kqv.

Source: seed self_attention_mask_guide.txt sections 3 (常见误区: 加法 mask) and 7 (Q3); conventions.md section 1 (direction cheat-sheet: additive masks).
"""
from dataclasses import dataclass, field
from typing import List

import torch

QK8_0 = 32


def quantize_q8_0(w):
    blocks = w.reshape(-1, QK8_0)
    d = blocks.abs().amax(dim=1, keepdim=True) / 127.0
    qs = torch.round(blocks / d.clamp(min=1e-12)).to(torch.int8)
    return {"shape": tuple(w.shape), "d": d.half(), "qs": qs}


def dequantize_q8_0(t):
    return (t["qs"].float() * t["d"].float()).reshape(t["shape"])


def ggml_mul_mat(w, x):
    return x @ dequantize_q8_0(w).T


def ggml_rms_norm(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def ggml_rope(x, pos, n_rot, freq_base=10000.0):
    theta = pos[:, None].float() / freq_base ** (torch.arange(0, n_rot, 2).float() / n_rot)
    cos, sin = theta.cos()[:, None], theta.sin()[:, None]
    x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def ggml_soft_max_ext(a, mask, scale):
    a = a * scale
    if mask is not None:
        a = a * mask  # expect: MC523 multiplied
    return torch.softmax(a, dim=-1)


@dataclass
class llama_hparams:
    n_vocab: int = 128
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    n_ff: int = 128
    n_ctx: int = 64


@dataclass
class llama_batch:
    token: List[int]
    pos: List[int]
    seq_id: List[int]
    logits: List[bool] = field(default_factory=list)


class llama_kv_cache:
    def __init__(self, hp):
        self.k = torch.zeros(hp.n_layer, hp.n_ctx, hp.n_embd)
        self.v = torch.zeros(hp.n_layer, hp.n_ctx, hp.n_embd)
        self.cell_pos = torch.full((hp.n_ctx,), -1, dtype=torch.long)
        self.cell_seq = torch.full((hp.n_ctx,), -1, dtype=torch.long)
        self.head = 0

    def find_slot(self, batch):
        n = len(batch.token)
        if self.head + n > self.cell_pos.numel():
            raise RuntimeError("KV cache is full")
        start, self.head = self.head, self.head + n
        self.cell_pos[start:self.head] = torch.tensor(batch.pos)
        self.cell_seq[start:self.head] = torch.tensor(batch.seq_id)
        return start


def build_kq_mask(kv, batch, n_kv):
    pos, seq = torch.tensor(batch.pos), torch.tensor(batch.seq_id)
    same_seq = kv.cell_seq[None, :n_kv] == seq[:, None]
    past = (kv.cell_pos[None, :n_kv] <= pos[:, None]) & (kv.cell_pos[None, :n_kv] >= 0)
    return torch.zeros(len(batch.token), n_kv).masked_fill(~(same_seq & past), float("-inf"))


class llama_model:
    def __init__(self, hp, seed=0):
        g = torch.Generator().manual_seed(seed)
        rnd = lambda *s: torch.randn(*s, generator=g) * 0.08
        self.hp = hp
        self.tok_embd = rnd(hp.n_vocab, hp.n_embd)
        self.layers = [
            {
                "attn_norm": torch.ones(hp.n_embd), "ffn_norm": torch.ones(hp.n_embd),
                **{name: quantize_q8_0(rnd(hp.n_embd, hp.n_embd)) for name in ("wq", "wk", "wv", "wo")},
                "ffn_gate": quantize_q8_0(rnd(hp.n_ff, hp.n_embd)), "ffn_up": quantize_q8_0(rnd(hp.n_ff, hp.n_embd)),
                "ffn_down": quantize_q8_0(rnd(hp.n_embd, hp.n_ff)),
            }
            for _ in range(hp.n_layer)
        ]
        self.output_norm, self.output = torch.ones(hp.n_embd), quantize_q8_0(rnd(hp.n_vocab, hp.n_embd))


def llama_decode(model, kv, batch):
    hp = model.hp
    n_tokens, head_dim = len(batch.token), hp.n_embd // hp.n_head
    kv_head = kv.find_slot(batch)
    n_kv = kv.head
    pos = torch.tensor(batch.pos)
    kq_mask = build_kq_mask(kv, batch, n_kv)
    kq_scale = 1.0 / head_dim ** 0.5
    cur = model.tok_embd[torch.tensor(batch.token)]
    for il, layer in enumerate(model.layers):
        x = ggml_rms_norm(cur, layer["attn_norm"])
        q = ggml_rope(ggml_mul_mat(layer["wq"], x).view(n_tokens, hp.n_head, head_dim), pos, head_dim)
        k = ggml_rope(ggml_mul_mat(layer["wk"], x).view(n_tokens, hp.n_head, head_dim), pos, head_dim)
        kv.k[il, kv_head:kv_head + n_tokens] = k.reshape(n_tokens, -1)
        kv.v[il, kv_head:kv_head + n_tokens] = ggml_mul_mat(layer["wv"], x)
        keys = kv.k[il, :n_kv].view(n_kv, hp.n_head, head_dim).transpose(0, 1)
        values = kv.v[il, :n_kv].view(n_kv, hp.n_head, head_dim).transpose(0, 1)
        kq = q.transpose(0, 1) @ keys.transpose(1, 2)
        kq = ggml_soft_max_ext(kq, kq_mask, kq_scale)
        kqv = (kq @ values).transpose(0, 1).reshape(n_tokens, hp.n_embd)
        cur = cur + ggml_mul_mat(layer["wo"], kqv)
        x = ggml_rms_norm(cur, layer["ffn_norm"])
        ff = torch.nn.functional.silu(ggml_mul_mat(layer["ffn_gate"], x)) * ggml_mul_mat(layer["ffn_up"], x)
        cur = cur + ggml_mul_mat(layer["ffn_down"], ff)
    logits = ggml_mul_mat(model.output, ggml_rms_norm(cur, model.output_norm))
    rows = [i for i, want in enumerate(batch.logits) if want] if batch.logits else [n_tokens - 1]
    return logits[rows]


def run_parallel(model, prompts, n_predict=6):
    kv = llama_kv_cache(model.hp)
    batch = llama_batch([], [], [])
    for s, p in enumerate(prompts):
        batch.token += p
        batch.pos += list(range(len(p)))
        batch.seq_id += [s] * len(p)
        batch.logits += [False] * (len(p) - 1) + [True]
    logits = llama_decode(model, kv, batch)
    n_past = [len(p) for p in prompts]
    outputs = [[] for _ in prompts]
    for _ in range(n_predict):
        next_ids = logits.argmax(-1).tolist()
        batch = llama_batch(next_ids, list(n_past), list(range(len(prompts))), [True] * len(prompts))
        for s, t in enumerate(next_ids):
            outputs[s].append(t)
            n_past[s] += 1
        logits = llama_decode(model, kv, batch)
    return outputs, logits


if __name__ == "__main__":
    model = llama_model(llama_hparams())
    prompts = [[1, 15, 27, 99, 4], [1, 8, 8], [1, 60, 61, 62, 63, 64, 65]]
    outputs, logits = run_parallel(model, prompts)
    for p, o in zip(prompts, outputs):
        print(p, "->", o)
    print("finite logits:", bool(torch.isfinite(logits).all()))
