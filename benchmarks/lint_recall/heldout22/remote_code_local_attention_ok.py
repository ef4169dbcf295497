"""modeling_tinylocal.py: a custom causal LM as shipped for `trust_remote_code=True`.

Hub-style modeling file: a config class, an attention layer holding its causal bias as a
non-persistent buffer (0 on and below the diagonal, -inf above), an optional sliding window
passed per call (`attention_window`), and a `TinyLocalForCausalLM` head. Dependencies are
torch only so the file also runs on its own.

Source: seed masked_fill_inplace.txt (section 与模型缓冲区的配合)
"""
import torch
import torch.nn as nn


class TinyLocalConfig:
    model_type = "tinylocal"

    def __init__(self, vocab_size=48, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                 max_position_embeddings=32, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_attention_heads, self.num_hidden_layers = num_attention_heads, num_hidden_layers
        self.max_position_embeddings = max_position_embeddings


class TinyLocalAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        n = config.max_position_embeddings
        self.num_heads = config.num_attention_heads
        self.c_attn = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.register_buffer("bias", torch.triu(torch.full((n, n), float("-inf")), diagonal=1), persistent=False)

    def forward(self, hidden_states, attention_window=None):
        b, t, d = hidden_states.shape
        q, k, v = self.c_attn(hidden_states).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.num_heads) ** 0.5
        bias = self.bias
        if attention_window is not None:
            pos = torch.arange(self.bias.size(0), device=self.bias.device)
            too_far = (pos[:, None] - pos[None, :]) >= attention_window
            bias = bias.masked_fill(too_far, float("-inf"))
        scores = scores + bias[:t, :t]
        y = scores.softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class TinyLocalForCausalLM(nn.Module):
    config_class = TinyLocalConfig

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList(TinyLocalAttention(config) for _ in range(config.num_hidden_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_window=None):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = x + block(self.ln_f(x), attention_window=attention_window)
        return self.lm_head(self.ln_f(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLocalForCausalLM(TinyLocalConfig()).eval()
    ids = torch.randint(0, 48, (2, 10))
    with torch.no_grad():
        full_before = model(ids)
        local = model(ids, attention_window=3)
        full_after = model(ids)
    print("local differs from full:", (local - full_before).abs().max().item() > 1e-4)
    print("full attention unchanged after a windowed call:", torch.allclose(full_before, full_after))
