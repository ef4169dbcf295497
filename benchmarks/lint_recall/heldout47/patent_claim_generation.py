"""Patent claim generation with a GPT-2 fine-tuned on independent claims.

Imitates jiehsheng/PatentTransformer (Lee and Hsiang, "Patent claim generation by fine-tuning
OpenAI GPT-2"), which fine-tunes GPT-2 on the first claims of granted patents, with the model
written in transformers' `modeling_gpt2.py` layout: `GPT2Config`, `Conv1D`, `GPT2Attention`
with `c_attn` / `c_proj`, `_split_heads` / `_merge_heads`, the registered `bias` triangle
and an eager `_attn` used when attention weights are asked for, an SDPA path otherwise,
`GPT2MLP`, `GPT2Block`, `GPT2Model` with `wte` / `wpe` / `h` / `ln_f`, `GPT2LMHeadModel`
with the shifted loss, and greedy decoding of a claim from a CPC-subclass prompt.
Synthetic data: templated first claims of four CPC subclasses (A01B tillage, B60L electric
vehicles, G06N neural networks, H02J power supply), right-padded per batch.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8; pytorch/pytorch PR #111007
(cited in conventions.md §1).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CPC = {
    "A01B": ("tillage implement", ["frame", "shank", "disc gang", "depth wheel", "hitch"], "soil"),
    "B60L": ("charging system", ["battery pack", "inverter", "charge port", "controller", "contactor"], "vehicle"),
    "G06N": ("neural network accelerator", ["memory", "systolic array", "buffer", "scheduler", "activation unit"], "tensor"),
    "H02J": ("power supply circuit", ["rectifier", "capacitor", "switch", "transformer", "regulator"], "load"),
}
VERBS = ["receive", "engage", "regulate", "couple", "store", "transfer"]


@dataclass
class GPT2Config:
    vocab_size: int = 256
    n_positions: int = 64
    n_embd: int = 48
    n_layer: int = 2
    n_head: int = 4
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.0
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    pad_token_id: int = 0


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.n_positions
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions),
            persistent=False,
        )
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.num_heads * self.head_dim,))

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(value.size(-1))
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        attn_weights = attn_weights.masked_fill(~causal_mask, mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights.masked_fill(~attention_mask, mask_value)
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value), attn_weights

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query = self._split_heads(query)
        key = self._split_heads(key)
        value = self._split_heads(value)
        if output_attentions:
            attn_output, attn_weights = self._attn(query, key, value, attention_mask)
        else:
            attn_weights = None
            q_len, k_len = query.size(-2), key.size(-2)
            causal_mask = self.bias[:, :, k_len - q_len: k_len, :k_len]
            dropout_p = self.attn_dropout.p if self.training else 0.0
            attn_output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout_p, is_causal=True)  # expect: MC506 method
        attn_output = self._merge_heads(attn_output)
        attn_output = self.resid_dropout(self.c_proj(attn_output))
        return attn_output, attn_weights


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, intermediate_size)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(hidden_states), approximate="tanh")))


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(4 * config.n_embd, config)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        attn_output, attn_weights = self.attn(self.ln_1(hidden_states),
                                              attention_mask=attention_mask,
                                              output_attentions=output_attentions)
        hidden_states = attn_output + hidden_states
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        return hidden_states, attn_weights


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, input_ids, attention_mask=None, output_attentions=False):
        position_ids = torch.arange(input_ids.size(-1)).unsqueeze(0)
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = attention_mask[:, None, None, :].bool()
        all_attentions = []
        for block in self.h:
            hidden_states, attn_weights = block(hidden_states, attention_mask=attention_mask,
                                                output_attentions=output_attentions)
            all_attentions.append(attn_weights)
        return self.ln_f(hidden_states), all_attentions


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def forward(self, input_ids, attention_mask=None, labels=None, output_attentions=False):
        hidden_states, attentions = self.transformer(input_ids, attention_mask=attention_mask,
                                                     output_attentions=output_attentions)
        lm_logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                                   shift_labels.view(-1), ignore_index=-100)
        return loss, lm_logits, attentions


def make_claim(cpc, rng):
    device, parts, obj = CPC[cpc]
    a, b, c = rng.sample(parts, 3)
    verb = rng.choice(VERBS)
    return (f"<|{cpc}|> 1 . a {device} comprising : a {a} ; a {b} coupled to the {a} ; "
            f"and a {c} configured to {verb} the {obj} .")


class ClaimTokenizer:
    def __init__(self, texts):
        words = sorted({w for t in texts for w in t.split()})
        self.vocab = {"<|endoftext|>": 0, **{w: i + 1 for i, w in enumerate(words)}}
        self.inv = {i: w for w, i in self.vocab.items()}
        self.pad_token_id = self.eos_token_id = 0

    def __call__(self, texts):
        ids = [[self.vocab[w] for w in t.split()] + [self.eos_token_id] for t in texts]
        n = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [self.pad_token_id] * (n - len(x)) for x in ids])
        attention_mask = torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def decode(self, ids):
        return " ".join(self.inv[i] for i in ids if i != self.eos_token_id)


@torch.no_grad()
def generate_claim(model, tokenizer, prompt, max_new_tokens=30):
    input_ids = tokenizer([prompt])["input_ids"][:, :-1]
    for _ in range(max_new_tokens):
        _, logits, _ = model(input_ids)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        if next_token.item() == tokenizer.eos_token_id:
            break
        input_ids = torch.cat([input_ids, next_token], dim=1)
    return tokenizer.decode(input_ids[0].tolist())


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    cpcs = list(CPC)
    train_claims = [make_claim(rng.choice(cpcs), rng) for _ in range(320)]
    test_claims = [make_claim(rng.choice(cpcs), rng) for _ in range(64)]
    tokenizer = ClaimTokenizer(train_claims + test_claims)
    config = GPT2Config(vocab_size=len(tokenizer.vocab))
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(8):
        model.train()
        rng.shuffle(train_claims)
        for start in range(0, len(train_claims), 32):
            batch = tokenizer(train_claims[start:start + 32])
            labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
            loss, _, _ = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                               labels=labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        batch = tokenizer(test_claims)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss, _, _ = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    print(f"held-out perplexity {math.exp(loss.item()):.2f}")
    print(generate_claim(model, tokenizer, "<|B60L|> 1 . a"))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
