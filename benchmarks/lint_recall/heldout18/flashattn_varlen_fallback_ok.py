"""Decoder attention written for flash-attn 2 with a PyTorch fallback: padded batches are unpadded with
`_get_unpad_data` (indices, `cu_seqlens`, `max_seqlen_in_batch`) for `flash_attn_varlen_func(...,
causal=True)`; without flash-attn (CPU, old GPUs) a nested `sdpa_fallback` runs
nnf.scaled_dot_product_attention on the padded batch with the (b, 1, 1, s) keep-mask.

Correct twin. Twin: the fallback folds the causal triangle into the keep-mask (no `is_causal`).

Source: pytorch/pytorch#131254 (mask and is_causal together), conventions.md §2.7 (MATH raises
"Explicit attn_mask should not be set when is_causal=True", the CPU flash kernel ANDs them),
pytorch/pytorch PR #105342 / #101089 (is_causal is a hint).
"""
import torch
import torch.nn.functional as nnf
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    from flash_attn import flash_attn_varlen_func
    from flash_attn.bert_padding import index_first_axis, pad_input

    FLASH_ATTN_AVAILABLE = True
except ImportError:
    FLASH_ATTN_AVAILABLE = False


def _get_unpad_data(attention_mask: torch.Tensor):
    seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = nnf.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, max_seqlen_in_batch


class FlashSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.num_heads, self.head_dim, self.dropout = num_heads, hidden_size // num_heads, dropout
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        self.use_flash_attn = FLASH_ATTN_AVAILABLE

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """x: (b, s, d); attention_mask: (b, s), 1 for real tokens, right padded."""
        b, s, _ = x.shape
        qkv = self.Wqkv(x).view(b, s, 3, self.num_heads, self.head_dim)
        dropout_p = self.dropout if self.training else 0.0

        def sdpa_fallback(q, k, v):
            keep = attention_mask[:, None, None, :].bool()  # (b, 1, 1, s), True = attend
            return nnf.scaled_dot_product_attention(q, k, v, attn_mask=keep & torch.ones(s, s, dtype=torch.bool, device=q.device).tril(), dropout_p=dropout_p)

        if self.use_flash_attn and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16):
            indices, cu_seqlens, max_seqlen = _get_unpad_data(attention_mask)
            q, k, v = index_first_axis(qkv.reshape(b * s, 3, self.num_heads, self.head_dim), indices).unbind(1)
            out = flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, causal=True)
            out = pad_input(out, indices, b, s)  # (b, s, h, d)
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (b, h, s, d) each
            out = sdpa_fallback(q, k, v).transpose(1, 2)
        return self.out_proj(out.reshape(b, s, -1))


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(hidden_size), FlashSelfAttention(hidden_size, num_heads)
        self.ln_2 = nn.LayerNorm(hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.GELU(approximate="tanh"), nn.Linear(4 * hidden_size, hidden_size))

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.mlp(self.ln_2(x))


class CausalLM(nn.Module):
    def __init__(self, vocab_size=64, hidden_size=32, num_heads=4, num_layers=2, max_len=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, hidden_size), nn.Embedding(max_len, hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(hidden_size, num_heads) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, labels=None):
        x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1], device=input_ids.device))
        for layer in self.layers:
            x = layer(x, attention_mask)
        logits = self.lm_head(self.ln_f(x))
        if labels is None:
            return logits, None
        labels = labels.masked_fill(attention_mask == 0, -100)
        return logits, nnf.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CausalLM()
    input_ids = torch.tensor([[5, 9, 12, 7, 3, 0, 0], [8, 4, 6, 2, 11, 13, 10]])  # right padded
    attention_mask = (input_ids != 0).long()
    logits, loss = model(input_ids, attention_mask, labels=input_ids)
    loss.backward()
    changed = input_ids.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 64
    with torch.no_grad():
        later, _ = model(changed, attention_mask)
    print("loss:", loss.item(), "positions 0-3 moved by later tokens:", (logits[:, :4] - later[:, :4]).abs().max().item())
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        math_logits, _ = model(input_ids, attention_mask)
    print("MATH backend vs default:", (math_logits - logits).abs().max().item())
