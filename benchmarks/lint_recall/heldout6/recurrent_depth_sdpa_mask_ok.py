"""Held-out 6 twin: the recurrent-depth model turning the tokenizer's mask into a bool keep-mask
combined with the causal triangle before SDPA.

Source: seal-rg/recurrent-pretraining#23 asks for a bool (or additive float) mask; the bool form is
used here, True = attend, AND-ed with the causal triangle.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import AutoTokenizer


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.Wqkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, S, E = x.shape
        q, k, v = self.Wqkv(x).view(B, S, 3, self.n_head, E // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.proj(y.transpose(1, 2).reshape(B, S, E))


class SandwichBlock(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.norm_1 = nn.RMSNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.norm_2 = nn.RMSNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.SiLU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x), mask=mask)
        return x + self.mlp(self.norm_2(x))


class RecurrentDepthLM(nn.Module):
    def __init__(self, vocab_size: int, n_embd: int = 256, n_head: int = 4, core_layers: int = 2,
                 mean_recurrence: int = 4) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.core_block = nn.ModuleList([SandwichBlock(n_embd, n_head) for _ in range(core_layers)])
        self.mean_recurrence = mean_recurrence
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                num_steps: Optional[int] = None) -> torch.Tensor:
        x = self.wte(input_ids)
        block_mask = None
        if attention_mask is not None:
            seq_len = input_ids.shape[1]
            causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).tril()
            block_mask = attention_mask[:, None, None, :].bool() & causal
        for _ in range(num_steps or self.mean_recurrence):
            for block in self.core_block:
                x = block(x, mask=block_mask)
        return self.lm_head(x)


def hidden_states_for(queries: list, model: RecurrentDepthLM, name: str) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(name)
    batch = tokenizer(queries, return_tensors="pt", padding="longest", return_token_type_ids=False)
    return model(batch["input_ids"], attention_mask=batch["attention_mask"])
