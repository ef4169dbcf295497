"""Vision-language-action backbone in the lerobot pi0 layout: prefix-LM masks over image, text, actions (correct twin).

Source: huggingface/lerobot PR #710 ("Use safe negative constant for half-precision
masking": `torch.where(attention_mask, att_weights, big_neg)` with a float32-sized `big_neg` on
bfloat16 / float16 weights), conventions.md §3 item 19 and §2.3. The float32 minimum rounds to
-inf in the bfloat16 weights, padded prefix rows (every key masked) become NaN, and the NaN
reaches real tokens through the next layer's values.
Twin: `big_neg = torch.finfo(att_weights.dtype).min`, the minimum of the weights' own dtype.
"""

import torch
import torch.nn.functional as F
from torch import nn


def make_att_2d_masks(pad_masks, att_masks):
    """Copied from big_vision: tokens attend to earlier blocks and their own block.

    pad_masks: bool (B, N), True at real tokens. att_masks: int (B, N), 1 where a new causal
    block starts, 0 where the token shares attention with the previous one.
    """
    if att_masks.ndim != 2:
        raise ValueError(att_masks.ndim)
    if pad_masks.ndim != 2:
        raise ValueError(pad_masks.ndim)
    cumsum = torch.cumsum(att_masks, dim=1)
    att_2d_masks = cumsum[:, None, :] <= cumsum[:, :, None]
    pad_2d_masks = pad_masks[:, None, :] * pad_masks[:, :, None]
    return att_2d_masks & pad_2d_masks


def eager_attention_forward(attention_mask, head_dim, query_states, key_states, value_states):
    query_states = query_states.transpose(1, 2)
    key_states = key_states.transpose(1, 2)
    att_weights = torch.matmul(query_states, key_states.transpose(2, 3))
    att_weights *= head_dim**-0.5
    big_neg = torch.finfo(att_weights.dtype).min
    masked_att_weights = torch.where(attention_mask[:, None, :, :], att_weights, big_neg)
    probs = F.softmax(masked_att_weights, dim=-1)
    probs = probs.to(dtype=value_states.dtype)
    att_output = torch.matmul(probs, value_states.permute(0, 2, 1, 3))
    return att_output.permute(0, 2, 1, 3).reshape(query_states.shape[0], -1, query_states.shape[1] * head_dim)


class Layer(nn.Module):
    def __init__(self, width, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, width // num_heads
        self.input_layernorm = nn.RMSNorm(width)
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(self, hidden_states, attention_mask):
        b, n, _ = hidden_states.shape
        h = self.input_layernorm(hidden_states)
        q, k, v = (p(h).view(b, n, self.num_heads, self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
        hidden_states = hidden_states + self.o_proj(eager_attention_forward(attention_mask, self.head_dim, q, k, v))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class PrefixActionBackbone(nn.Module):
    def __init__(self, width=128, num_heads=4, depth=2, action_dim=7, vocab_size=1000):
        super().__init__()
        self.image_proj = nn.Linear(64, width)
        self.lang_emb = nn.Embedding(vocab_size, width)
        self.action_in = nn.Linear(action_dim, width)
        self.layers = nn.ModuleList([Layer(width, num_heads) for _ in range(depth)])
        self.norm = nn.RMSNorm(width)
        self.action_out = nn.Linear(width, action_dim)

    def to_bfloat16(self):
        return self.to(dtype=torch.bfloat16)

    def embed_prefix(self, img_patches, lang_tokens, lang_masks):
        img = self.image_proj(img_patches)
        lang = self.lang_emb(lang_tokens) * img.shape[-1] ** 0.5
        embs = torch.cat([img, lang], dim=1)
        img_masks = torch.ones(img.shape[:2], dtype=torch.bool, device=img.device)
        pad_masks = torch.cat([img_masks, lang_masks], dim=1)
        att_masks = torch.zeros(pad_masks.shape, dtype=torch.long, device=img.device)  # bidirectional prefix
        return embs, pad_masks, att_masks

    def forward(self, img_patches, lang_tokens, lang_masks, noisy_actions):
        prefix, prefix_pad, prefix_att = self.embed_prefix(img_patches, lang_tokens, lang_masks)
        suffix = self.action_in(noisy_actions)
        suffix_pad = torch.ones(suffix.shape[:2], dtype=torch.bool, device=suffix.device)
        suffix_att = torch.zeros(suffix.shape[:2], dtype=torch.long, device=suffix.device)
        suffix_att[:, 0] = 1  # actions attend to the prefix, the prefix does not see them
        pad_masks = torch.cat([prefix_pad, suffix_pad], dim=1)
        att_2d_masks = make_att_2d_masks(pad_masks, torch.cat([prefix_att, suffix_att], dim=1))
        h = torch.cat([prefix, suffix], dim=1)
        for layer in self.layers:
            h = layer(h, att_2d_masks)
        return self.action_out(self.norm(h[:, -noisy_actions.shape[1] :]))


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = PrefixActionBackbone().eval()
    img = torch.randn(2, 16, 64)
    lang = torch.randint(1, 1000, (2, 8))
    lang_masks = torch.ones(2, 8, dtype=torch.bool)
    lang_masks[1, 5:] = False  # second instruction is shorter: padded language tokens
    actions = torch.randn(2, 10, 7)
    with torch.no_grad():
        ref = policy(img, lang, lang_masks, actions)
        out = policy.to_bfloat16()(img.bfloat16(), lang, lang_masks, actions.bfloat16())
    print("float32 finite:", torch.isfinite(ref).all().item())
    print("bfloat16 finite per sample:", torch.isfinite(out).flatten(1).all(-1).tolist())
    print("max |bf16 - fp32|:", (out.float() - ref).abs().max().item())
