"""torchtune-style decoder with KVCache and batched generation from left-padded prompts.

torchtune's `mask` argument is a bool (b, s, s) tensor with True = may attend (it goes straight to
SDPA), and `generate` keeps the same convention for unpadded prompts (`torch.tril`). The
generation helper builds the prompt masks with `torch.triu(..., diagonal=1)`, the
nn.MultiheadAttention way round (True = masked).

Source: rasbt/LLMs-from-scratch#1061 (a `triu(...).bool()` look-ahead mask handed to SDPA),
pytorch/pytorch#29546 (flipped look-ahead mask), conventions.md §3 items 9 and 14, §1 cheat-sheet.
"""
from typing import Optional

import torch
from torch import nn


def get_causal_mask_from_padding_mask(padding_mask: torch.Tensor, target_seq_len: Optional[int] = None) -> torch.Tensor:
    """padding_mask: [b, s], True for real tokens. Returns [b, s, target_seq_len], True = attend."""
    bsz, seq_len = padding_mask.shape
    target_seq_len = seq_len if target_seq_len is None else target_seq_len
    mask = torch.triu(torch.ones(seq_len, target_seq_len, device=padding_mask.device, dtype=torch.bool), diagonal=1).repeat(bsz, 1, 1)  # expect: MC521 torchtune
    mask.narrow(2, 0, seq_len).mul_(padding_mask[:, None, :].expand(-1, seq_len, -1))
    mask.diagonal(dim1=1, dim2=2).copy_(torch.Tensor([True]))
    return mask


def get_position_ids_from_padding_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    return ((padding_mask.cumsum(-1) - 1) * padding_mask).to(torch.int)


class KVCache(nn.Module):
    def __init__(self, batch_size, max_seq_len, num_heads, head_dim, dtype=torch.float32):
        super().__init__()
        cache_shape = (batch_size, num_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.size = 0

    def update(self, k_val: torch.Tensor, v_val: torch.Tensor):
        seq_len = k_val.shape[2]
        self.k_cache[:, :, self.size : self.size + seq_len] = k_val
        self.v_cache[:, :, self.size : self.size + seq_len] = v_val
        self.size += seq_len
        return self.k_cache, self.v_cache


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj, self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False), nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj, self.output_proj = nn.Linear(embed_dim, embed_dim, bias=False), nn.Linear(embed_dim, embed_dim, bias=False)
        self.kv_cache: Optional[KVCache] = None

    def forward(self, x: torch.Tensor, *, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, s_x, _ = x.shape
        q, k, v = (p(x).view(b, s_x, self.num_heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(k, v)
        if mask is not None:
            mask = mask[:, None, :, :]  # [b, 1, s_x, s_y]
        output = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.kv_cache is None and mask is None)  # also: MC521
        return self.output_proj(output.transpose(1, 2).reshape(b, s_x, -1))


class TransformerDecoder(nn.Module):
    def __init__(self, vocab_size=64, embed_dim=32, num_heads=4, num_layers=2, max_seq_len=32):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.tok_embeddings, self.pos_embeddings = nn.Embedding(vocab_size, embed_dim), nn.Embedding(max_seq_len, embed_dim)
        self.layers = nn.ModuleList([MultiHeadAttention(embed_dim, num_heads) for _ in range(num_layers)])
        self.norm, self.output = nn.LayerNorm(embed_dim), nn.Linear(embed_dim, vocab_size, bias=False)

    def setup_caches(self, batch_size: int):
        for layer in self.layers:
            layer.kv_cache = KVCache(batch_size, self.max_seq_len, layer.num_heads, layer.head_dim)

    def forward(self, tokens, *, mask=None, input_pos=None):
        input_pos = torch.arange(tokens.shape[1]) if input_pos is None else input_pos
        h = self.tok_embeddings(tokens) + self.pos_embeddings(input_pos)
        for layer in self.layers:
            h = h + layer(h, mask=mask)
        return self.output(self.norm(h))


@torch.inference_mode()
def generate(model: TransformerDecoder, prompt: torch.Tensor, max_generated_tokens: int, pad_id: int = 0):
    bsz, prompt_length = prompt.shape
    total_response_length = prompt_length + max_generated_tokens
    padding_mask = prompt != pad_id
    if not padding_mask.all():
        # padding in the prompt: extend the padding mask over the tokens still to be generated
        padding_mask = torch.nn.functional.pad(padding_mask, (0, max_generated_tokens), value=True)
        masks = get_causal_mask_from_padding_mask(padding_mask, target_seq_len=model.max_seq_len)
        input_pos = get_position_ids_from_padding_mask(padding_mask)
    else:
        masks = torch.tril(torch.ones(total_response_length, model.max_seq_len, dtype=torch.bool)).unsqueeze(0)
        input_pos = torch.arange(0, total_response_length).unsqueeze(0)
    model.setup_caches(bsz)
    logits = model(prompt, mask=masks[:, :prompt_length], input_pos=input_pos[:, :prompt_length])
    tokens, first_logits = logits[:, -1].argmax(-1, keepdim=True), logits[:, -1]
    generated, curr_pos = [tokens], prompt_length
    for _ in range(max_generated_tokens - 1):
        curr_input_pos = input_pos[:, curr_pos, None].contiguous()
        curr_masks = masks[:, curr_pos, None, :].contiguous()
        logits = model(tokens, mask=curr_masks, input_pos=curr_input_pos)
        tokens = logits[:, -1].argmax(-1, keepdim=True)
        generated.append(tokens)
        curr_pos += 1
    return torch.cat(generated, dim=1), first_logits


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerDecoder().eval()
    prompt = torch.tensor([[0, 0, 5, 9, 12], [7, 3, 8, 14, 6]])  # left padded, pad_id = 0
    batched, batched_logits = generate(model, prompt, max_generated_tokens=6)
    alone = [generate(model, p[p != 0][None], max_generated_tokens=6) for p in prompt]
    print("batched:", batched.tolist(), "alone:", [a[0][0].tolist() for a in alone])
    print("first-step logits, batched vs alone:", [(batched_logits[i] - a[1][0]).abs().max().item() for i, a in enumerate(alone)])
