"""A Mixtral-style sparse mixture-of-experts decoder trained on two synthetic domains.

Layout after transformers' `modeling_mixtral.py`: `MixtralRMSNorm`, rotary embeddings,
grouped-query `MixtralAttention` (eager), `MixtralBlockSparseTop2MLP` experts behind a
`MixtralSparseMoeBlock` router with top-2 routing and renormalised weights, the Switch
`load_balancing_loss_func` that skips padding tokens, `MixtralModel._update_causal_mask`
and `MixtralForCausalLM` adding `router_aux_loss_coef` times the auxiliary loss. The demo
reports held-out loss and how the experts split the two domains.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20); conventions.md
§1 (values used in the wild) and §5 item 5; seed masked_fill_inplace.txt (例子).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MixtralConfig:
    vocab_size: int = 64
    hidden_size: int = 64
    intermediate_size: int = 96
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    num_local_experts: int = 4
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.02
    rope_theta: float = 10000.0
    pad_token_id: int = 0


class MixtralRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(seq_len: int, dim: int, theta: float):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    emb = torch.outer(torch.arange(seq_len).float(), inv_freq).repeat(1, 2)
    return emb.cos(), emb.sin()


class MixtralAttention(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        kv_dim = config.num_key_value_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv_dim, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        bsz, q_len, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.num_key_value_groups, dim=1)
        v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        attn_weights = attn_weights.masked_fill(attention_mask == 0, torch.finfo(attn_weights.dtype).min)
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = (attn_weights @ v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)

    def forward(self, hidden_states):
        return self.w2(F.silu(self.w1(hidden_states)) * self.w3(hidden_states))


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(config.hidden_size, self.num_experts, bias=False)
        self.experts = nn.ModuleList(
            MixtralBlockSparseTop2MLP(config) for _ in range(self.num_experts)
        )

    def forward(self, hidden_states):
        bsz, seq_len, dim = hidden_states.shape
        flat = hidden_states.view(-1, dim)
        router_logits = self.gate(flat)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights = (routing_weights / routing_weights.sum(dim=-1, keepdim=True)).to(
            flat.dtype
        )
        final = torch.zeros_like(flat)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.numel() == 0:
                continue
            current = self.experts[expert_idx](flat[top_x]) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current)
        return final.view(bsz, seq_len, dim), router_logits


def load_balancing_loss_func(gate_logits, num_experts: int, top_k: int, attention_mask):
    concatenated = torch.cat(list(gate_logits), dim=0)
    routing_weights = F.softmax(concatenated, dim=-1)
    _, selected = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected, num_experts).float()
    token_keep = attention_mask.reshape(-1).float().repeat(len(gate_logits))
    tokens_per_expert = (expert_mask * token_keep[:, None, None]).sum(0) / token_keep.sum()
    router_prob_per_expert = (routing_weights * token_keep[:, None]).sum(0) / token_keep.sum()
    return num_experts * (tokens_per_expert * router_prob_per_expert[None]).sum()


class MixtralDecoderLayer(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.self_attn = MixtralAttention(config)
        self.block_sparse_moe = MixtralSparseMoeBlock(config)
        self.input_layernorm = MixtralRMSNorm(config.hidden_size)
        self.post_attention_layernorm = MixtralRMSNorm(config.hidden_size)

    def forward(self, hidden_states, **kwargs):
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), **kwargs)
        moe_out, router_logits = self.block_sparse_moe(self.post_attention_layernorm(hidden_states))
        return hidden_states + moe_out, router_logits


class MixtralModel(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(
            MixtralDecoderLayer(config) for _ in range(config.num_hidden_layers)
        )
        self.norm = MixtralRMSNorm(config.hidden_size)

    def _update_causal_mask(self, attention_mask, seq_len: int):
        causal = torch.tril(
            torch.ones(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device)
        )
        return (causal[None, None] & attention_mask[:, None, None, :].bool()).long()

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embed_tokens(input_ids)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        position_embeddings = rotary_cos_sin(input_ids.shape[1], head_dim, self.config.rope_theta)
        causal_mask = self._update_causal_mask(attention_mask, input_ids.shape[1])
        all_router_logits = []
        for decoder_layer in self.layers:
            hidden_states, router_logits = decoder_layer(
                hidden_states, position_embeddings=position_embeddings, attention_mask=causal_mask
            )
            all_router_logits.append(router_logits)
        return self.norm(hidden_states), tuple(all_router_logits)


class MixtralForCausalLM(nn.Module):
    def __init__(self, config: MixtralConfig):
        super().__init__()
        self.config = config
        self.model = MixtralModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, labels=None):
        hidden_states, router_logits = self.model(input_ids, attention_mask)
        logits = self.lm_head(hidden_states)
        if labels is None:
            return logits, router_logits
        loss = F.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
        )
        aux = load_balancing_loss_func(
            router_logits,
            self.config.num_local_experts,
            self.config.num_experts_per_tok,
            attention_mask,
        )
        return loss + self.config.router_aux_loss_coef * aux, logits, router_logits


def make_batch(batch_size: int, gen: torch.Generator, pad_id: int = 0):
    """Domain 0: noisy counting in tokens 10-29; domain 1: period-3 motifs in tokens 30-63."""
    lengths = torch.randint(12, 33, (batch_size,), generator=gen)
    domains = torch.randint(0, 2, (batch_size,), generator=gen)
    ids = torch.full((batch_size, int(lengths.max())), pad_id, dtype=torch.long)
    for b in range(batch_size):
        n = int(lengths[b])
        if domains[b] == 0:
            start = int(torch.randint(0, 20, (1,), generator=gen))
            seq = 10 + (start + torch.arange(n)) % 20
        else:
            motif = torch.randint(30, 64, (3,), generator=gen)
            seq = motif.repeat(n // 3 + 1)[:n]
        noise = torch.rand(n, generator=gen) < 0.1
        ids[b, :n] = torch.where(noise, torch.randint(10, 64, (n,), generator=gen), seq)
    attention_mask = (ids != pad_id).long()
    labels = ids.masked_fill(attention_mask == 0, -100)
    return ids, attention_mask, labels, domains


def main():
    torch.manual_seed(0)
    config = MixtralConfig()
    model = MixtralForCausalLM(config)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(150):
        ids, mask, labels, _ = make_batch(16, gen)
        loss, _, _ = model(ids, mask, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    ids, mask, labels, domains = make_batch(64, torch.Generator().manual_seed(1))
    with torch.no_grad():
        loss, _, router_logits = model(ids, mask, labels)
        probe = ids.clone()
        probe[:, 8] = 10 + (probe[:, 8] + 7) % 54
        base_logits, _ = model(ids, mask)
        probe_logits, _ = model(probe, mask)
    top1 = router_logits[-1].argmax(-1).view(ids.shape)
    share = [
        (top1[domains == d][mask[domains == d].bool()] == 0).float().mean().item() for d in (0, 1)
    ]
    moved = (base_logits[:, :8] - probe_logits[:, :8]).abs().max().item()
    print(
        f"held-out loss {loss.item():.3f}; expert 0 share by domain {share[0]:.2f}, {share[1]:.2f}"
    )
    print(f"logits before position 8 moved by {moved:.2e} when token 8 changes")


if __name__ == "__main__":
    main()
