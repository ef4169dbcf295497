"""Text-to-SQL generation with a small Llama, after defog-ai/sqlcoder.

Imitates defog-ai/sqlcoder's prompt and inference (`### Task` / `### Database Schema` /
`### Answer` sections, greedy decoding with the KV cache, prompts padded on the left) over a
causal LM in the layout of transformers 4.3x `models/llama/modeling_llama.py`: `LlamaConfig`,
`LlamaRMSNorm`, `LlamaRotaryEmbedding` with `rotate_half` / `apply_rotary_pos_emb`,
`LlamaMLP`, eager `LlamaAttention` with `past_key_value`, `LlamaDecoderLayer`,
`LlamaModel._prepare_decoder_attention_mask` on the module-level `_make_causal_mask` /
`_expand_mask`, `LlamaForCausalLM`, position ids from the mask's cumulative sum. Fine-tuning
is on right-padded prompt + query pairs, prompt tokens labelled -100; three toy schemas.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658
(conventions.md section 3 items 15 and 16); conventions.md section 2.3.
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SCHEMAS = {
    "singer": ["name", "age", "country"],
    "stadium": ["name", "capacity", "city"],
    "concert": ["year", "theme", "stadium_id"],
}
NUMS = ["10", "20", "30", "40", "50"]


@dataclass
class LlamaConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 128
    rms_norm_eps: float = 1e-6
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


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


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_position_embeddings).float()
        emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, position_ids):
        return self.cos_cached[position_ids].unsqueeze(1), self.sin_cached[position_ids].unsqueeze(1)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, config.max_position_embeddings)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value=None):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(position_ids)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)
            v = torch.cat([past_key_value[1], v], dim=2)
        past_key_value = (k, v)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output), past_key_value


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value=None):
        attn_out, present = self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_ids, past_key_value)
        hidden_states = hidden_states + attn_out
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states, present


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def _prepare_decoder_attention_mask(self, attention_mask, input_shape, inputs_embeds, past_key_values_length):
        combined_attention_mask = None
        if input_shape[-1] > 1:
            combined_attention_mask = _make_causal_mask(input_shape, inputs_embeds.dtype, inputs_embeds.device,
                                                        past_key_values_length=past_key_values_length)
        if attention_mask is not None:
            expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1])
            combined_attention_mask = expanded_attn_mask if combined_attention_mask is None else expanded_attn_mask.masked_fill(combined_attention_mask.bool(), torch.finfo(inputs_embeds.dtype).min)
        return combined_attention_mask

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None):
        inputs_embeds = self.embed_tokens(input_ids)
        past_len = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        mask = self._prepare_decoder_attention_mask(attention_mask, input_ids.shape, inputs_embeds, past_len)
        hidden_states = inputs_embeds
        presents = []
        for i, layer in enumerate(self.layers):
            hidden_states, present = layer(hidden_states, mask, position_ids, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.norm(hidden_states), presents


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, labels=None, past_key_values=None, position_ids=None):
        if position_ids is None:
            position_ids = attention_mask.long().cumsum(-1) - 1
            position_ids = position_ids.masked_fill(attention_mask == 0, 1)
        hidden_states, presents = self.model(input_ids, attention_mask, position_ids, past_key_values)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return loss, logits, presents

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_new_tokens=10):
        _, logits, past = self(input_ids, attention_mask)
        position_ids = attention_mask.long().sum(-1, keepdim=True) - 1
        out = []
        finished = torch.zeros(input_ids.size(0), dtype=torch.bool)
        for _ in range(max_new_tokens):
            next_tokens = logits[:, -1].argmax(-1)
            next_tokens = next_tokens.masked_fill(finished, self.config.pad_token_id)
            out.append(next_tokens)
            finished |= next_tokens == self.config.eos_token_id
            if finished.all():
                break
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=-1)
            position_ids = position_ids + 1
            _, logits, past = self(next_tokens[:, None], attention_mask, past_key_values=past, position_ids=position_ids)
        return torch.stack(out, dim=1)


def generate_prompt(question, table):
    schema = f"CREATE TABLE {table} ( {' , '.join(SCHEMAS[table])} )"
    return f"### Task Generate a SQL query to answer : {question} ### Database Schema {schema} ### Answer"


def make_example(rng):
    table = rng.choice(list(SCHEMAS))
    col = rng.choice(SCHEMAS[table])
    kind = rng.randrange(3)
    if kind == 0:
        n = rng.choice(NUMS)
        return generate_prompt(f"how many {table} have {col} above {n}", table), f"SELECT COUNT(*) FROM {table} WHERE {col} > {n}"
    if kind == 1:
        return generate_prompt(f"list the {col} of every {table}", table), f"SELECT {col} FROM {table}"
    return generate_prompt(f"what is the average {col} of {table}", table), f"SELECT AVG({col}) FROM {table}"


class Tokenizer:
    def __init__(self):
        self.vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}

    def encode(self, text):
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def decode(self, ids):
        inv = {i: w for w, i in self.vocab.items()}
        return " ".join(inv[i] for i in ids if i > 2)

    def batch(self, prompts, padding_side="left"):
        encoded = [[1] + self.encode(p) for p in prompts]
        width = max(len(e) for e in encoded)
        input_ids = torch.zeros(len(encoded), width, dtype=torch.long)
        attention_mask = torch.zeros(len(encoded), width, dtype=torch.long)
        for i, e in enumerate(encoded):
            sl = slice(width - len(e), width) if padding_side == "left" else slice(0, len(e))
            input_ids[i, sl] = torch.tensor(e)
            attention_mask[i, sl] = 1
        return input_ids, attention_mask


def training_batch(tok, examples):
    prompts = [[1] + tok.encode(p) for p, _ in examples]
    answers = [tok.encode(s) + [2] for _, s in examples]
    width = max(len(p) + len(a) for p, a in zip(prompts, answers))
    input_ids = torch.zeros(len(examples), width, dtype=torch.long)
    attention_mask = torch.zeros(len(examples), width, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        input_ids[i, :len(p) + len(a)] = torch.tensor(p + a)
        attention_mask[i, :len(p) + len(a)] = 1
        labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
    return input_ids, attention_mask, labels


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    tok = Tokenizer()
    train = [make_example(rng) for _ in range(480)]
    test = [make_example(rng) for _ in range(48)]
    for p, s in train + test:
        tok.encode(p + " " + s)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok.vocab) + 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        for start in range(0, len(train), 32):
            input_ids, attention_mask, labels = training_batch(tok, train[start:start + 32])
            loss, _, _ = model(input_ids, attention_mask, labels=labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}")
    model.eval()
    input_ids, attention_mask = tok.batch([p for p, _ in test], padding_side="left")
    generated = model.generate(input_ids, attention_mask, max_new_tokens=12)
    predictions = [tok.decode(row.tolist()) for row in generated]
    exact = sum(pred == sql for pred, (_, sql) in zip(predictions, test)) / len(test)
    print(f"exact-match accuracy {exact:.3f}")
