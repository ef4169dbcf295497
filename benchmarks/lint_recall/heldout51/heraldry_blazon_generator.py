"""Heraldic blazon generator (Hub remote code: configuration and modeling in one file).

Writes the blazon of a coat of arms ("Azure, a bend Or between two mullets Argent") from its
structured description (field tincture, ordinary, charges and their tinctures), as used to
caption armorial rolls. A small GPT with a past key/value cache and greedy decoding.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20); seed masked_fill_inplace.txt
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

ATTRIBUTES = ["field:", "ordinary:", "ordinary_tincture:", "charge:", "charge_count:", "charge_tincture:"]
TINCTURES = ["or", "argent", "azure", "gules", "vert", "sable", "purpure"]
BLAZON_WORDS = ["a", "an", "two", "three", "between", "on", "bend", "chevron", "fess", "pale", "cross",
                "mullets", "lions", "rampant", "crescents", "roundels", "fleurs-de-lis", ",", "and"]


class BlazonConfig(PretrainedConfig):
    model_type = "blazon_gpt"

    def __init__(
        self,
        vocab_size=128,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=96,
        mask_fill_value=-1e-9,  # expect: MC516 config
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_positions = n_positions
        self.mask_fill_value = mask_fill_value
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


class BlazonTokenizer:
    def __init__(self):
        words = ["<pad>", "<bos>", "<eos>", "<sep>"] + ATTRIBUTES + TINCTURES + BLAZON_WORDS
        self.vocab = {w: i for i, w in enumerate(words)}
        self.inverse = dict(enumerate(words))

    def encode_arms(self, arms):
        ids = [self.vocab["<bos>"]]
        for key in ATTRIBUTES:
            if key[:-1] in arms:
                ids += [self.vocab[key], self.vocab[str(arms[key[:-1]])]]
        return ids + [self.vocab["<sep>"]]

    def decode(self, ids):
        words = [self.inverse.get(i, "?") for i in ids]
        text = " ".join(w.capitalize() if w in TINCTURES else w for w in words)
        return text.replace(" ,", ",")


class BlazonAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.mask_fill_value = config.mask_fill_value
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, layer_past=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.n_head, -1).transpose(1, 2) for z in self.c_attn(x).split(d, dim=2))
        if layer_past is not None:
            k = torch.cat([layer_past[0], k], dim=2)
            v = torch.cat([layer_past[1], v], dim=2)
        present = (k, v)
        q_len, kv_len = q.size(2), k.size(2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=x.device).tril(kv_len - q_len)
        scores = scores.masked_fill(~allowed, self.mask_fill_value)  # also: MC516
        y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d)), present


class BlazonBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = BlazonAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x, layer_past=None):
        a, present = self.attn(self.ln_1(x), layer_past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class BlazonLMHeadModel(PreTrainedModel):
    config_class = BlazonConfig
    base_model_prefix = "transformer"

    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([BlazonBlock(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, past_key_values=None, labels=None):
        past_len = past_key_values[0][0].size(2) if past_key_values is not None else 0
        pos = torch.arange(past_len, past_len + input_ids.size(1), device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, past_key_values[i] if past_key_values is not None else None)
            presents.append(present)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits, "past_key_values": presents}


@torch.no_grad()
def blazon(model, tokenizer, arms, max_new_tokens=16):
    model.eval()
    out = model(torch.tensor([tokenizer.encode_arms(arms)]))
    words = []
    for _ in range(max_new_tokens):
        next_id = int(out["logits"][0, -1].argmax())
        if next_id == model.config.eos_token_id:
            break
        words.append(next_id)
        out = model(torch.tensor([[next_id]]), past_key_values=out["past_key_values"])
    return tokenizer.decode(words)


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = BlazonTokenizer()
    model = BlazonLMHeadModel(BlazonConfig(vocab_size=len(tokenizer.vocab)))
    arms = {"field": "azure", "ordinary": "bend", "ordinary_tincture": "or", "charge": "mullets",
            "charge_count": "two", "charge_tincture": "argent"}
    print(blazon(model, tokenizer, arms))
