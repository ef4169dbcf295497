"""Baseball play-by-play commentary (Hub remote code: configuration and modeling in one file).

A small GPT that writes a line of radio-style commentary for each play from structured event
tokens (inning, outs, runners, batter, pitch, result). The game state is encoded once and its
key/value cache reused for every play of the half-inning; each play's event tokens are then
fed as one chunk and the commentary decoded greedily.

Source: pytorch/pytorch PR #111007; conventions.md §1, §2.7, §5 item 8
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class PlayByPlayConfig(PretrainedConfig):
    model_type = "play_by_play_gpt"

    def __init__(self, vocab_size=256, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                 bos_token_id=1, eos_token_id=2, **kwargs):
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        super().__init__(bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


class EventTokenizer:
    def __init__(self, words):
        self.vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))
        self.inverse = {i: w for w, i in self.vocab.items()}

    def encode(self, text):
        return [self.vocab.get(w, 3) for w in text.split()]

    def decode(self, ids):
        return " ".join(self.inverse.get(i, "<unk>") for i in ids if i > 3)


class KVCache:
    def __init__(self, n_layer):
        self.keys = [None] * n_layer
        self.values = [None] * n_layer

    def __len__(self):
        return 0 if self.keys[0] is None else self.keys[0].size(-2)

    def update(self, layer_idx, k, v):
        if self.keys[layer_idx] is not None:
            k = torch.cat([self.keys[layer_idx], k], dim=-2)
            v = torch.cat([self.values[layer_idx], v], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v

    def copy(self):
        other = KVCache(len(self.keys))
        other.keys, other.values = list(self.keys), list(self.values)
        return other


class CausalSelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        q_len, kv_len = q.size(-2), k.size(-2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril(kv_len - q_len))
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class PlayByPlayLM(PreTrainedModel):
    config_class = PlayByPlayConfig
    base_model_prefix = "transformer"

    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, cache=None, labels=None):
        past = len(cache) if cache is not None else 0
        pos = torch.arange(past, past + input_ids.size(1), device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x, cache)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits}


@torch.no_grad()
def call_plays(model, tokenizer, game_state, plays, max_new_tokens=12):
    model.eval()
    state_cache = KVCache(model.config.n_layer)
    model(torch.tensor([[model.config.bos_token_id] + tokenizer.encode(game_state)]), state_cache)
    lines = []
    for play in plays:
        cache = state_cache.copy()
        logits = model(torch.tensor([tokenizer.encode(play)]), cache)["logits"]
        out = []
        for _ in range(max_new_tokens):
            next_id = int(logits[0, -1].argmax())
            if next_id == model.config.eos_token_id:
                break
            out.append(next_id)
            logits = model(torch.tensor([[next_id]]), cache)["logits"]
        lines.append(tokenizer.decode(out))
    return lines


if __name__ == "__main__":
    torch.manual_seed(0)
    state = "inning_7 top outs_1 score_3_2 runner_1b"
    plays = ["batter_ortiz pitch_slider count_2_1 result_double runner_scores",
             "batter_diaz pitch_fastball count_0_2 result_strikeout_swinging"]
    words = " ".join([state] + plays + ["and", "it's", "a", "line", "drive", "down", "the", "line"]).split()
    tokenizer = EventTokenizer(words)
    model = PlayByPlayLM(PlayByPlayConfig())
    for line in call_plays(model, tokenizer, state, plays):
        print(repr(line))
