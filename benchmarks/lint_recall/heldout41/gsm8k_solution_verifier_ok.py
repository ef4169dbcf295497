"""GSM8K-style solution verifier on a small Llama decoder, for best-of-n answer selection.

Follows openai/grade-school-math (Cobbe et al., Training Verifiers to Solve Math Word Problems:
calculator annotations <<a*b=c>>, "####" final answers, a value head read at the last token and
trained jointly with the language-modelling loss) on a Llama trunk in the transformers 4.35 layout
(LlamaRMSNorm, rotary embeddings, eager LlamaAttention, AttentionMaskConverter.to_4d with
_make_causal_mask and _expand_mask), left padding for batched scoring.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 items 15 and 16), conventions.md §2.3
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 32
    hidden_size: int = 64
    intermediate_size: int = 172
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


class MathTokenizer:
    chars = "0123456789+-*=<>#QA: "

    def __init__(self):
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, 2
        self.vocab = {c: i + 3 for i, c in enumerate(self.chars)}

    def __call__(self, texts, padding_side="left"):
        ids = [[self.bos_token_id] + [self.vocab[c] for c in t] + [self.eos_token_id] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            sl = slice(width - len(x), width) if padding_side == "left" else slice(0, len(x))
            input_ids[i, sl] = torch.tensor(x)
            attention_mask[i, sl] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class AttentionMaskConverter:
    def __init__(self, is_causal: bool):
        self.is_causal = is_causal

    def to_4d(self, attention_mask_2d, query_length, dtype, key_value_length=None):
        input_shape = (attention_mask_2d.shape[0], query_length)
        past_key_values_length = key_value_length - query_length
        causal_4d_mask = None
        if input_shape[-1] > 1 and self.is_causal:
            causal_4d_mask = self._make_causal_mask(
                input_shape, dtype, device=attention_mask_2d.device, past_key_values_length=past_key_values_length
            )
        expanded_attn_mask = self._expand_mask(attention_mask_2d, dtype, tgt_len=input_shape[-1])
        expanded_4d_mask = expanded_attn_mask if causal_4d_mask is None else causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)
        return expanded_4d_mask

    @staticmethod
    def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0):
        bsz, tgt_len = input_ids_shape
        mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
        mask_cond = torch.arange(mask.size(-1), device=device)
        mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
        mask = mask.to(dtype)
        if past_key_values_length > 0:
            past = torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device)
            mask = torch.cat([past, mask], dim=-1)
        return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)

    @staticmethod
    def _expand_mask(mask, dtype, tgt_len=None):
        bsz, src_len = mask.size()
        tgt_len = tgt_len if tgt_len is not None else src_len
        expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted_mask = 1.0 - expanded_mask
        return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        query_states = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, emb.cos(), emb.sin())
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_ids)
        h = self.post_attention_layernorm(hidden_states)
        return hidden_states + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaForVerifier(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.value_head = nn.Linear(config.hidden_size, 1)
        self.mask_converter = AttentionMaskConverter(is_causal=True)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids)
        seq_length = input_ids.shape[1]
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        mask_4d = self.mask_converter.to_4d(
            attention_mask, seq_length, inputs_embeds.dtype, key_value_length=seq_length)
        hidden_states = inputs_embeds
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, mask_4d, position_ids)
        hidden_states = self.norm(hidden_states)
        return self.lm_head(hidden_states), self.value_head(hidden_states).squeeze(-1)


def make_problem(rng):
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    ab = a * b
    c = rng.randint(1, min(9, ab - 1))
    return f"Q:{a}*{b}-{c} A:", f"<<{a}*{b}={ab}>><<{ab}-{c}={ab - c}>>####{ab - c}"


def corrupt(solution, rng):
    start = solution.index("####") + 4
    i = rng.randrange(start, len(solution))
    return solution[:i] + str((int(solution[i]) + rng.randint(1, 8)) % 10) + solution[i + 1:]


def verifier_batch(tok, rng, n):
    texts, labels = [], []
    for _ in range(n):
        question, solution = make_problem(rng)
        correct = rng.random() < 0.5
        texts.append(question + (solution if correct else corrupt(solution, rng)))
        labels.append(float(correct))
    return tok(texts), torch.tensor(labels)


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    tok = MathTokenizer()
    model = LlamaForVerifier(LlamaConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(400):
        batch, labels = verifier_batch(tok, rng, 64)
        logits, values = model(**batch)
        lm_labels = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        lm_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), lm_labels.reshape(-1), ignore_index=-100)
        vf_loss = F.binary_cross_entropy_with_logits(values[:, -1], labels)
        loss = lm_loss + vf_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} lm {lm_loss.item():.3f} verifier {vf_loss.item():.3f}")
    model.eval()
    solved = 0
    with torch.no_grad():
        for _ in range(100):
            question, solution = make_problem(rng)
            candidates = [solution] + [corrupt(solution, rng) for _ in range(3)]
            batch = tok([question + s for s in candidates])
            _, values = model(**batch)
            solved += int(values[:, -1].argmax().item() == 0)
        batch, _ = verifier_batch(tok, rng, 8)
        width = batch["input_ids"].shape[1]
        mask_4d = model.mask_converter.to_4d(batch["attention_mask"], width, torch.float32, width)
    print(f"best-of-4 solve rate {solved / 100:.2f}, -inf cells {torch.isinf(mask_4d).sum().item()}")
